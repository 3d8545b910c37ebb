import fc from 'fast-check';
import { DecodeError, EVENT_TYPES, EventCodec, ReasonCode, sampleEvents } from '@srpo/events';
import { checkCase, FuzzTally, fuzzParameters, mutatedBytes } from './fuzz';
import { EVENT_CODEC_REGRESSIONS } from './regressions';

const codec = new EventCodec();
const REASONS = new Set<string>(Object.values(ReasonCode));
/** Per case; a valid decode takes microseconds, the 2^31 count before the bound took seconds. */
const BOUND_MS = 250;

/** Every event type, three samples each, encoded as the producers write them. */
const seeds = [0, 1, 7].flatMap((n) => EVENT_TYPES.map((t) => new Uint8Array(codec.encode(t, sampleEvents(n)[t]))));

const isTyped = (e: unknown): boolean => e instanceof DecodeError && REASONS.has(e.reasonCode);

describe('fuzz: EventCodec.decode on mutated events', () => {
  it('the regression set: each input is refused with its reason code, fast', () => {
    for (const r of EVENT_CODEC_REGRESSIONS) {
      const bytes = Buffer.from(r.base64, 'base64');
      let reason: string | undefined;
      const o = checkCase(
        () => {
          try {
            codec.decode(bytes);
          } catch (e) {
            reason = (e as DecodeError).reasonCode;
            throw e;
          }
        },
        isTyped,
        BOUND_MS,
        () => r.name,
      );
      expect([r.name, o.kind, reason]).toEqual([r.name, 'typed-error', r.reason]);
    }
  });

  it('20,000 mutations: a value or a DecodeError with a known reason, each within 250 ms', () => {
    const tally = new FuzzTally();
    fc.assert(
      fc.property(mutatedBytes(seeds), (bytes) => {
        tally.add(
          checkCase(
            () => codec.decode(Buffer.from(bytes)),
            isTyped,
            BOUND_MS,
            () => Buffer.from(bytes).toString('base64'),
          ),
        );
      }),
      fuzzParameters(20_000),
    );
    // Both outcomes occur: the mutations reach past the header into bodies that still decode.
    expect(tally.values).toBeGreaterThan(100);
    expect(tally.errors).toBeGreaterThan(1_000);
  });
});
