import * as fs from 'fs';
import * as path from 'path';
import { ErrorCode, errorMessage, Logger, SrpoError, ValidationError } from '@srpo/core';
import type { PolicyVersion } from '@srpo/events';
import { PEFT_ADAPTER_CONFIG } from '@srpo/hf';
import { versionedName } from '../lora-adapters';
import { exportLoraVersion } from './adapter-export';
import { GatewayClient } from './gateway-client';
import { LoraServerClient, serverBase } from './lora-server-client';
import { appendDecision, readPin, removePin, writePin, type Pin } from './publish-records';

export interface RollbackOptions {
  servers: readonly string[];
  gateways: readonly string[];
  /** The publisher's export directory (adapters, pins, `decisions.jsonl`). */
  exportDir: string;
  /** The learners' checkpoint store (SRPO_CHECKPOINT_DIR): a checkpoint to export from must lie inside it. */
  checkpointDir: string;
  serverApiKey?: string;
  gatewayApiKey?: string;
  requestTimeoutMs?: number;
  /** Finds a version's announcement (its checkpoint) when its adapter was never exported, e.g. from the policy-versions topic. */
  findVersion?: (policyId: string, version: number) => Promise<PolicyVersion | undefined>;
  logger?: Logger;
}

/** `actor@v12` → `{policyId: 'actor', version: 12}`, failing naming `field`. */
export function parseVersionedName(name: string, field = 'to'): { policyId: string; version: number } {
  const m = /^(.+)@v(\d+)$/.exec(name.trim());
  if (!m || !Number.isSafeInteger(Number(m[2]))) throw new ValidationError(field, `"${name}" is not <policy>@v<N> (e.g. actor@v12)`);
  return { policyId: m[1], version: Number(m[2]) };
}

/**
 * `srpo publish rollback --to <policy>@v<N>`: makes `<policy>@v<N>` the served version at once.
 * 1. The adapter directory `<exportDir>/<policy>/v<N>` is used, or exported from the version's
 *    checkpoint (found with `findVersion`) when it is not there.
 * 2. The pin is written first, so a running publisher does not unload the version meanwhile and
 *    does not switch the gateways away from it: a pin holds until `srpo publish unpin` or, with a
 *    gate, until a newer version passes the gate against the pinned one.
 * 3. The adapter is loaded on every server (one already there counts); if a server refuses or
 *    cannot be reached the pin is put back as it was and the rollback fails, naming the server.
 * 4. Every gateway is told the name; a gateway that fails makes the rollback fail (the pin stays,
 *    so a running publisher tells that gateway at its next reconcile).
 * 5. A `rollback` line is appended to `decisions.jsonl`.
 */
export async function rollbackTo(o: RollbackOptions, policyId: string, version: number): Promise<Pin> {
  const log = o.logger ?? new Logger('publish-rollback');
  const model = versionedName(policyId, version);
  let dir = path.resolve(o.exportDir, policyId, `v${version}`);
  if (!fs.existsSync(path.join(dir, PEFT_ADAPTER_CONFIG))) {
    const v = await o.findVersion?.(policyId, version);
    if (!v) throw new SrpoError(ErrorCode.NOT_FOUND, `${model}: no adapter at ${dir} and no announcement of it on policy-versions to export one from`);
    dir = await exportLoraVersion(v, o.exportDir, o.checkpointDir);
    log.info('adapter exported from the checkpoint', { model, dir });
  }
  const previous = readPin(o.exportDir, policyId);
  const pin: Pin = { policyId, version, model, path: dir, at: new Date().toISOString() };
  writePin(o.exportDir, pin);
  const servers = new LoraServerClient(o.requestTimeoutMs, o.serverApiKey);
  try {
    for (const s of o.servers) log.info('adapter on the server', { server: serverBase(s), model, outcome: await servers.load(serverBase(s), model, dir) });
  } catch (e) {
    if (previous) writePin(o.exportDir, previous);
    else removePin(o.exportDir, policyId);
    throw new SrpoError(ErrorCode.UNAVAILABLE, `rollback to ${model} not done: ${errorMessage(e)}`, { cause: e, retriable: true });
  }
  const gateways = new GatewayClient(o.requestTimeoutMs, o.gatewayApiKey);
  const failed: string[] = [];
  for (const g of o.gateways) {
    try {
      await gateways.setServed(g, policyId, model, version);
      log.info('gateway switched', { gateway: serverBase(g), model });
    } catch (e) {
      failed.push(`${serverBase(g)} (${errorMessage(e)})`);
    }
  }
  appendDecision(o.exportDir, {
    at: pin.at,
    policyId,
    version,
    model,
    decision: 'rollback',
    reason: failed.length === 0 ? 'srpo publish rollback' : `srpo publish rollback; gateways not switched: ${failed.join(', ')}`,
  });
  if (failed.length > 0)
    throw new SrpoError(ErrorCode.UNAVAILABLE, `${model} is pinned and loaded, but these gateways were not switched: ${failed.join(', ')}`, {
      retriable: true,
    });
  return pin;
}

/** `srpo publish unpin --policy <id>`: removes the pin (recorded); the publisher judges the next version against the pinned one. Returns the pin removed. */
export function unpinPolicy(exportDir: string, policyId: string): Pin | undefined {
  const pin = readPin(exportDir, policyId);
  if (!pin) return undefined;
  removePin(exportDir, policyId);
  appendDecision(exportDir, {
    at: new Date().toISOString(),
    policyId,
    version: pin.version,
    model: pin.model,
    decision: 'unpin',
    reason: 'srpo publish unpin',
  });
  return pin;
}
