import { EpisodeOutcome, EventCodec, RawRecord, validateEpisodeOutcome } from '@srpo/events';

/**
 * For a re-materialization (`srpo replay --rematerialize`): one outcomes partition's records,
 * in offset order, rewritten so that each episode's latest revision wins.
 *
 * Live, a revision reaches a set only while its group is open; a re-materialization rebuilds with
 * the corrected value instead. For each episode whose outcomes include a valid one of a higher
 * revision than its first, the first record (in its place, so the partition's order and timing
 * stay as they were) carries the latest revision's value, with the first record's event time, and
 * the latest revision's coordinates (sets point at the outcome they used); the latest's own record
 * (and exact copies of it) is left out, and every other outcome of the episode stays (a lower revision is then
 * dead-lettered as SUPERSEDED_OUTCOME). Records that do not decode, or are no valid outcome keyed
 * by their episode, are left as they are for the processor to refuse.
 *
 * @returns the records to process, and how many episodes took a later revision
 */
export function latestOutcomeRevisionsFirst(records: readonly RawRecord[], codec: EventCodec): { records: RawRecord[]; revised: number } {
  const decoded = records.map((r) => outcomeOf(r, codec));
  const first = new Map<string, number>();
  const latest = new Map<string, number>();
  decoded.forEach((o, i) => {
    if (!o) return;
    if (!first.has(o.episodeId)) first.set(o.episodeId, i);
    const best = latest.get(o.episodeId);
    if (best === undefined || o.revision > (decoded[best] as EpisodeOutcome).revision) latest.set(o.episodeId, i);
  });
  const replaced = new Map<number, RawRecord>();
  const dropped = new Set<number>();
  for (const [episodeId, i] of first) {
    const j = latest.get(episodeId) as number;
    const head = decoded[i] as EpisodeOutcome;
    const last = decoded[j] as EpisodeOutcome;
    if (last.revision <= head.revision) continue;
    const value = { ...last, eventTimeMs: head.eventTimeMs };
    // Same bytes as the log when the times agree; otherwise the value as it is processed.
    const bytes = last.eventTimeMs === head.eventTimeMs ? (records[j].value as Buffer) : codec.encode('EpisodeOutcome', value);
    replaced.set(i, { ...records[i], offset: records[j].offset, value: bytes });
    // The latest's record, and any exact copies of it, are in the first one's place now.
    const same = JSON.stringify(last);
    decoded.forEach((o, k) => {
      if (k !== i && o && o.episodeId === episodeId && JSON.stringify(o) === same) dropped.add(k);
    });
  }
  const out: RawRecord[] = [];
  records.forEach((r, i) => {
    if (dropped.has(i)) return;
    out.push(replaced.get(i) ?? r);
  });
  return { records: out, revised: replaced.size };
}

function outcomeOf(r: RawRecord, codec: EventCodec): EpisodeOutcome | undefined {
  if (!r.value) return undefined;
  try {
    const o = codec.decodeAs('EpisodeOutcome', r.value);
    validateEpisodeOutcome(o);
    return r.key?.toString() === o.episodeId ? o : undefined;
  } catch {
    return undefined;
  }
}
