import { execFile } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { promisify } from 'util';
import type { ObjectiveReport } from '@srpo/srpo';

const run = promisify(execFile);
const bin = path.resolve(__dirname, '..', '..', '..', 'bin', 'srpo.js');

async function srpo(input: unknown, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-obj-')), 'in.json');
  fs.writeFileSync(file, typeof input === 'string' ? input : JSON.stringify(input));
  try {
    const { stdout, stderr } = await run('node', [bin, 'objective', '--in', file, ...args], { env: { ...process.env, SRPO_LOG_LEVEL: 'error' } });
    return { code: 0, stdout, stderr };
  } catch (e) {
    const err = e as { code: number; stdout: string; stderr: string };
    return { code: err.code, stdout: err.stdout, stderr: err.stderr };
  }
}

describe('npx srpo objective', () => {
  // Two sets in one group, K = 1 and K = 2, rewards 1 and 0.
  // Group: mean 0.5, sample std 0.70711 -> A = +-0.5/(0.70711+1e-6) = +-0.707106.
  // Set a: l = (-1.2+1.1) + (-0.3+0.4) = 0 -> ratio 1, unclipped.
  // Set b: members l1 = -0.5-(-1) = 0.5, l2 = 0 -> L = 0.5/sqrt(2) = 0.353553 -> ratio e^0.353553 = 1.424119;
  //        A < 0 and ratio > 1.2: min(1.424*A, 1.2*A) = 1.424119*A (more negative), not clipped.
  // loss = -(1/2) * (1*0.707106 + 1.424119*(-0.707106)) = 0.149909
  const input = {
    sets: [
      { setId: 'a', groupKey: 'g', reward: 1, members: [{ outputId: 'o1', logpNew: [-1.2, -0.3], logpOld: [-1.1, -0.4], mask: [1, 1] }] },
      {
        setId: 'b',
        groupKey: 'g',
        reward: 0,
        members: [
          { outputId: 'o2', logpNew: [-0.5], logpOld: [-1], mask: [1] },
          { outputId: 'o3', logpNew: [-2, -9], logpOld: [-2, -1], mask: [1, 0] },
        ],
      },
    ],
  };

  it('prints the loss, per-set advantage and ratio, and diagnostics', async () => {
    const { code, stdout } = await srpo(input);
    expect(code).toBe(0);
    const out = JSON.parse(stdout) as ObjectiveReport;
    const a = 0.5 / (Math.SQRT1_2 + 1e-6);
    expect(out.loss).toBeCloseTo(-(1 * a + Math.exp(0.5 / Math.SQRT2) * -a) / 2, 5);
    expect(out.sets.map((s) => s.setId)).toEqual(['a', 'b']);
    expect(out.sets[0].advantage).toBeCloseTo(a, 5);
    expect(out.sets[1].ratio).toBeCloseTo(Math.exp(0.5 / Math.SQRT2), 5);
    expect(out.sets[1].clipped).toBe(false);
    expect(out.diagnostics['losses/clip_frac_low']).toBe(0);
    expect(out.gradLogpNew).toBeUndefined();
  });

  it('prints gradients nested [set][member][token] with --grad', async () => {
    const { code, stdout } = await srpo(input, '--grad');
    expect(code).toBe(0);
    const g = (JSON.parse(stdout) as ObjectiveReport).gradLogpNew as number[][][];
    expect(g.map((s) => s.map((m) => m.length))).toEqual([[2], [1, 2]]);
    // d loss / d logpNew_u of set a = -(1/2) * A * ratio * c(1) = -0.353553 per unmasked token.
    const a = 0.5 / (Math.SQRT1_2 + 1e-6);
    expect(g[0][0][0]).toBeCloseTo(-0.5 * a, 5);
    // Set b: -(1/2) * (-A) * ratio / sqrt(2) for unmasked tokens, 0 for the masked one.
    expect(g[1][0][0]).toBeCloseTo((0.5 * a * Math.exp(0.5 / Math.SQRT2)) / Math.SQRT2, 5);
    expect(g[1][1][1]).toBe(0);
  });

  it('returns a finite loss when a negative-advantage set has a floor behaviour log-prob (−9999), and counts the set', async () => {
    // Set b (A = −0.707106): o2's logpOld −1 → −9999, so L_b = (9998.5 + 0)/√2 and ρ_b is not representable.
    const floored = JSON.parse(JSON.stringify(input)) as typeof input;
    floored.sets[1].members[0].logpOld = [-9999];
    const a = 0.5 / (Math.SQRT1_2 + 1e-6);
    const { code, stdout } = await srpo(floored, '--grad');
    expect(code).toBe(0);
    expect(stdout).not.toContain('null');
    const out = JSON.parse(stdout) as ObjectiveReport;
    // Dual clip (default c = 3): b costs 3·A_b; loss = −(1·a + 3·(−a))/2 = a.
    expect(out.loss).toBeCloseTo(a, 5);
    expect(out.sets[1]).toMatchObject({ setId: 'b', clipped: true, outOfRange: true });
    expect(out.diagnostics['ratio/out_of_range']).toBe(1);
    expect((out.gradLogpNew as number[][][])[1].flat()).toEqual([0, 0, 0]);
    expect((out.gradLogpNew as number[][][])[0][0][0]).toBeCloseTo(-0.5 * a, 5);
    // Without the dual clip the term saturates at 2^64·A_b: large, but a number.
    const off = await srpo({ ...floored, config: { dualClip: false } });
    expect(off.code).toBe(0);
    expect((JSON.parse(off.stdout) as ObjectiveReport).loss / ((2 ** 64 * a) / 2)).toBeCloseTo(1, 4);
  });

  it('exits non-zero with one line naming the set, member and field on bad input', async () => {
    const bad = JSON.parse(JSON.stringify(input)) as typeof input;
    bad.sets[1].members[1].mask = [1];
    const { code, stdout, stderr } = await srpo(bad);
    expect(code).not.toBe(0);
    expect(stdout).toBe('');
    const lines = stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/sets\[1\].*members\[1\].*mask/);
    expect(stderr).not.toMatch(/at .*\.js:\d+/);
  });

  it('refuses an unknown objective', async () => {
    const { code, stderr } = await srpo({ ...input, config: { objective: 'ppo2' } });
    expect(code).not.toBe(0);
    expect(stderr).toMatch(/objective/);
  });
});
