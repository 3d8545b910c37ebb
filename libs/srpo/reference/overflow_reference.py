# Independent float64 reference (PyTorch) of the clipped / dual-clipped surrogates of libs/srpo,
# for libs/srpo/src/objective-overflow.spec.ts. Run: python3 libs/srpo/reference/overflow_reference.py
# It shares no code with the library: it writes the formulas of docs/objective.md directly.
# In float64, exp(L) of the floored set is +inf and max(-inf, c*A) = c*A exactly, so the loss
# WITH the floored set is the mathematically exact value under the dual clip; gradients are taken
# on the batch WITHOUT that set (0 * inf would make them NaN here).
import torch, math, json
torch.set_default_dtype(torch.float64)
EPS_LOW, EPS_HIGH, C = 0.2, 0.2, 3.0
BATCH = [
  ('p1', 1.0, [([-1.2, -0.7, -2.3], [-1.1, -0.75, -2.2], [1, 1, 1]), ([-0.4, -1.9], [-0.45, -1.8], [1, 1])]),
  ('n1', -0.8, [([-0.9, -9999.0, -1.4], [-1.0, -3.2, -1.3], [1, 1, 1]), ([-2.0, -0.6], [-2.1, -0.5], [1, 1])]),
  ('n2', -0.5, [([-1.5, -0.3, -0.8, -2.2], [-1.3, -0.35, -0.7, -2.0], [1, 1, 0, 1])]),
  ('p2', 0.3, [([-0.5], [-0.6], [1]), ([-1.0, -1.1], [-0.9, -1.3], [1, 1]), ([-2.5, -0.2], [-2.4, -0.25], [1, 0])]),
]
def f32(x): return float(torch.tensor(x, dtype=torch.float32))

def surrogate(r, a, dual):
    ppo = torch.minimum(r * a, torch.clamp(r, 1 - EPS_LOW, 1 + EPS_HIGH) * a)
    if dual and a < 0:
        return torch.maximum(ppo, torch.tensor(C * a))
    return ppo

def loss_and_grad(batch, objective, reduction='sqrt', dual=True):
    news = [[torch.tensor(m[1], requires_grad=True) for m in s[2]] for s in batch]
    terms = []
    for s, ns in zip(batch, news):
        a = f32(s[1])
        if objective == 'srpo':
            K = len(s[2])
            c = {'sqrt': 1 / math.sqrt(K), 'sum': 1.0, 'mean': 1.0 / K}[reduction]
            L = sum(((n - torch.tensor(m[0])) * torch.tensor(m[2], dtype=torch.float64)).sum() for n, m in zip(ns, s[2])) * c
            terms.append(surrogate(torch.exp(L), a, dual))
        elif objective == 'gspo':
            for n, m in zip(ns, s[2]):
                mask = torch.tensor(m[2], dtype=torch.float64)
                L = ((n - torch.tensor(m[0])) * mask).sum() / mask.sum()
                terms.append(surrogate(torch.exp(L), a, dual))
        else:
            for n, m in zip(ns, s[2]):
                for u in range(len(m[0])):
                    if m[2][u] == 1:
                        terms.append(surrogate(torch.exp(n[u] - m[0][u]), a, dual))
    loss = -torch.stack(terms).mean()
    ok = bool(torch.isfinite(loss.detach()))
    grads = None
    if ok:
        loss.backward()
        grads = [[[float(x) for x in n.grad] for n in ns] for ns in news]
    return float(loss.detach()), grads

others = [s for s in BATCH if s[0] != 'n1']
out = {}
for obj, red in [('srpo', 'sqrt'), ('srpo', 'sum'), ('srpo', 'mean'), ('gspo', 'sqrt'), ('grpo-token', 'sqrt')]:
    key = f'{obj}/{red}'
    lw, _ = loss_and_grad(BATCH, obj, red, True)        # float64: exp(L) = inf, max(-inf, cA) = cA exactly
    lo, go = loss_and_grad(others, obj, red, True)
    out[key] = {'lossWithDual': lw, 'lossWithout': lo, 'gradWithout': go}
print(json.dumps(out, indent=1))

# Dual clip by hand values: one set, K = 1, two tokens, log r = log 4 (r = 4 > c = 3), A = -2
def single(logr_tokens, a, dual):
    n = torch.tensor([-1.0 + logr_tokens[0], -2.0 + logr_tokens[1]], requires_grad=True)
    L = (n - torch.tensor([-1.0, -2.0])).sum()
    loss = -surrogate(torch.exp(L), a, dual)
    loss.backward()
    return float(loss.detach()), [float(x) for x in n.grad]
print('dual r=4 A=-2', single([math.log(4) / 2] * 2, -2.0, True), single([math.log(4) / 2] * 2, -2.0, False))
print('dual r=2 A=-1', single([math.log(2) / 2] * 2, -1.0, True), single([math.log(2) / 2] * 2, -1.0, False))
print('dual r=4 A=+1', single([math.log(4) / 2] * 2, 1.0, True))
