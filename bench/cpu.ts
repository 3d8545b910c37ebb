import { readFileSync } from 'node:fs';
import * as os from 'node:os';

/** CPU model and vector extensions, from /proc/cpuinfo (Linux). */
export function cpuDescription(): { model: string; vector: string; flags: string[] } {
  let text = '';
  try {
    text = readFileSync('/proc/cpuinfo', 'utf8');
  } catch {
    return { model: os.cpus()[0]?.model ?? 'unknown cpu', vector: 'unknown (no /proc/cpuinfo)', flags: [] };
  }
  const field = (name: string): string => new RegExp(`^${name}\\s*:\\s*(.*)$`, 'm').exec(text)?.[1]?.trim() ?? '';
  const flags = new Set(field('flags').split(/\s+/));
  const wanted = ['avx512f', 'avx512bw', 'avx512vl', 'avx512_vnni', 'avx512_bf16', 'avx512_fp16', 'amx_tile', 'amx_bf16', 'avx2', 'fma', 'avx_vnni'];
  const present = wanted.filter((f) => flags.has(f));
  const vector = flags.has('avx512f') ? 'AVX-512' : flags.has('avx2') ? 'AVX2 only (no AVX-512)' : 'no AVX2';
  const model = field('model name') || os.cpus()[0]?.model || 'unknown cpu';
  return { model, vector, flags: present };
}
