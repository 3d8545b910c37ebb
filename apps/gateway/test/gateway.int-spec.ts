import type { ChildProcess } from 'child_process';
import * as fs from 'fs';
import * as https from 'https';
import * as os from 'os';
import * as path from 'path';
import OpenAI from 'openai';
import { initTfBackend, repoRoot } from '@srpo/core';
import { createKafka, ensureTopics, EventCodec, readTopicsToEnd, topicCatalog, type AgentOutput } from '@srpo/events';
import { CheckpointStore, Policy } from '@srpo/policy';
import { loadHfModel } from '@srpo/hf';
import { ensureKafka, runCommand, sleep, spawnApp, uniquePrefix } from '@srpo/testing';

const QWEN2 = path.join(repoRoot(), 'libs', 'hf', 'fixtures', 'qwen2');
const TINY = { vocabSize: 32, dModel: 16, nLayers: 1, nHeads: 2, maxSeqLen: 16 };
const AGENT_KEY = 'sk-test-agent-key-0001';
const TINY_ONLY_KEY = 'sk-test-tiny-only-0001';

async function waitForLog(file: string, pattern: RegExp, child: ChildProcess, ms = 90_000): Promise<void> {
  const deadline = Date.now() + ms;
  for (;;) {
    const log = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '';
    if (pattern.test(log)) return;
    if (child.exitCode !== null || Date.now() > deadline)
      throw new Error(`${path.basename(file)}: no ${pattern} (exit ${child.exitCode}):\n${log.slice(-4000)}`);
    await sleep(200);
  }
}

const python = (args: string[]): Promise<string> => runCommand('python3', args);

/**
 * `srpo gateway` in front of `srpo serve`, both as processes on the real broker, called only
 * with the official openai clients. What the gateway records is read back from the topics and
 * checked field by field against what the upstream itself returns for the same seeded request.
 */
