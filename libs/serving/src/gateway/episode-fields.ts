import { DEFAULT_EVENT_LIMITS } from '@srpo/events';
import { OpenAiError } from '../openai-protocol';

/** Where in an episode a completion belongs: the AgentOutput's identity. */
export interface EpisodeFields {
  episodeId: string;
  step: number;
  role: string;
  agentId: string;
  /** `X-SRPO-Turn`: the client numbers its turns itself (else the gateway does, see ConversationTurns). */
  turn?: number;
  /** `X-SRPO-Parent-Output`: the output this turn continues, named by the client. */
  parentOutputId?: string;
  /** `X-SRPO-Subject` (or `metadata.srpo_subject`): the data subject (end user) whose content the request holds. */
  subjectId?: string;
}

/** The optional subject header and its `metadata` key (the header wins). */
export const SUBJECT_HEADER = 'x-srpo-subject';
export const SUBJECT_METADATA = 'srpo_subject';

/** Optional headers of a multi-turn conversation whose client keeps its own turns. */
export const TURN_HEADERS = { turn: 'x-srpo-turn', parentOutputId: 'x-srpo-parent-output' } as const;

/** The request headers that carry the fields, and their `metadata` keys (the header wins). */
export const EPISODE_HEADERS = { episodeId: 'x-srpo-episode', step: 'x-srpo-step', role: 'x-srpo-role', agentId: 'x-srpo-agent' } as const;
export const EPISODE_METADATA = { episodeId: 'srpo_episode', step: 'srpo_step', role: 'srpo_role', agentId: 'srpo_agent' } as const;

/** The four fields every recorded request carries. */
type RequiredField = keyof typeof EPISODE_HEADERS;

const HEADER_NAMES: Record<RequiredField, string> = { episodeId: 'X-SRPO-Episode', step: 'X-SRPO-Step', role: 'X-SRPO-Role', agentId: 'X-SRPO-Agent' };

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
  const read = (k: RequiredField): string | undefined => {
    const h = headers[EPISODE_HEADERS[k]];
    const v = Array.isArray(h) ? h[0] : h;
    return v !== undefined && v !== '' ? v : metadata[EPISODE_METADATA[k]];
  };
  const raw = { episodeId: read('episodeId'), step: read('step'), role: read('role'), agentId: read('agentId') };
  const missing = (Object.keys(raw) as RequiredField[]).filter((k) => raw[k] === undefined);
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
  return {
    episodeId: raw.episodeId as string,
    step,
    role: raw.role as string,
    agentId: raw.agentId as string,
    ...turnFieldsOf(headers),
    ...subjectOf(headers, metadata),
  };
}

function turnFieldsOf(headers: Readonly<Record<string, string | string[] | undefined>>): Pick<EpisodeFields, 'turn' | 'parentOutputId'> {
  const read = (name: string): string | undefined => {
    const h = headers[name];
    const v = Array.isArray(h) ? h[0] : h;
    return v === undefined || v === '' ? undefined : v;
  };
  const turn = read(TURN_HEADERS.turn);
  const parent = read(TURN_HEADERS.parentOutputId);
  if (turn !== undefined && (!/^\d{1,6}$/.test(turn) || Number(turn) > 100_000))
    throw new OpenAiError(
      400,
      `X-SRPO-Turn: must be an integer from 0 to 100000, got ${JSON.stringify(turn.slice(0, 32))}`,
      'X-SRPO-Turn',
      'invalid_episode_field',
    );
  if (parent !== undefined && parent.length > DEFAULT_EVENT_LIMITS.maxIdLength)
    throw new OpenAiError(
      400,
      `X-SRPO-Parent-Output: is ${parent.length} characters long; the limit is ${DEFAULT_EVENT_LIMITS.maxIdLength}`,
      'X-SRPO-Parent-Output',
      'invalid_episode_field',
    );
  return { ...(turn !== undefined ? { turn: Number(turn) } : {}), ...(parent !== undefined ? { parentOutputId: parent } : {}) };
}

/**
 * The output id of choice `index` of `n` at `turn`: `<episode>.s<step>.<agent>`, with `.t<turn>`
 * after the first turn and `.c<index>` when n > 1.
 */
export function outputIdOf(f: EpisodeFields, index: number, n: number, turn = 0): string {
  const base = `${f.episodeId}.s${f.step}.${f.agentId}${turn > 0 ? `.t${turn}` : ''}`;
  return n > 1 ? `${base}.c${index}` : base;
}

function subjectOf(
  headers: Readonly<Record<string, string | string[] | undefined>>,
  metadata: Readonly<Record<string, string>>,
): Pick<EpisodeFields, 'subjectId'> {
  const h = headers[SUBJECT_HEADER];
  const v = (Array.isArray(h) ? h[0] : h) || metadata[SUBJECT_METADATA];
  if (v === undefined || v === '') return {};
  if (v.length > DEFAULT_EVENT_LIMITS.maxIdLength)
    throw new OpenAiError(
      400,
      `X-SRPO-Subject: is ${v.length} characters long; the limit is ${DEFAULT_EVENT_LIMITS.maxIdLength}`,
      'X-SRPO-Subject',
      'invalid_episode_field',
    );
  return { subjectId: v };
}
