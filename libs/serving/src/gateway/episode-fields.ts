import { OpenAiError } from '../openai-protocol';

/** Where in an episode a completion belongs: the AgentOutput's identity. */
export interface EpisodeFields {
  episodeId: string;
  step: number;
  role: string;
  agentId: string;
}

/** The request headers that carry the fields, and their `metadata` keys (the header wins). */
export const EPISODE_HEADERS = { episodeId: 'x-srpo-episode', step: 'x-srpo-step', role: 'x-srpo-role', agentId: 'x-srpo-agent' } as const;
export const EPISODE_METADATA = { episodeId: 'srpo_episode', step: 'srpo_step', role: 'srpo_role', agentId: 'srpo_agent' } as const;

const HEADER_NAMES: Record<keyof EpisodeFields, string> = { episodeId: 'X-SRPO-Episode', step: 'X-SRPO-Step', role: 'X-SRPO-Role', agentId: 'X-SRPO-Agent' };

/**
 * The episode fields of a request, from its `X-SRPO-*` headers or its `metadata`. All four or
 * none: a partial set is always refused. None: refused in strict mode (400, naming the
 * header), else undefined (the completion is proxied and not recorded).
 */
export function episodeFieldsOf(
  headers: Readonly<Record<string, string | string[] | undefined>>,
  metadata: Readonly<Record<string, string>>,
  strict: boolean,
): EpisodeFields | undefined {
  const read = (k: keyof EpisodeFields): string | undefined => {
    const h = headers[EPISODE_HEADERS[k]];
    const v = Array.isArray(h) ? h[0] : h;
    return v !== undefined && v !== '' ? v : metadata[EPISODE_METADATA[k]];
  };
  const raw = { episodeId: read('episodeId'), step: read('step'), role: read('role'), agentId: read('agentId') };
  const missing = (Object.keys(raw) as (keyof EpisodeFields)[]).filter((k) => raw[k] === undefined);
  if (missing.length === 4 && !strict) return undefined;
  if (missing.length > 0) {
    const k = missing[0];
    throw new OpenAiError(
      400,
      `${HEADER_NAMES[k]}: missing; the gateway records every completion as an AgentOutput and needs the header ${HEADER_NAMES[k]} (or metadata.${EPISODE_METADATA[k]})`,
      HEADER_NAMES[k],
      'missing_episode_field',
    );
  }
  const step = Number(raw.step);
  if (!/^\d+$/.test(raw.step as string) || !Number.isSafeInteger(step)) {
    throw new OpenAiError(400, `X-SRPO-Step: must be a non-negative integer, got ${JSON.stringify(raw.step)}`, 'X-SRPO-Step', 'invalid_episode_field');
  }
  return { episodeId: raw.episodeId as string, step, role: raw.role as string, agentId: raw.agentId as string };
}

/** The output id of choice `index` of `n`: `<episode>.s<step>.<agent>`, with `.c<index>` when n > 1. */
export function outputIdOf(f: EpisodeFields, index: number, n: number): string {
  const base = `${f.episodeId}.s${f.step}.${f.agentId}`;
  return n > 1 ? `${base}.c${index}` : base;
}
