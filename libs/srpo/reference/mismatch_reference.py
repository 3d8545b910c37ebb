# Independent float64 reference (PyTorch) of the engine/learner mismatch correction of libs/srpo
# (behaviour-correction.ts), for libs/srpo/src/behaviour-correction.spec.ts.
# Run: python3 libs/srpo/reference/mismatch_reference.py < case.json   (prints JSON)
# It shares no code with the library: it writes the formulas of docs/objective.md, section 7:
#   m_S  = mean over the set's trained tokens of (log pi_prox - log pi_engine)
#   TIS  w_S = min(exp(m_S), C);  MIS  w_S = exp(m_S) if |m_S| <= B else 0
#   k3 (engine -> learner) per set = mean of exp(d) - 1 - d, d = prox - engine
#   loss = -(1/|B_kept|) sum_{S kept} w_S * surrogate(L_S, A_S) + beta * mean_u k3(ref - theta)
# where L_S = c(K) sum_j sum_u m_u (log pi_theta - log pi_prox) (the SRPO set log-ratio against
# the proximal policy) and the surrogate is the dual-clipped PPO term. The weight multiplies the
# surrogate here (the library folds it into the advantage); the spec compares the two.
import json, math, sys
import torch

torch.set_default_dtype(torch.float64)


def f32(x):
    return float(torch.tensor(x, dtype=torch.float32))


def surrogate(r, a, eps_low, eps_high, c):
    ppo = torch.minimum(r * a, torch.clamp(r, 1 - eps_low, 1 + eps_high) * a)
    if c is not None and a < 0:
        return torch.maximum(ppo, torch.tensor(c * a))
    return ppo


def main():
    case = json.load(sys.stdin)
    cfg = case['config']
    eps_low, eps_high = cfg['clipLow'], cfg['clipHigh']
    c = cfg['clipRatioC'] if cfg['dualClip'] else None
    mode, cap, bound, beta = cfg['correction'], cfg['cap'], cfg['bound'], cfg['klCoef']
    sets_out = []
    for s in case['sets']:
        d = [p - e for m in s['members'] for p, e, k in zip(m['logpProx'], m['logpBehaviour'], m['mask']) if k]
        mean = sum(d) / len(d)
        k3 = sum(math.exp(min(x, math.log(3.4028234663852886e38) / 2)) - 1 - x for x in d) / len(d)
        if mode == 'tis':
            w = min(math.exp(mean), cap) if mean < 700 else cap
        elif mode == 'mis':
            w = math.exp(mean) if abs(mean) <= bound else 0.0
        else:
            w = 1.0
        sets_out.append({'logRatio': mean, 'k3': k3, 'weight': w})
    out = {'sets': sets_out}
    if 'logpNew' in case:
        # The loss of the corrected step and its gradient with respect to logpNew (float64 on
        # the float32-rounded inputs the library sees).
        news = [[torch.tensor([f32(x) for x in row], requires_grad=True) for row in rows] for rows in case['logpNew']]
        kept = [i for i, so in enumerate(sets_out) if so['weight'] != 0]
        terms = []
        kl_sum = torch.tensor(0.0)
        kl_n = 0
        for i, s in enumerate(case['sets']):
            K = len(s['members'])
            ck = {'sqrt': 1 / math.sqrt(K), 'sum': 1.0, 'mean': 1 / K}[cfg['eventReduction']]
            ell = torch.tensor(0.0)
            for j, m in enumerate(s['members']):
                mask = torch.tensor(m['mask'], dtype=torch.float64)
                prox = torch.tensor([f32(x) for x in m['logpProx']])
                ref = torch.tensor([f32(x) for x in case['logpRef'][i][j]])
                ell = ell + (mask * (news[i][j] - prox)).sum()
                dr = ref - news[i][j]
                kl_sum = kl_sum + (mask * (torch.exp(dr) - dr - 1)).sum()
                kl_n += int(sum(m['mask']))
            L = ck * ell
            a = f32(s['advantage'])
            if i in kept:
                terms.append(sets_out[i]['weight'] * surrogate(torch.exp(L), a, eps_low, eps_high, c))
        policy = -torch.stack(terms).sum() / max(len(kept), 1) if terms else torch.tensor(0.0)
        kl = kl_sum / kl_n
        loss = policy + beta * kl
        loss.backward()
        out['loss'] = loss.item()
        out['kl'] = kl.item()
        out['grad'] = [[[float(g) for g in t.grad] for t in rows] for rows in news]
    json.dump(out, sys.stdout)


main()
