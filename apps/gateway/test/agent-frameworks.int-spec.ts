import { spawnSync, type ChildProcess } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { repoRoot } from '@srpo/core';
import { createKafka, ensureTopics, EventCodec, openOutput, readTopicsToEnd, topicCatalog, type AgentOutput } from '@srpo/events';
import { KeyStore } from '@srpo/store';
import { HfTokenizer } from '@srpo/hf';
import { ensureKafka, runCommand, sleep, spawnApp, uniquePrefix } from '@srpo/testing';
import { runTriageEpisode, type TriageEpisodeResult } from '../../../examples/agents-sdk/triage-agent';

const QWEN2 = path.join(repoRoot(), 'libs', 'hf', 'fixtures', 'qwen2');
const LANGGRAPH = path.join(repoRoot(), 'examples', 'langgraph', 'solve_check.py');
/** A chat template that renders tools (Hermes style, as Qwen2.5's), as in gateway.int-spec.ts. */
const TOOLS_TEMPLATE =
  "{%- if tools %}<|im_start|>system\nYou may call these tools:{% for t in tools %}{{ '\\n' }}{{ t | tojson }}{% endfor %}<|im_end|>\n{% endif %}" +
  "{%- for m in messages %}<|im_start|>{{ m.role + '\\n' + m.content }}<|im_end|>\n{% endfor %}" +
  '{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}';

/** Why the LangGraph example cannot run here (its Python packages missing), or undefined. */
function langgraphMissing(): string | undefined {
  const r = spawnSync('python3', ['-c', 'import langgraph, langchain_openai'], { encoding: 'utf8' });
  if (r.status === 0) return undefined;
  return `python3 cannot import langgraph / langchain_openai (${(r.stderr || String(r.error)).trim().split('\n').pop()}); python3 -m pip install -r examples/langgraph/requirements.txt (scripts/setup.sh does)`;
}
const LANGGRAPH_SKIP = langgraphMissing();
const itLanggraph = LANGGRAPH_SKIP ? it.skip : it;
const langgraphTitle = (t: string) => (LANGGRAPH_SKIP ? `${t} [skipped: ${LANGGRAPH_SKIP}]` : t);

interface LanggraphResult {
  episodeId: string;
  outputIds: string[];
  nodes: string[];
  tools: string[][];
  answer: string;
  reward: number;
}

/**
 * Agent frameworks run for real against `srpo gateway` in front of `srpo serve`, both pointed at
 * the gateway by base URL only: the OpenAI Agents SDK example (examples/agents-sdk: a triage agent
 * handing off to a solver with a function tool) and the LangGraph example (examples/langgraph: a
 * solver node with a bound tool and a checker node). The materializer and a learner run beside
 * them on the real broker. The model is the qwen2 fixture with a template that renders tools:
 * random weights, so it writes no valid call or handoff; the requests carry the tools all the
 * same, and the examples go on as their workflows say (the triage's answer passed to the solver,
 * a rejected answer sent back once). Each episode's outputs, transition and outcome are read back,
 * and the learner's update names the group that holds them.
 */