describe('srpo gateway in front of srpo serve', () => {
  const brokers = ensureKafka();
  const kafka = createKafka({ brokers, clientId: 'gateway-test' });
  const codec = new EventCodec();
  const prefix = uniquePrefix('gateway');
  const catalog = topicCatalog({ prefix, rawPartitions: 1, derivedPartitions: 1 });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-gateway-'));
  const servePort = 23_000 + Math.floor(Math.random() * 500);
  const gatewayPort = servePort + 500;
  const upstream = new OpenAI({ baseURL: `http://127.0.0.1:${servePort}/v1`, apiKey: 'unused', maxRetries: 0 });
  const headers = { 'X-SRPO-Episode': 'ep-1', 'X-SRPO-Step': '0', 'X-SRPO-Role': 'solver', 'X-SRPO-Agent': 'solver-0' };
  const gateway = new OpenAI({ baseURL: `http://127.0.0.1:${gatewayPort}/v1`, apiKey: AGENT_KEY, maxRetries: 0, defaultHeaders: headers });
  const children: ChildProcess[] = [];
  const logs = { serve: path.join(dir, 'serve.log'), gateway: path.join(dir, 'gateway.log') };
  const TOOLED_DIR = path.join(dir, 'tooled-model');
  const TOOLS_TEMPLATE =
    "{%- if tools %}<|im_start|>system\nYou may call these tools:{% for t in tools %}{{ '\\n' }}{{ t | tojson }}{% endfor %}<|im_end|>\n{% endif %}" +
    "{%- for m in messages %}<|im_start|>{{ m.role + '\\n' + m.content }}<|im_end|>\n{% endfor %}" +
    '{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}';

  const outputs = async (): Promise<AgentOutput[]> =>
    (await readTopicsToEnd(kafka, [catalog.agentOutputs.name])).map((r) => codec.decodeAs('AgentOutput', r.value));

  beforeAll(async () => {
    await initTfBackend('tensorflow');
    const admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, catalog.all());
    await admin.disconnect();
    const store = new CheckpointStore(path.join(dir, 'checkpoints'));
    const hf = new Policy('qwen2', loadHfModel(QWEN2).model, 0);
    await store.save(hf);
    hf.dispose();
    // A model whose chat template renders tools (Hermes style, as Qwen2.5's): the qwen2 fixture with another template.
    fs.cpSync(QWEN2, TOOLED_DIR, { recursive: true });
    fs.writeFileSync(path.join(TOOLED_DIR, 'chat_template.jinja'), TOOLS_TEMPLATE);
    const tooled = new Policy('tooled', loadHfModel(TOOLED_DIR).model, 0);
    await store.save(tooled);
    tooled.dispose();
    const tiny = Policy.create('tiny', TINY, 5);
    await store.save(tiny);
    tiny.dispose();
    const common = { KAFKA_BROKERS: brokers.join(','), SRPO_TOPIC_PREFIX: prefix, SRPO_LOG_LEVEL: 'info' };
    const serve = spawnApp(
      'serve',
      {
        ...common,
        SRPO_CHECKPOINT_DIR: path.join(dir, 'checkpoints'),
        SRPO_SERVE_POLICIES: 'qwen2,tiny,tooled',
        SRPO_SERVE_PORT: String(servePort),
        SRPO_BACKEND: 'tensorflow',
      },
      logs.serve,
    );
    children.push(serve);
    const gw = spawnApp(
      'gateway',
      {
        ...common,
        SRPO_GATEWAY_UPSTREAM: `http://127.0.0.1:${servePort}/v1`,
        SRPO_GATEWAY_PORT: String(gatewayPort),
        SRPO_GATEWAY_API_KEYS: JSON.stringify({ [AGENT_KEY]: ['*'], [TINY_ONLY_KEY]: ['tiny'] }),
      },
      logs.gateway,
    );
    children.push(gw);
    await waitForLog(logs.serve, /OpenAI-compatible API listening/, serve);
    await waitForLog(logs.gateway, /gateway listening/, gw);
  }, 150_000);

  afterAll(() => {
    for (const c of children) c.kill('SIGTERM');
  });

  it('records each chat choice as an AgentOutput, field by field what the upstream returns for the same request, and only then answers', async () => {
    const params = { model: 'qwen2', messages: [{ role: 'user' as const, content: 'solve 3 + 4' }], n: 2, max_tokens: 5, seed: 21, temperature: 0.9 };
    const direct = (await upstream.chat.completions.create({
      ...params,
      logprobs: true,
      return_token_ids: true,
    } as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming)) as OpenAI.Chat.ChatCompletion & {
      prompt_token_ids: number[];
      choices: { token_ids: number[] }[];
    };
    const { data, response } = await gateway.chat.completions.create(params).withResponse();
    const srpo = (data as unknown as { srpo: { output_ids: string[]; policy_id: string; policy_version: number } }).srpo;
    expect(srpo).toEqual({ output_ids: ['ep-1.s0.solver-0.c0', 'ep-1.s0.solver-0.c1'], policy_id: 'qwen2', policy_version: 0 });
    expect(response.headers.get('x-srpo-output-ids')).toBe('ep-1.s0.solver-0.c0,ep-1.s0.solver-0.c1');
    // The agent gets the completion as it asked for it: no log-probs, no ids.
    data.choices.forEach((c, i) => {
      expect(c.message.content).toBe(direct.choices[i].message.content);
      expect(c.logprobs).toBeNull();
      expect((c as unknown as { token_ids?: number[] }).token_ids).toBeUndefined();
    });
    const recorded = (await outputs()).filter((o) => o.episodeId === 'ep-1').sort((a, b) => (a.outputId < b.outputId ? -1 : 1));
    expect(recorded.map((o) => o.outputId)).toEqual(srpo.output_ids);
    recorded.forEach((o, i) => {
      const d = direct.choices[i];
      expect(o).toMatchObject({
        episodeId: 'ep-1',
        step: 0,
        role: 'solver',
        agentId: 'solver-0',
        policyId: 'qwen2',
        policyVersion: 0,
        tokenIdOrigin: 'sampled',
      });
      expect(o.contextTokenIds).toEqual(direct.prompt_token_ids);
      expect(o.responseTokenIds).toEqual(d.token_ids);
      // Avro carries log-probs as float32.
      expect(o.behaviourLogProbs).toEqual((d.logprobs?.content ?? []).map((t) => Math.fround(t.logprob)));
      expect(o.lossMask).toEqual(d.token_ids.map(() => true));
      expect(o.sampling).toMatchObject({ temperature: Math.fround(0.9), topK: 0, maxNewTokens: 5, seed: 21 });
      expect(o.eventTimeMs).toBeGreaterThanOrEqual(o.startedAtMs);
    });
  });

  it('streams a completion with the episode fields in metadata; the last chunk names the recorded output', async () => {
    const stream = await new OpenAI({ baseURL: `http://127.0.0.1:${gatewayPort}/v1`, apiKey: TINY_ONLY_KEY, maxRetries: 0 }).completions.create({
      model: 'tiny',
      prompt: '^S12|',
      max_tokens: 3,
      seed: 5,
      stream: true,
      metadata: { srpo_episode: 'ep-2', srpo_step: '1', srpo_role: 'checker', srpo_agent: 'checker-0' },
    } as OpenAI.CompletionCreateParamsStreaming);
    let text = '';
    let ids: string[] = [];
    for await (const chunk of stream) {
      for (const c of chunk.choices) text += c.text;
      const extra = (chunk as unknown as { srpo?: { output_ids: string[] } }).srpo;
      if (extra) ids = extra.output_ids;
    }
    expect(ids).toEqual(['ep-2.s1.checker-0']);
    const direct = await upstream.completions.create({ model: 'tiny', prompt: '^S12|', max_tokens: 3, seed: 5, logprobs: 0 });
    expect(text).toBe(direct.choices[0].text);
    const [o] = (await outputs()).filter((x) => x.episodeId === 'ep-2');
    expect(o).toMatchObject({ outputId: 'ep-2.s1.checker-0', step: 1, role: 'checker', policyId: 'tiny', contextTokenIds: [0, 13, 3, 4, 1] });
    expect(o.behaviourLogProbs).toEqual((direct.choices[0].logprobs?.token_logprobs ?? []).map((lp) => Math.fround(lp)));
  });

  it("records transitions and outcomes through /v1/srpo/*, refusing an invalid one with the SDK's field-naming error", async () => {
    const post = (route: string, body: unknown, key = AGENT_KEY) =>
      fetch(`http://127.0.0.1:${gatewayPort}/v1/srpo/${route}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    const t = {
      transitionId: 'ep-1.t0',
      episodeId: 'ep-1',
      step: 0,
      preStateId: 's0',
      taskId: 'task-1',
      position: 'solve',
      consumedOutputIds: ['ep-1.s0.solver-0.c0'],
      expectedCardinality: 1,
      workflowKind: 'FIXED',
      observationDigest: 'obs',
      done: true,
      eventTimeMs: Date.now(),
    };
    const ok = await post('transitions', t);
    expect(ok.status).toBe(200);
    expect(await ok.json()).toMatchObject({ recorded: 'Transition', topic: catalog.transitions.name });
    const bad = await post('transitions', { ...t, transitionId: 'ep-1.t1', step: -1 });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { message: string } }).error.message).toMatch(/^Transition\.step/);
    const outcome = await post('outcomes', {
      episodeId: 'ep-1',
      taskId: 'task-1',
      outcomeReward: 1,
      success: true,
      verifier: 'test@1',
      turns: 1,
      eventTimeMs: Date.now(),
    });
    expect(outcome.status).toBe(200);
    const transitions = (await readTopicsToEnd(kafka, [catalog.transitions.name])).map((r) => codec.decodeAs('Transition', r.value));
    expect(transitions.map((x) => x.transitionId)).toEqual(['ep-1.t0']);
    expect((await readTopicsToEnd(kafka, [catalog.episodeOutcomes.name])).length).toBe(1);
  });

  it("refuses in OpenAI's shape, recording nothing: no episode header, a wrong key, a key without the policy, an unknown model, bad max_tokens, temperature 0", async () => {
    const before = (await outputs()).length;
    const bare = new OpenAI({ baseURL: `http://127.0.0.1:${gatewayPort}/v1`, apiKey: AGENT_KEY, maxRetries: 0 });
    await expect(bare.completions.create({ model: 'tiny', prompt: '^S' })).rejects.toMatchObject({ status: 400, param: 'X-SRPO-Episode' });
    await expect(
      new OpenAI({
        baseURL: `http://127.0.0.1:${gatewayPort}/v1`,
        apiKey: 'sk-wrong-key-000000000',
        maxRetries: 0,
        defaultHeaders: headers,
      }).completions.create({ model: 'tiny', prompt: '^S' }),
    ).rejects.toMatchObject({ status: 401 });
    await expect(
      new OpenAI({ baseURL: `http://127.0.0.1:${gatewayPort}/v1`, apiKey: TINY_ONLY_KEY, maxRetries: 0, defaultHeaders: headers }).completions.create({
        model: 'qwen2',
        prompt: 'x',
      }),
    ).rejects.toMatchObject({ status: 403 });
    await expect(gateway.completions.create({ model: 'gpt-4o', prompt: 'x' })).rejects.toMatchObject({ status: 404, code: 'model_not_found' });
    await expect(gateway.completions.create({ model: 'tiny', prompt: '^S', max_tokens: -1 })).rejects.toMatchObject({ status: 400, param: 'max_tokens' });
    await expect(gateway.completions.create({ model: 'tiny', prompt: '^S', temperature: 0 })).rejects.toMatchObject({ status: 400, param: 'temperature' });
    expect((await outputs()).length).toBe(before);
  });

  it('the Python openai client records through the gateway and gets the output ids', async () => {
    const out = JSON.parse(await python([path.join(__dirname, 'gateway_client_check.py'), `http://127.0.0.1:${gatewayPort}/v1`, AGENT_KEY])) as {
      outputIds: string[];
      streamed: string[];
      text: string;
    };
    expect(out.outputIds).toEqual(['ep-py.s0.solver-py.c0', 'ep-py.s0.solver-py.c1', 'ep-py.s0.solver-py.c2']);
    expect(out.streamed).toEqual(['ep-py.s1.solver-py']);
    const recorded = (await outputs())
      .filter((o) => o.episodeId === 'ep-py')
      .map((o) => o.outputId)
      .sort();
    expect(recorded).toEqual([...out.outputIds, ...out.streamed].sort());
  });

  it('the Python openai client sends function tools through the gateway to srpo serve: rendered as transformers renders them, recorded, refused by a model whose template ignores them', async () => {
    const out = JSON.parse(
      await python([path.join(__dirname, 'gateway_tools_check.py'), `http://127.0.0.1:${gatewayPort}/v1`, AGENT_KEY, 'tooled', TOOLED_DIR, 'qwen2']),
    ) as { outputIds: string[]; finishReason: string; streamed: string[]; refusal: { status: number; param: string } | null; referencePromptIds: number[] };
    expect(out.outputIds).toEqual(['ep-tools.s0.solver-py']);
    expect(out.streamed).toEqual(['ep-tools.s1.solver-py']);
    // The random model writes no call: a plain answer, finish_reason length.
    expect(out.finishReason).toBe('length');
    const recorded = (await outputs()).filter((o) => o.episodeId.startsWith('ep-tools'));
    expect(recorded.map((o) => o.outputId).sort()).toEqual(['ep-tools.s0.solver-py', 'ep-tools.s1.solver-py']);
    for (const o of recorded) {
      // The prompt the tools went into is transformers' own for this directory and request.
      expect(o.contextTokenIds).toEqual(out.referencePromptIds);
      expect([o.policyId, o.responseTokenIds.length, o.behaviourLogProbs.length]).toEqual(['tooled', 4, 4]);
    }
    // The refusal passes through the gateway as serve gave it, and nothing of it is recorded.
    expect(out.refusal).toEqual({ status: 400, param: 'tools' });
  });

  /** A second gateway in front of the same serve, with `env` on top; started once its log matches `ready`. */
  async function anotherGateway(port: number, logName: string, env: Record<string, string>, ready: RegExp): Promise<ChildProcess> {
    const file = path.join(dir, logName);
    const gw = spawnApp(
      'gateway',
      {
        KAFKA_BROKERS: brokers.join(','),
        SRPO_TOPIC_PREFIX: prefix,
        SRPO_GATEWAY_UPSTREAM: `http://127.0.0.1:${servePort}/v1`,
        SRPO_GATEWAY_PORT: String(port),
        ...env,
      },
      file,
    );
    children.push(gw);
    await waitForLog(file, ready, gw);
    return gw;
  }

  /**
   * Three turns of one agent at one step, the headers the same each time: a forced call (which the
   * random model leaves malformed), then two plain turns, the last one streamed. Returns the
   * recorded turns in order and the gateway's /health.
   */
  async function threeTurns(client: OpenAI, port: number, episode: string) {
    const h = { ...headers, 'X-SRPO-Episode': episode };
    const tools: OpenAI.Chat.ChatCompletionTool[] = [
      { type: 'function', function: { name: 'add', parameters: { type: 'object', properties: { a: { type: 'number' } } } } },
    ];
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: 'user', content: 'add 1 and 2' }];
    const first = await client.chat.completions.create(
      { model: 'tooled', messages, tools, tool_choice: { type: 'function', function: { name: 'add' } }, max_tokens: 4, seed: 3 },
      { headers: h },
    );
    // The random model cannot finish the call in 4 tokens: its text comes back with the forced opening, as text.
    const answer0 = first.choices[0].message.content ?? '';
    expect(answer0.startsWith('<tool_call>\n{"name": "add", "arguments":')).toBe(true);
    messages.push({ role: 'assistant', content: answer0 }, { role: 'user', content: 'again' });
    const second = await client.chat.completions.create({ model: 'tooled', messages, tools, max_tokens: 3, seed: 4 }, { headers: h });
    messages.push({ role: 'assistant', content: second.choices[0].message.content ?? '' }, { role: 'user', content: 'once more' });
    let streamedIds: string[] = [];
    for await (const chunk of await client.chat.completions.create(
      { model: 'tooled', messages, tools, max_tokens: 3, seed: 5, stream: true },
      { headers: h },
    )) {
      const srpo = (chunk as unknown as { srpo?: { output_ids: string[] } }).srpo;
      if (srpo) streamedIds = srpo.output_ids;
    }
    expect(streamedIds).toEqual([`${episode}.s0.solver-0.t2`]);
    const byId = new Map((await outputs()).filter((o) => o.episodeId === episode).map((o) => [o.outputId, o]));
    const turns = [`${episode}.s0.solver-0`, `${episode}.s0.solver-0.t1`, `${episode}.s0.solver-0.t2`].map((id) => byId.get(id) as AgentOutput);
    expect(turns.map((o) => [o?.turn, o?.parentOutputId])).toEqual([
      [0, null],
      [1, `${episode}.s0.solver-0`],
      [2, `${episode}.s0.solver-0.t1`],
    ]);
    expect(turns.map((o) => o.malformedToolCall)).toEqual([first.choices[0].finish_reason !== 'tool_calls', false, false]);
    const health = (await (await fetch(`http://127.0.0.1:${port}/health`)).json()) as Record<string, number>;
    return { turns, health };
  }

  /** Checked here directly: does the next prompt hold the parent's context and sampled tokens (all but the last)? */
  const holds = (parent: AgentOutput, next: AgentOutput) =>
    [...parent.contextTokenIds, ...parent.responseTokenIds.slice(0, -1)].every((t, i) => next.contextTokenIds[i] === t);

  it('records a three-turn conversation with a forced tool call as linked turns: ids by turn, parents, token drift checked, the malformed call flagged', async () => {
    const { turns, health } = await threeTurns(gateway, gatewayPort, 'ep-turns');
    expect(turns.map((o) => o.tokenDrift)).toEqual([null, !holds(turns[0], turns[1]), !holds(turns[1], turns[2])]);
    expect(health.turnsLinked).toBeGreaterThanOrEqual(2);
    expect(health.tokenDrift).toBeGreaterThanOrEqual(turns.filter((o) => o.tokenDrift).length);
  });

  it('with SRPO_GATEWAY_TOKEN_PROMPTS, later turns go to srpo serve as token prompts holding their parents as sampled: no drift', async () => {
    const port = gatewayPort + 2;
    const gw = await anotherGateway(
      port,
      'gateway-token-prompts.log',
      { SRPO_GATEWAY_TOKENIZER_DIR: TOOLED_DIR, SRPO_GATEWAY_TOKEN_PROMPTS: 'true' },
      /gateway listening/,
    );
    const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused', maxRetries: 0 });
    const { turns, health } = await threeTurns(client, port, 'ep-token-prompts');
    expect(turns.map((o) => o.tokenDrift)).toEqual([null, false, false]);
    expect([holds(turns[0], turns[1]), holds(turns[1], turns[2])]).toEqual([true, true]);
    expect([health.tokenPrompts, health.tokenDrift]).toEqual([2, 0]);
    gw.kill('SIGTERM');
  });

  it('answers the Responses API (whole, streamed, continued by previous_response_id) through the chat path, recording each response as a turn', async () => {
    const h = { ...headers, 'X-SRPO-Episode': 'ep-resp' };
    type WithSrpo = { srpo?: { output_ids: string[] } };
    const first = await gateway.responses.create({ model: 'qwen2', input: 'solve 3 + 4', max_output_tokens: 4, temperature: 0.9 }, { headers: h });
    expect([first.object, first.id.startsWith('resp_'), first.output[0].type]).toEqual(['response', true, 'message']);
    expect((first as unknown as WithSrpo).srpo?.output_ids).toEqual(['ep-resp.s0.solver-0']);
    const second = await gateway.responses.create(
      { model: 'qwen2', previous_response_id: first.id, input: [{ role: 'user', content: 'and 5?' }], max_output_tokens: 3 },
      { headers: h },
    );
    expect((second as unknown as WithSrpo).srpo?.output_ids).toEqual(['ep-resp.s0.solver-0.t1']);
    const events: string[] = [];
    let text = '';
    let done: (typeof first & WithSrpo) | undefined;
    const stream = await gateway.responses.create(
      { model: 'qwen2', previous_response_id: second.id, input: 'go on', max_output_tokens: 3, stream: true },
      { headers: h },
    );
    for await (const e of stream) {
      events.push(e.type);
      if (e.type === 'response.output_text.delta') text += e.delta;
      if (e.type === 'response.completed' || e.type === 'response.incomplete') done = e.response;
    }
    expect(events.slice(0, 2)).toEqual(['response.created', 'response.in_progress']);
    expect(events).toContain('response.output_item.done');
    // The SDK adds output_text to whole responses only: the streamed one is read from its items.
    const items = (done?.output ?? []) as { type: string; content?: { text: string }[] }[];
    expect(items.flatMap((i) => (i.type === 'message' ? (i.content ?? []).map((c) => c.text) : [])).join('')).toBe(text);
    expect(done?.srpo?.output_ids).toEqual(['ep-resp.s0.solver-0.t2']);
    // What was recorded is what srpo serve gives the same conversation as chat messages, asked directly.
    const direct = async (messages: OpenAI.Chat.ChatCompletionMessageParam[]) =>
      (
        (await upstream.chat.completions.create({
          model: 'qwen2',
          messages,
          max_tokens: 1,
          return_token_ids: true,
        } as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming)) as unknown as {
          prompt_token_ids: number[];
        }
      ).prompt_token_ids;
    const byId = new Map((await outputs()).filter((o) => o.episodeId === 'ep-resp').map((o) => [o.outputId, o]));
    const turn1 = byId.get('ep-resp.s0.solver-0.t1') as AgentOutput;
    const conversation: OpenAI.Chat.ChatCompletionMessageParam[] = [
      { role: 'user', content: 'solve 3 + 4' },
      { role: 'assistant', content: first.output_text },
      { role: 'user', content: 'and 5?' },
    ];
    expect(turn1.contextTokenIds).toEqual(await direct(conversation));
    expect([turn1.parentOutputId, byId.get('ep-resp.s0.solver-0.t2')?.parentOutputId]).toEqual(['ep-resp.s0.solver-0', 'ep-resp.s0.solver-0.t1']);
    // An unknown previous response, and a hosted tool, are refused naming the parameter.
    await expect(gateway.responses.create({ model: 'qwen2', previous_response_id: 'resp_nope', input: 'x' }, { headers: h })).rejects.toMatchObject({
      status: 400,
      param: 'previous_response_id',
    });
    await expect(gateway.responses.create({ model: 'qwen2', input: 'x', tools: [{ type: 'web_search_preview' }] }, { headers: h })).rejects.toMatchObject({
      status: 400,
      param: 'tools[0].type',
    });
  });

  it('the Python example agent (examples/openai-agent/fixed_agent.py) plays episodes through the gateway: outputs, transitions and outcomes recorded', async () => {
    const script = path.join(repoRoot(), 'examples', 'openai-agent', 'fixed_agent.py');
    const lines = (
      await python([
        script,
        '--gateway',
        `http://127.0.0.1:${gatewayPort}/v1`,
        '--api-key',
        AGENT_KEY,
        '--model',
        'tiny',
        '--tasks',
        '2',
        '--group-size',
        '3',
        '--run-id',
        'pyagent',
      ])
    )
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { task: number; successes: number; versions: number[] });
    expect(lines.map((l) => l.task)).toEqual([0, 1]);
    const ours = (await outputs()).filter((o) => o.episodeId.startsWith('pyagent-'));
    expect(ours).toHaveLength(2 * 3 * 2);
    expect(new Set(ours.map((o) => o.role))).toEqual(new Set(['solver', 'checker']));
    const transitions = (await readTopicsToEnd(kafka, [catalog.transitions.name]))
      .map((r) => codec.decodeAs('Transition', r.value))
      .filter((t) => t.episodeId.startsWith('pyagent-'));
    expect(transitions).toHaveLength(2 * 3 * 2);
    // Each transition consumes exactly the output the gateway recorded for that step.
    for (const t of transitions) expect(ours.map((o) => o.outputId)).toContain(t.consumedOutputIds[0]);
    const outcomes = (await readTopicsToEnd(kafka, [catalog.episodeOutcomes.name]))
      .map((r) => codec.decodeAs('EpisodeOutcome', r.value))
      .filter((o) => o.episodeId.startsWith('pyagent-'));
    expect(outcomes).toHaveLength(6);
  });

  it('serves HTTPS with SRPO_GATEWAY_TLS_KEY/CERT: a client trusting the certificate gets through, plain HTTP does not', async () => {
    const tls = path.join(__dirname, 'tls');
    const port = gatewayPort + 1;
    await anotherGateway(
      port,
      'gateway-tls.log',
      { SRPO_GATEWAY_TLS_KEY: path.join(tls, 'key.pem'), SRPO_GATEWAY_TLS_CERT: path.join(tls, 'cert.pem') },
      /gateway listening.*"tls":true/,
    );
    const health = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      https
        .get({ host: '127.0.0.1', port, path: '/health', ca: fs.readFileSync(path.join(tls, 'cert.pem')) }, (res) => {
          let body = '';
          res.on('data', (d: Buffer) => (body += d.toString()));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        })
        .on('error', reject);
    });
    expect(health.status).toBe(200);
    expect(JSON.parse(health.body)).toMatchObject({ status: 'ok' });
    await expect(fetch(`http://127.0.0.1:${port}/health`)).rejects.toThrow();
  });

  it('logged no prompt or completion text and no error line', () => {
    for (const f of Object.values(logs)) {
      const log = fs.readFileSync(f, 'utf8');
      expect(log).not.toMatch(/solve 3 \+ 4|"level":"error"/);
    }
  });
});
