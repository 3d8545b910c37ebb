import { createHash } from 'crypto';
import * as fs from 'fs';
import * as path from 'path';
import { ConfigError } from '@srpo/core';

/** The placeholders a rubric may use; any other `{{name}}` is refused when the file is loaded. */
export const RUBRIC_PLACEHOLDERS = ['prompt', 'response', 'transcript', 'policy', 'task', 'episode'] as const;
export type RubricPlaceholder = (typeof RUBRIC_PLACEHOLDERS)[number];
export type RubricValues = Record<RubricPlaceholder, string>;

/** Largest rubric file read: a template is a page of instructions, not a corpus. */
export const MAX_RUBRIC_BYTES = 64 * 1024;

const PLACEHOLDER = /\{\{\s*([a-zA-Z_]+)\s*\}\}/g;

/**
 * A rubric: the judge's instructions with `{{prompt}}`, `{{response}}` (and the others of
 * {@link RUBRIC_PLACEHOLDERS}) where the judged text goes. Its SHA-256 (of the file's bytes) is
 * recorded in every outcome as `promptSha256`, so an update's audit names the exact rubric
 * that scored its episodes; editing the file changes the hash.
 */
export class RubricTemplate {
  private constructor(
    /** The file's base name, recorded beside the hash (the hash alone is hard to read). */
    readonly name: string,
    readonly text: string,
    readonly sha256: string,
  ) {}

  /** Reads and checks a rubric file; `variable` names the setting in errors (`SRPO_JUDGE_RUBRIC`). */
  static fromFile(file: string, variable = 'SRPO_JUDGE_RUBRIC'): RubricTemplate {
    let bytes: Buffer;
    try {
      const size = fs.statSync(file).size;
      if (size > MAX_RUBRIC_BYTES) throw new ConfigError(variable, `${file} is ${size} bytes; the limit is ${MAX_RUBRIC_BYTES}`);
      bytes = fs.readFileSync(file);
    } catch (e) {
      if (e instanceof ConfigError) throw e;
      throw new ConfigError(variable, `cannot read ${file} (${(e as Error).message})`);
    }
    return RubricTemplate.fromText(path.basename(file), bytes.toString('utf8'), createHash('sha256').update(bytes).digest('hex'), variable);
  }

  /** A rubric from text (tests, built-in rubrics): the hash is of its UTF-8 bytes unless given. */
  static fromText(name: string, text: string, sha256?: string, variable = 'SRPO_JUDGE_RUBRIC'): RubricTemplate {
    const used = new Set<string>();
    for (const m of text.matchAll(PLACEHOLDER)) used.add(m[1]);
    const unknown = [...used].filter((p) => !(RUBRIC_PLACEHOLDERS as readonly string[]).includes(p));
    if (unknown.length > 0)
      throw new ConfigError(
        variable,
        `${name} uses unknown placeholder(s) ${unknown.map((u) => `{{${u}}}`).join(', ')}; known: ${RUBRIC_PLACEHOLDERS.join(', ')}`,
      );
    if (!used.has('response') && !used.has('transcript'))
      throw new ConfigError(variable, `${name} has neither {{response}} nor {{transcript}}: the judge would never see what it scores`);
    return new RubricTemplate(name, text, sha256 ?? createHash('sha256').update(text, 'utf8').digest('hex'));
  }

  /**
   * The rubric with every placeholder replaced, in one pass: text inserted for one placeholder
   * is never searched again, so a response containing `{{prompt}}` stays as written.
   */
  render(values: RubricValues): string {
    return this.text.replace(PLACEHOLDER, (_m, name: string) => values[name as RubricPlaceholder]);
  }
}