describe('agent frameworks (OpenAI Agents SDK, LangGraph) through srpo gateway: recorded with the run’s episode headers, and trained', () => {
  const brokers = ensureKafka();
  const kafka = createKafka({ brokers, clientId: 'agent-frameworks-test' });
  const codec = new EventCodec();
  const prefix = uniquePrefix('frameworks');
  const catalog = topicCatalog({ prefix, rawPartitions: 1, derivedPartitions: 1 });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-agent-frameworks-'));
  const modelDir = path.join(dir, 'tooled');
  const base = 27_000 + Math.floor(Math.random() * 900);
  const gateway = `http://127.0.0.1:${base + 2}/v1`;
  const run = prefix.replace(/[^A-Za-z0-9-]/g, '');
  const children: ChildProcess[] = [];
  const log = (name: string) => path.join(dir, `${name}.log`);
  const sdk: TriageEpisodeResult[] = [];
  const graph: LanggraphResult[] = [];
  let responsesError: unknown;
  let tokenizer: HfTokenizer;

  /**
   * The recorded outputs, opened: the gateway seals every output under the learner's store's content
   * keys (SRPO_SEAL_CONTENT, docs/erasure.md), so only ciphertext is on the topic, and the learner trains on it.
   */
  const outputs = async (): Promise<AgentOutput[]> => {
    const sealed = (await readTopicsToEnd(kafka, [catalog.agentOutputs.name])).map((r) => codec.decodeAs('AgentOutput', r.value));
    for (const o of sealed) expect([o.sealed?.scheme, o.contextTokenIds.length, o.responseTokenIds.length]).toEqual(['aes-256-gcm/v1', 0, 0]);
    const keys = await KeyStore.open({ kind: 'sqlite', path: path.join(dir, 'learner.sqlite') });
    try {
      const found = await keys.keysById(sealed.map((o) => o.sealed?.keyId ?? ''));
      return sealed.map((o) => openOutput(o, found.get(o.sealed?.keyId ?? '')));
    } finally {
      await keys.close();
    }
  };
  const byEpisode = async (episode: string) => (await outputs()).filter((o) => o.episodeId === episode);

  beforeAll(async () => {
    const admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, catalog.all());
    await admin.disconnect();
    // The qwen2 fixture with a template that renders tools, room for their JSON in the prompt, and
    // no end token: every answer is max_tokens long, so each recorded output's length is known.
    fs.cpSync(QWEN2, modelDir, { recursive: true });
    fs.writeFileSync(path.join(modelDir, 'chat_template.jinja'), TOOLS_TEMPLATE);
    const edit = (file: string, change: (json: Record<string, unknown>) => Record<string, unknown>) =>
      fs.writeFileSync(
        path.join(modelDir, file),
        JSON.stringify(change(JSON.parse(fs.readFileSync(path.join(modelDir, file), 'utf8')) as Record<string, unknown>)),
      );
    edit('config.json', (c) => ({ ...c, max_position_embeddings: 1024 }));
    edit('generation_config.json', (c) => ({ ...c, eos_token_id: [] }));
    edit('tokenizer_config.json', (c) => ({ ...c, eos_token: null, model_max_length: 1024 }));
    edit('special_tokens_map.json', (c) => ({ ...c, eos_token: undefined }));
    tokenizer = HfTokenizer.fromDirectory(modelDir);
    const common = {
      KAFKA_BROKERS: brokers.join(','),
      SRPO_TOPIC_PREFIX: prefix,
      SRPO_RAW_PARTITIONS: '1',
      SRPO_DERIVED_PARTITIONS: '1',
      SRPO_CHECKPOINT_DIR: path.join(dir, 'checkpoints'),
      SRPO_LOG_LEVEL: 'info',
      KAFKAJS_NO_PARTITIONER_WARNING: '1',
    };
    children.push(spawnApp('materializer', { ...common, SRPO_APP_ID: `${prefix}materializer` }, log('materializer')));
    children.push(
      spawnApp(
        'learner',
        {
          ...common,
          SRPO_POLICY_ID: 'tooled',
          SRPO_MODEL_DIR: modelDir,
          // One update per group of two episodes.
          SRPO_SETS_PER_UPDATE: '2',
          SRPO_MAX_POLICY_LAG: '100',
          SRPO_SQLITE_PATH: path.join(dir, 'learner.sqlite'),
          SRPO_HTTP_PORT: String(base),
          SRPO_CONSUMER_GROUP: `${prefix}learner.tooled`,
          SRPO_BACKEND: 'tensorflow',
        },
        log('learner'),
      ),
    );
    children.push(spawnApp('serve', { ...common, SRPO_SERVE_POLICIES: 'tooled', SRPO_SERVE_PORT: String(base + 1), SRPO_BACKEND: 'tensorflow' }, log('serve')));
    children.push(
      spawnApp(
        'gateway',
        {
          ...common,
          SRPO_GATEWAY_UPSTREAM: `http://127.0.0.1:${base + 1}/v1`,
          SRPO_GATEWAY_PORT: String(base + 2),
          // Content keys in the learner's store, the deployment docs/erasure.md describes.
          SRPO_SEAL_CONTENT: 'true',
          SRPO_SQLITE_PATH: path.join(dir, 'learner.sqlite'),
        },
        log('gateway'),
      ),
    );
    for (const name of ['serve', 'gateway']) {
      const deadline = Date.now() + 120_000;
      while (!(fs.existsSync(log(name)) && /listening/.test(fs.readFileSync(log(name), 'utf8')))) {
        if (Date.now() > deadline)
          throw new Error(`${name} did not start:\n${fs.existsSync(log(name)) ? fs.readFileSync(log(name), 'utf8').slice(-3000) : ''}`);
        await sleep(250);
      }
    }
    // Two episodes of one task per framework (one advantage group each): headers set once per run, then per agent.
    const common2 = { gateway, apiKey: 'unused', model: 'tooled', a: 2, b: 3, groupSize: 2, maxTokens: 8 };
    for (const perAgentHeaders of [false, true]) {
      sdk.push(
        await runTriageEpisode({
          ...common2,
          api: 'chat_completions',
          episodeId: `${run}-sdk-${perAgentHeaders ? 'agents' : 'once'}`,
          groupKey: `${run}/agents-sdk`,
          perAgentHeaders,
        }),
      );
    }
    // The SDK's default API, Responses, over the gateway's /v1/responses: the random model's answer is cut by max_output_tokens.
    responsesError = await runTriageEpisode({ ...common2, episodeId: `${run}-sdk-responses`, groupKey: `${run}/responses`, perAgentHeaders: true }).then(
      () => undefined,
      (e: unknown) => e,
    );
    if (!LANGGRAPH_SKIP) {
      for (const perAgent of [false, true]) {
        const args = [LANGGRAPH, '--gateway', gateway, '--model', 'tooled', '--a', '2', '--b', '3', '--max-tokens', '8'];
        args.push('--episode', `${run}-lg-${perAgent ? 'agents' : 'once'}`, '--group-key', `${run}/langgraph`, '--group-size', '2');
        if (perAgent) args.push('--per-agent-headers');
        graph.push(JSON.parse((await runCommand('python3', args)).trim().split('\n').pop() as string) as LanggraphResult);
      }
    }
  }, 240_000);

  afterAll(() => {
    for (const c of children) c.kill('SIGTERM');
  });

  /** Checks one episode's recorded outputs against what the example saw: ids, headers, turns; returns them in call order. */
  async function recorded(episode: string, ids: string[], who: (string | [string, string])[]): Promise<AgentOutput[]> {
    const mine = new Map((await byEpisode(episode)).map((o) => [o.outputId, o]));
    expect([...mine.keys()].sort()).toEqual([...ids].sort());
    const inOrder = ids.map((id) => mine.get(id) as AgentOutput);
    inOrder.forEach((o, i) => {
      const w = who[i];
      const [role, agent] = typeof w === 'string' ? [w, w] : w;
      expect([o.episodeId, o.step, o.role, o.agentId, o.policyId]).toEqual([episode, 0, role, agent, 'tooled']);
      // Version 0, or a later one where the learner already trained on an earlier group (srpo serve follows it).
      expect(Number.isInteger(o.policyVersion) && o.policyVersion >= 0).toBe(true);
      expect(o.responseTokenIds.length).toBe(8);
      expect(o.behaviourLogProbs.length).toBe(8);
    });
    return inOrder;
  }
  /** The prompt the model saw, as text. */
  const prompt = (o: AgentOutput) => tokenizer.decode(o.contextTokenIds);

  it('the Agents SDK run, headers set once: one output per model call, numbered as turns of one agent; the handoff and the function tool in the prompts', async () => {
    const [r] = sdk;
    const ep = r.episodeId;
    expect(r.agents).toEqual(['triage', 'solver', 'solver']);
    expect(r.outputIds).toEqual([`${ep}.s0.triage-solver`, `${ep}.s0.triage-solver.t1`, `${ep}.s0.triage-solver.t2`]);
    expect(r.tools).toEqual([['transfer_to_solver'], ['add'], ['add']]);
    const outs = await recorded(ep, r.outputIds, [
      ['agent', 'triage-solver'],
      ['agent', 'triage-solver'],
      ['agent', 'triage-solver'],
    ]);
    expect(outs.map((o) => o.turn)).toEqual([0, 1, 2]);
    // The solver's second answer continues its first (the triage's prompt had other instructions: no parent).
    expect(outs.map((o) => o.parentOutputId)).toEqual([null, null, r.outputIds[1]]);
    expect(prompt(outs[0])).toContain('"name": "transfer_to_solver"');
    for (const o of outs.slice(1)) expect(prompt(o)).toContain('"name": "add"');
  });

  it('the Agents SDK run, a model per agent: the triage and the solver recorded under their own role and agent id', async () => {
    const r = sdk[1];
    const ep = r.episodeId;
    expect(r.agents).toEqual(['triage', 'solver', 'solver']);
    expect(r.outputIds).toEqual([`${ep}.s0.triage`, `${ep}.s0.solver`, `${ep}.s0.solver.t1`]);
    const outs = await recorded(ep, r.outputIds, ['triage', 'solver', 'solver']);
    expect(outs.map((o) => [o.turn, o.parentOutputId])).toEqual([
      [0, null],
      [0, null],
      [1, `${ep}.s0.solver`],
    ]);
  });

  it('the Agents SDK over the Responses API (its default): the request, with its handoff tool and headers, is recorded; the SDK ends the run on the answer cut by max_output_tokens', async () => {
    expect(String(responsesError)).toMatch(/unsuccessful terminal state "response\.incomplete"/);
    const [o] = await recorded(`${run}-sdk-responses`, [`${run}-sdk-responses.s0.triage`], ['triage']);
    expect(prompt(o)).toContain('"name": "transfer_to_solver"');
  });

  itLanggraph(
    langgraphTitle('the LangGraph runs: one output per model call, as turns of one agent or per node; the bound tool in the solver’s prompts'),
    async () => {
      const [once, agents] = graph;
      const e1 = once.episodeId;
      expect(once.nodes).toEqual(['solver', 'checker', 'solver', 'checker']);
      expect(once.outputIds).toEqual([`${e1}.s0.solve-check`, `${e1}.s0.solve-check.t1`, `${e1}.s0.solve-check.t2`, `${e1}.s0.solve-check.t3`]);
      const o1 = await recorded(
        e1,
        once.outputIds,
        Array.from({ length: 4 }, () => ['agent', 'solve-check'] as [string, string]),
      );
      expect(o1.map((o) => o.turn)).toEqual([0, 1, 2, 3]);
      // The solver's second call continues its first conversation.
      expect(o1[2].parentOutputId).toBe(once.outputIds[0]);
      const e2 = agents.episodeId;
      expect(agents.outputIds).toEqual([`${e2}.s0.solver`, `${e2}.s0.checker`, `${e2}.s0.solver.t1`, `${e2}.s0.checker.t1`]);
      const o2 = await recorded(e2, agents.outputIds, ['solver', 'checker', 'solver', 'checker']);
      expect(o2.map((o) => [o.turn, o.parentOutputId])).toEqual([
        [0, null],
        [0, null],
        [1, `${e2}.s0.solver`],
        [1, null],
      ]);
      for (const o of [...o1, ...o2]) {
        if (o.agentId === 'checker' || (o.agentId === 'solve-check' && o.turn % 2 === 1)) expect(prompt(o)).not.toContain('"name": "add"');
        else expect(prompt(o)).toContain('"name": "add"');
      }
    },
  );

  /** Waits until the learner's PolicyUpdate names the advantage group of `groupKey`; checks the group holds exactly these outputs. */
  async function trained(groupKey: string, episodes: { episodeId: string; outputIds: string[] }[]) {
    const transitions = (await readTopicsToEnd(kafka, [catalog.transitions.name]))
      .map((r) => codec.decodeAs('Transition', r.value))
      .filter((t) => t.groupKey === groupKey);
    expect(transitions.map((t) => [t.episodeId, t.consumedOutputIds, t.expectedGroupSize])).toEqual(episodes.map((e) => [e.episodeId, e.outputIds, 2]));
    const outcomes = (await readTopicsToEnd(kafka, [catalog.episodeOutcomes.name]))
      .map((r) => codec.decodeAs('EpisodeOutcome', r.value))
      .filter((o) => episodes.some((e) => e.episodeId === o.episodeId));
    expect(outcomes.map((o) => o.episodeId).sort()).toEqual(episodes.map((e) => e.episodeId).sort());
    const deadline = Date.now() + 90_000;
    for (;;) {
      const group = (await readTopicsToEnd(kafka, [catalog.advantageGroups.name]))
        .map((r) => codec.decodeAs('AdvantageGroup', r.value))
        .find((g) => g.groupKey === `tooled|${groupKey}`);
      const update = group
        ? (await readTopicsToEnd(kafka, [catalog.policyUpdates.name]))
            .map((r) => codec.decodeAs('PolicyUpdate', r.value))
            .find((u) => u.groupIds.includes(group.groupId))
        : undefined;
      if (group && update) {
        expect([group.policyId, group.closeReason, group.sets.length]).toEqual(['tooled', 'SIZE', 2]);
        const members = group.sets.flatMap((s) => s.set.members.map((m) => m.outputId)).sort();
        expect(members).toEqual(episodes.flatMap((e) => e.outputIds).sort());
        expect([update.policyId, update.versionAfter]).toEqual(['tooled', update.versionBefore + 1]);
        return;
      }
      if (Date.now() > deadline)
        throw new Error(
          `no PolicyUpdate for group ${groupKey} (group ${group ? 'formed' : 'not formed'}):\n${fs.readFileSync(log('learner'), 'utf8').slice(-3000)}`,
        );
      await sleep(500);
    }
  }

  it('the Agents SDK episodes: their transitions and outcomes recorded, grouped, and the learner trained on the group', async () => {
    await trained(`${run}/agents-sdk`, sdk);
  }, 120_000);

  itLanggraph(
    langgraphTitle('the LangGraph episodes: their transitions and outcomes recorded, grouped, and the learner trained on the group'),
    async () => {
      await trained(`${run}/langgraph`, graph);
    },
    120_000,
  );

  it('nothing was dead-lettered or invalid, and no process printed an error line', async () => {
    expect(await readTopicsToEnd(kafka, [catalog.deadLetter.name, catalog.invalidSets.name])).toHaveLength(0);
    for (const name of ['materializer', 'learner', 'serve', 'gateway']) expect(fs.readFileSync(log(name), 'utf8')).not.toMatch(/"level":"error"/);
  });
});
