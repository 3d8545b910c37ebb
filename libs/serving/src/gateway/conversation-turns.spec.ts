import { ConversationTurns, tokenDriftOf, type RecordedTurn } from './conversation-turns';

const F = { episodeId: 'ep', step: 0, role: 'solver', agentId: 'a' };
const opts = { maxConversations: 4, maxHeldTokens: 1000, maxTurnsPerConversation: 3, idleTtlMs: 60_000 };
const user = (content: string) => ({ role: 'user', content });
const turnOf = (outputId: string, ctx: number[] = [1, 2], resp: number[] = [3, 4]) => ({ outputId, contextTokenIds: ctx, responseTokenIds: resp });

describe('conversation turns', () => {
  it('numbers the requests of one (episode, step, agent) and links each to the answer its messages continue', () => {
    const turns = new ConversationTurns(opts);
    const m0 = [user('add 1 and 2')];
    const first = turns.place(F, m0);
    expect(first).toEqual({ turn: 0 });
    const call = { name: 'add', arguments: '{"a":1,"b":2}' };
    turns.remember(F, m0, { content: '', calls: [call] }, turnOf('ep.s0.a'));
    // The client echoes the call with its id, arguments re-serialized, content null; then the tool's result.
    const m1 = [
      ...m0,
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'add', arguments: '{ "b": 2, "a": 1 }' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '3' },
    ];
    const second = turns.place(F, m1);
    expect([second.turn, second.parent?.outputId]).toEqual([1, 'ep.s0.a']);
    turns.remember(F, m1, { content: 'It is 3.', calls: [] }, turnOf('ep.s0.a.t1'));
    const third = turns.place(F, [...m1, { role: 'assistant', content: 'It is 3.' }, user('and 3 more?')]);
    expect([third.turn, third.parent?.outputId]).toEqual([2, 'ep.s0.a.t1']);
    // Another agent, or another step, is another conversation.
    expect(turns.place({ ...F, agentId: 'b' }, m1)).toEqual({ turn: 0 });
    expect(turns.place({ ...F, step: 1 }, m1)).toEqual({ turn: 0 });
  });

  it('links nothing when the echoed answer differs from what was answered, or an earlier message was changed', () => {
    const turns = new ConversationTurns(opts);
    turns.place(F, [user('q')]);
    turns.remember(F, [user('q')], { content: 'A', calls: [] }, turnOf('o0'));
    expect(turns.place(F, [user('q'), { role: 'assistant', content: 'B' }, user('r')])).toEqual({ turn: 1 });
    expect(turns.place(F, [user('q!'), { role: 'assistant', content: 'A' }, user('r')])).toEqual({ turn: 2 });
    expect(turns.place(F, [user('q'), { role: 'assistant', content: [{ type: 'text', text: 'A' }] }, user('r')]).parent?.outputId).toBe('o0');
  });

  it('takes a turn and parent named by the client; a named parent it does not hold is linked unchecked', () => {
    const turns = new ConversationTurns(opts);
    turns.remember(F, [user('q')], { content: 'A', calls: [] }, turnOf('o0'));
    const named = turns.place(F, [user('other')], { turn: 5, parentOutputId: 'o0' });
    expect([named.turn, named.parent?.outputId]).toEqual([5, 'o0']);
    expect(turns.place(F, [user('x')])).toEqual({ turn: 6 });
    expect(turns.place(F, [user('x')], { parentOutputId: 'gone' })).toEqual({ turn: 7, parentOutputId: 'gone' });
  });

  it('holds a bounded memory: answers per conversation, conversations, token ids, idle time', () => {
    let now = 0;
    const turns = new ConversationTurns({ ...opts, clock: () => now });
    const ask = (i: number) => [user(`q${i}`)];
    for (let i = 0; i < 4; i++) turns.remember(F, ask(i), { content: 'A', calls: [] }, turnOf(`o${i}`));
    // Three answers kept: the oldest is no parent any more.
    expect(turns.place(F, [...ask(0), { role: 'assistant', content: 'A' }]).parent).toBeUndefined();
    expect(turns.place(F, [...ask(3), { role: 'assistant', content: 'A' }]).parent?.outputId).toBe('o3');
    for (let c = 0; c < 5; c++) turns.place({ ...F, agentId: `x${c}` }, []);
    expect(turns.size).toBe(4);
    // The first conversation was the least recently used: forgotten, it starts at turn 0 again.
    expect(turns.place(F, []).turn).toBe(0);
    // 600 + 600 ids exceed 1000: the older conversation goes.
    const big = Array.from({ length: 300 }, (_, i) => i);
    turns.remember({ ...F, agentId: 'big1' }, [user('q')], { content: 'A', calls: [] }, turnOf('b1', big, big));
    turns.remember({ ...F, agentId: 'big2' }, [user('q')], { content: 'A', calls: [] }, turnOf('b2', big, big));
    expect(turns.place({ ...F, agentId: 'big1' }, [user('q'), { role: 'assistant', content: 'A' }]).parent).toBeUndefined();
    expect(turns.place({ ...F, agentId: 'big2' }, [user('q'), { role: 'assistant', content: 'A' }]).parent?.outputId).toBe('b2');
    now = 60_000;
    expect(turns.place({ ...F, agentId: 'big2' }, [user('q'), { role: 'assistant', content: 'A' }])).toEqual({ turn: 0 });
  });
});

describe('token drift', () => {
  const parent: RecordedTurn = { outputId: 'p', contextTokenIds: Int32Array.from([1, 2, 3]), responseTokenIds: Int32Array.from([7, 8, 9]) };
  it.each([
    ['the parent as sampled, then the new turn', [1, 2, 3, 7, 8, 9, 10, 11], false],
    ['the last sampled token (an end token) written as another end token', [1, 2, 3, 7, 8, 5, 10], false],
    ['a sampled token re-tokenized as two', [1, 2, 3, 7, 80, 81, 9, 10], true],
    ['the parent context changed', [1, 4, 3, 7, 8, 9, 10], true],
    ['a prompt shorter than the parent', [1, 2, 3, 7], true],
  ])('%s', (_what, ctx, drift) => {
    expect(tokenDriftOf(parent, ctx)).toBe(drift);
  });
});
