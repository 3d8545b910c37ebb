import * as fs from 'fs';
import * as path from 'path';
import { Command } from 'commander';
import { repoRoot } from '@srpo/core';
import { addFlags, attributeName, flagHelpSuffix, flagsToEnv, GATEWAY_FLAGS, LEARNER_FLAGS, MATERIALIZER_FLAGS, SERVE_FLAGS, type FlagSpec } from './app-flags';
import { childEnvironment } from './apps.command';

/** Parses `args` with the flags only (no action: nothing is launched); throws commander's error. */
function parse(specs: readonly FlagSpec[], args: string[]): Record<string, unknown> {
  const cmd = addFlags(new Command('x'), specs)
    .exitOverride()
    .configureOutput({ writeErr: () => undefined, writeOut: () => undefined });
  cmd.parse(args, { from: 'user' });
  return cmd.opts();
}

const TABLES: [string, readonly FlagSpec[], string][] = [
  ['learner', LEARNER_FLAGS, 'apps/learner/src/learner-config.ts'],
  ['materializer', MATERIALIZER_FLAGS, 'apps/materializer/src/materializer-config.ts'],
  ['serve', SERVE_FLAGS, 'apps/serve/src/serve-config.ts'],
  ['gateway', GATEWAY_FLAGS, 'apps/gateway/src/gateway-config.ts'],
];

describe('app flags → variables', () => {
  it('map each given flag to its variable, paths made absolute, the rest left out', () => {
    const opts = parse(LEARNER_FLAGS, ['--policy', 'solver', '--model', 'models/smol', '--lr', '2e-4', '--sets-per-update', '8', '--backend', 'tensorflow']);
    expect(flagsToEnv(LEARNER_FLAGS, opts, '/work')).toEqual({
      SRPO_POLICY_ID: 'solver',
      SRPO_MODEL_DIR: '/work/models/smol',
      SRPO_LR: '2e-4',
      SRPO_SETS_PER_UPDATE: '8',
      SRPO_BACKEND: 'tensorflow',
    });
  });

  it('--lora alone sets SRPO_LORA to {} (the defaults); with JSON, that JSON', () => {
    expect(flagsToEnv(LEARNER_FLAGS, parse(LEARNER_FLAGS, ['--lora']), '/')).toEqual({ SRPO_LORA: '{}' });
    expect(flagsToEnv(LEARNER_FLAGS, parse(LEARNER_FLAGS, ['--lora', '{"r":4}']), '/')).toEqual({ SRPO_LORA: '{"r":4}' });
  });

  it('normalises booleans and integers; serve, gateway and materializer map too', () => {
    expect(flagsToEnv(GATEWAY_FLAGS, parse(GATEWAY_FLAGS, ['--strict', 'no', '--port', '8101', '--upstream', 'http://h:1/v1']), '/')).toEqual({
      SRPO_GATEWAY_STRICT: 'false',
      SRPO_GATEWAY_PORT: '8101',
      SRPO_GATEWAY_UPSTREAM: 'http://h:1/v1',
    });
    expect(
      flagsToEnv(
        SERVE_FLAGS,
        parse(SERVE_FLAGS, ['--policies', 'a,b', '--checkpoints', 'ck', '--kv-cache-tokens', '4096', '--decode-products', 'learner']),
        '/srv',
      ),
    ).toEqual({
      SRPO_SERVE_POLICIES: 'a,b',
      SRPO_CHECKPOINT_DIR: '/srv/ck',
      SRPO_SERVE_KV_CACHE_TOKENS: '4096',
      SRPO_SERVE_DECODE_PRODUCTS: 'learner',
    });
    expect(() => parse(SERVE_FLAGS, ['--kv-cache-tokens', '-1'])).toThrow(/--kv-cache-tokens.*must be in \[0, 16777216\] \(sets SRPO_SERVE_KV_CACHE_TOKENS\)/);
    expect(flagsToEnv(MATERIALIZER_FLAGS, parse(MATERIALIZER_FLAGS, ['--roles', 'sets', '--metrics-port', '9100', '--brokers', 'k:9092']), '/')).toEqual({
      SRPO_MATERIALIZER_ROLES: 'sets',
      SRPO_METRICS_PORT: '9100',
      KAFKA_BROKERS: 'k:9092',
    });
  });

  it.each([
    [['--sets-per-update', 'many'], /--sets-per-update.*must be an integer \(sets SRPO_SETS_PER_UPDATE\)/],
    [['--port', '70000'], /--port.*must be in \[0, 65535\] \(sets SRPO_HTTP_PORT\)/],
    [['--lr', 'fast'], /--lr.*must be a finite number.*SRPO_LR/],
    [['--backend', 'tpu'], /--backend.*must be one of auto, tensorflow-gpu, tensorflow, cpu \(sets SRPO_BACKEND\)/],
    [['--lora', '{r:4}'], /--lora.*must be JSON \(sets SRPO_LORA\)/],
    [['--policy', ' '], /--policy.*must not be empty/],
  ])('refuses %j naming the flag and its variable', (args, message) => {
    expect(() => parse(LEARNER_FLAGS, args)).toThrow(message);
  });

  it('a flag wins over the environment; an unset flag leaves the variable alone', () => {
    const env = { SRPO_LR: '3e-4', SRPO_SEED: '7', PATH: '/bin', EMPTY: undefined };
    expect(childEnvironment(env, { SRPO_LR: '1e-5', SRPO_EPOCHS: undefined })).toEqual({ SRPO_LR: '1e-5', SRPO_SEED: '7', PATH: '/bin' });
  });

  it('--help lists every flag with its variable and default', () => {
    expect(flagHelpSuffix(LEARNER_FLAGS[0])).toBe('SRPO_POLICY_ID, required');
    expect(flagHelpSuffix(LEARNER_FLAGS.find((s) => s.flag === '--sets-per-update')!)).toBe('SRPO_SETS_PER_UPDATE, default 16');
    const cmd = addFlags(new Command('learner'), LEARNER_FLAGS);
    const help = cmd.helpInformation({ error: false });
    for (const spec of LEARNER_FLAGS) expect(help.replace(/\s+/g, ' ')).toContain(`[${flagHelpSuffix(spec)}]`);
  });

  it('flag attribute names are distinct within each app', () => {
    for (const [, specs] of TABLES) expect(new Set(specs.map((s) => attributeName(s.flag))).size).toBe(specs.length);
  });

  // The config modules stay the only readers of the variables; the flags must name variables
  // they read and repeat the defaults their tables document (read as text: apps never import apps).
  describe.each(TABLES)('%s flags agree with the config module', (_app, specs, file) => {
    // The materializer's set and group settings are parsed (and documented) by libs/materializer for it.
    const files = [file, ...(file.includes('materializer') ? ['libs/materializer/src/materializer-settings.ts'] : [])];
    const source = files.map((f) => fs.readFileSync(path.join(repoRoot(), f), 'utf8')).join('\n');
    it.each(specs.map((s) => [s.flag, s] as [string, FlagSpec]))('%s', (_flag, spec) => {
      expect(source).toContain(spec.variable === 'KAFKA_BROKERS' ? 'readKafkaConnection' : spec.variable);
      // A row of its own in the table: `| `VAR` | default | ... |` (backticks optional).
      const row = source.split('\n').find((l) => new RegExp(`^ \\* \\| \`?${spec.variable}\`? \\|`).test(l));
      if (row) expect(spec.default).toBe(row.split('|')[2].trim().replace(/`/g, ''));
    });
  });
});
