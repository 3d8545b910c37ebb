import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import type { Command } from 'commander';
import { ValidationError } from '@srpo/core';
import { readDecisions, readPin, writePin } from '@srpo/serving';
import { loadCliConfig } from '../cli-config';
import { publishCommand } from './publish.command';

/** The command with commander's exits turned into throws (addCommand'ed subcommands do not inherit it). */
function command(): Command {
  const c = publishCommand(() => loadCliConfig({}), {});
  for (const x of [c, ...c.commands]) x.exitOverride().configureOutput({ writeOut: () => undefined, writeErr: () => undefined });
  return c;
}

describe('srpo publish', () => {
  it('has rollback and unpin beside its own action', () => {
    expect(command().commands.map((c) => c.name())).toEqual(['rollback', 'unpin']);
    expect(command().options.map((o) => o.long)).toEqual(expect.arrayContaining(['--servers', '--gateways', '--dir', '--gate', '--gate-margin', '--keep']));
  });

  it('rollback needs --to as <policy>@v<N>', async () => {
    await expect(command().parseAsync(['rollback', '--servers', 'http://a:1'], { from: 'user' })).rejects.toThrow(/--to/);
    await expect(command().parseAsync(['rollback', '--to', 'actor', '--servers', 'http://a:1'], { from: 'user' })).rejects.toThrow(ValidationError);
  });

  it('unpin takes --dir from publish and records the unpin', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-unpin-'));
    try {
      writePin(dir, { policyId: 'actor', version: 4, model: 'actor@v4', path: '/x', at: 't' });
      await command().parseAsync(['unpin', '--policy', 'actor', '--dir', dir], { from: 'user' });
      expect(readPin(dir, 'actor')).toBeUndefined();
      expect(readDecisions(dir).map((d) => [d.decision, d.policyId, d.version])).toEqual([['unpin', 'actor', 4]]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
