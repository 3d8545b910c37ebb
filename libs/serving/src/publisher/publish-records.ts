import * as fs from 'fs';
import * as path from 'path';
import { ErrorCode, errorMessage, SrpoError } from '@srpo/core';
import type { HeldOutResult } from './held-out-evaluator';
import type { GateRule } from './gate-rule';

/** The append-only record of what the publisher (and `srpo publish rollback/unpin`) decided, under the publish directory. */
export const DECISIONS_FILE = 'decisions.jsonl';
/** A policy's pin, `<dir>/<policy>/pinned.json`. */
export const PIN_FILE = 'pinned.json';

/** One line of `decisions.jsonl`. */
export interface PublishDecision {
  at: string;
  policyId: string;
  version: number;
  /** `<policy>@v<N>` */
  model: string;
  /**
   * accepted: the gateways were switched to it (by the gate, or with no gate); refused: the gate
   * kept the serving version and the candidate was unloaded; rollback: `srpo publish rollback`
   * switched to it and pinned it; unpin: `srpo publish unpin` removed the pin of this version.
   */
  decision: 'accepted' | 'refused' | 'rollback' | 'unpin';
  reason: string;
  /** The version compared with (the one being served). */
  serving?: { version: number; model: string };
  candidateResult?: Pick<HeldOutResult, 'successes' | 'trials'>;
  servingResult?: Pick<HeldOutResult, 'successes' | 'trials'>;
  /** p̂_candidate − p̂_serving and Newcombe's 95 % interval. */
  difference?: number;
  interval?: [number, number];
  margin?: number;
  rule?: GateRule;
  evaluator?: string;
  /** The server the held-out items were sent to. */
  server?: string;
}

/** A rollback's pin: the gateways serve this version until `srpo publish unpin` or a newer version passes the gate. */
export interface Pin {
  policyId: string;
  version: number;
  model: string;
  /** The adapter's peft directory. */
  path: string;
  at: string;
}

/** Appends one decision (one `write` of one line, so concurrent writers do not interleave within a line). */
export function appendDecision(dir: string, d: PublishDecision): void {
  fs.mkdirSync(dir, { recursive: true });
  fs.appendFileSync(path.join(dir, DECISIONS_FILE), `${JSON.stringify(d)}\n`);
}

/** Every decision recorded under `dir`, oldest first; a torn last line (a crash mid-write) is skipped. */
export function readDecisions(dir: string): PublishDecision[] {
  let text: string;
  try {
    text = fs.readFileSync(path.join(dir, DECISIONS_FILE), 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw new SrpoError(ErrorCode.NOT_FOUND, `${path.join(dir, DECISIONS_FILE)}: cannot be read (${errorMessage(e)})`, { cause: e });
  }
  const out: PublishDecision[] = [];
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    try {
      out.push(JSON.parse(line) as PublishDecision);
    } catch {
      // a torn line: nothing was decided by it
    }
  }
  return out;
}

export function pinFile(dir: string, policyId: string): string {
  return path.resolve(dir, policyId, PIN_FILE);
}

/** The policy's pin, or undefined. */
export function readPin(dir: string, policyId: string): Pin | undefined {
  try {
    const p = JSON.parse(fs.readFileSync(pinFile(dir, policyId), 'utf8')) as Pin;
    return p.policyId === policyId && Number.isInteger(p.version) ? p : undefined;
  } catch {
    return undefined;
  }
}

/** Writes the pin under a temporary name and renames it into place (a reader never sees half of it). */
export function writePin(dir: string, pin: Pin): void {
  const file = pinFile(dir, pin.policyId);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const tmp = `${file}.tmp-${process.pid}-${Date.now()}`;
  fs.writeFileSync(tmp, JSON.stringify(pin));
  fs.renameSync(tmp, file);
}

/** Removes the pin; true when there was one. */
export function removePin(dir: string, policyId: string): boolean {
  try {
    fs.unlinkSync(pinFile(dir, policyId));
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw e;
  }
}
