import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import type { INestApplication } from '@nestjs/common';
import { chromium, type Browser, type Page } from 'playwright-core';
import { Logger } from '@srpo/core';
import { createKafka, ensureTopics, topicCatalog, type AdvantageGroup, type ContentKey, type TopicCatalog } from '@srpo/events';
import { KeyStore, type AuditStore, type GroupStatsRecord, type UpdateDetail, type UpdateRecord } from '@srpo/store';
import type { Kafka } from 'kafkajs';
import { activeSet, advantageGroup, ensureKafka, member, produceGroups, SEED, sleep, tempDir, TINY_MODEL_JSON, uniquePrefix } from '@srpo/testing';
import { AUDIT_STORE } from '../src/learner-tokens';
import { bootstrap } from '../src/main';

Logger.configure({ level: 'error' });

const REPO = path.resolve(__dirname, '../../..');
const ARTIFACT = path.join(REPO, 'test-artifacts', 'dashboard.png');
const READ_TOKEN = 'dashboard-read-token-0123';
const WORKFLOWS = ['FIXED', 'JOINT', 'ROUTED'] as const;
const GROUPS = 6;
/** Two sets per group (K = 1 and K = 2): two groups per update, three updates. */
const SETS_PER_UPDATE = 4;
/** Event time of every member output (set by the fixtures); sets and groups come later. */
const OUTPUT_TIME = 1_767_225_600_000;

/** Debian's chromium through the repo's installer script (which honours SRPO_CHROMIUM); undefined when absent. */
function findChromium(): string | undefined {
  try {
    const out = execFileSync('bash', [path.join(REPO, 'infra', 'chromium', 'install.sh'), 'path'], { stdio: ['ignore', 'pipe', 'ignore'] })
      .toString()
      .trim();
    return out.length > 0 ? out : undefined;
  } catch {
    return undefined;
  }
}

const CHROMIUM = findChromium();
const REQUIRED = process.env.SRPO_REQUIRE_BROWSER === '1';
if (!CHROMIUM && !REQUIRED) {
  console.log('dashboard browser test skipped: no Chromium found (infra/chromium/install.sh) and SRPO_REQUIRE_BROWSER is not 1');
}
const describeBrowser = CHROMIUM || REQUIRED ? describe : describe.skip;

/** Group i: workflow WORKFLOWS[i % 3]; set a (1 member) reward 1 and success, set b (2 members) reward i/10 and failure (unknown for ROUTED). */
function groups(): AdvantageGroup[] {
  return Array.from({ length: GROUPS }, (_, i) => {
    const kind = WORKFLOWS[i % WORKFLOWS.length];
    const a = member({ outputId: `g${i}/a/o`, response: [4 + (i % 3), 5, 6], logpOld: [-2.5, -2.75, -3], version: 0 });
    const b = [0, 1].map((j) => member({ outputId: `g${i}/b/o${j}`, response: [6, 4 + j, 5 + (i % 2)], logpOld: [-2.6, -2.7, -2.9], version: 0 }));
    const setTime = OUTPUT_TIME + 500 * (i + 1);
    const g = advantageGroup(`g${i}`, [
      { set: { ...activeSet(`g${i}/a`, [a]), workflowKind: kind, reward: 1, success: true, eventTimeMs: setTime }, advantage: 0.7 },
      {
        set: { ...activeSet(`g${i}/b`, b), workflowKind: kind, reward: i / 10, success: kind === 'ROUTED' ? null : false, eventTimeMs: setTime },
        advantage: -0.7,
      },
    ]);
    return { ...g, groupKey: `task-${i}/solve`, eventTimeMs: OUTPUT_TIME + 1000 * (i + 1) };
  });
}

function countFinite(values: readonly (number | undefined)[]): number {
  return values.filter((v) => typeof v === 'number' && Number.isFinite(v)).length;
}

/** What each chart must have plotted, derived from the store (not from the page's own code). */
function expectedPoints(updates: UpdateRecord[], stats: GroupStatsRecord[]): Record<string, Record<string, number>> {
  const diag = (key: string) => countFinite(updates.map((u) => u.diagnostics[key]));
  const distinct = (rows: GroupStatsRecord[]) => new Set(rows.map((s) => s.updateId)).size;
  const kinds = [...new Set(stats.map((s) => s.workflowKind ?? '(mixed)'))].sort();
  const perKind = (filter: (s: GroupStatsRecord) => boolean): Record<string, number> => {
    const out: Record<string, number> = {};
    for (const k of kinds) {
      const n = distinct(stats.filter((s) => (s.workflowKind ?? '(mixed)') === k && filter(s)));
      if (n > 0) out[k] = n;
    }
    return out;
  };
  const ks = [...new Set(updates.flatMap((u) => Object.keys(u.diagnostics).filter((k) => /^ratio\/mean_k\d+$/.test(k))))].map((k) =>
    k.slice('ratio/mean_k'.length),
  );
  const clipKs = [...new Set(updates.flatMap((u) => Object.keys(u.diagnostics).filter((k) => /^losses\/clip_frac_low_k\d+$/.test(k))))].map((k) =>
    k.slice('losses/clip_frac_low_k'.length),
  );
  // The objective reports per-K clip fractions: the chart must plot them, not the "not in the diagnostics" note.
  expect(clipKs.length).toBeGreaterThan(0);
  return {
    reward: perKind(() => true),
    success: perKind((s) => s.successKnown > 0),
    loss: { loss: updates.length },
    clip: {
      low: diag('losses/clip_frac_low'),
      high: diag('losses/clip_frac_high'),
      ...Object.fromEntries(
        clipKs.flatMap((k) => [
          [`low K=${k}`, diag(`losses/clip_frac_low_k${k}`)],
          [`high K=${k}`, diag(`losses/clip_frac_high_k${k}`)],
        ]),
      ),
    },
    ratio: {
      min: diag('ratio/min'),
      mean: diag('ratio/mean'),
      max: diag('ratio/max'),
      ...Object.fromEntries(ks.map((k) => [`mean K=${k}`, diag(`ratio/mean_k${k}`)])),
    },
    'kl-lag': {
      KL: diag('kl/approx_k3'),
      'lag max': new Set(stats.map((s) => s.versionAfter)).size,
      'lag mean': new Set(stats.map((s) => s.versionAfter)).size,
    },
    latency: { mean: distinct(stats), max: distinct(stats) },
    grad: { 'grad norm': updates.length },
  };
}

/** The last plotted value of some series of each chart, from the store: the page's aggregation checked on real numbers. */
function expectedLast(updates: UpdateRecord[], stats: GroupStatsRecord[]): Record<string, Record<string, number>> {
  const lastUpdate = updates[updates.length - 1];
  const lastStats = stats.filter((s) => s.updateId === lastUpdate.updateId);
  const reward: Record<string, number> = {};
  for (const kind of new Set(stats.map((s) => s.workflowKind ?? '(mixed)'))) {
    const rows = stats.filter((s) => (s.workflowKind ?? '(mixed)') === kind);
    const latest = rows.filter((s) => s.createdAtMs === Math.max(...rows.map((r) => r.createdAtMs)));
    reward[kind] = latest.reduce((a, s) => a + s.rewardMean * s.setCount, 0) / latest.reduce((a, s) => a + s.setCount, 0);
  }
  return {
    reward,
    loss: { loss: lastUpdate.loss },
    'kl-lag': { KL: lastUpdate.diagnostics['kl/approx_k3'], 'lag max': Math.max(...lastStats.map((s) => s.lagMax)) },
    latency: { max: Math.max(...lastStats.map((s) => s.fillLatencyMs)), mean: lastStats.reduce((a, s) => a + s.fillLatencyMs, 0) / lastStats.length },
    grad: { 'grad norm': lastUpdate.gradNorm },
  };
}

/**
 * Runs in the page (a string: this repo's TypeScript has no DOM types): pixels of
 * the chart's canvas close to one of the page's series colours (axes and grid are grey).
 */
const SERIES_PIXELS = `(id) => {
  const canvas = document.querySelector('[data-chart="' + id + '"] canvas');
  if (!canvas) return -1;
  const { data } = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height);
  const colours = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#17becf', '#8c564b', '#e377c2'].map((h) => [1, 3, 5].map((o) => parseInt(h.slice(o, o + 2), 16)));
  let n = 0;
  for (let p = 0; p < data.length; p += 4) {
    if (data[p + 3] < 200) continue;
    if (colours.some((c) => Math.abs(c[0] - data[p]) + Math.abs(c[1] - data[p + 1]) + Math.abs(c[2] - data[p + 2]) < 40)) n++;
  }
  return n;
}`;

async function seriesPixels(page: Page, chartId: string): Promise<number> {
  return page.evaluate<number>(`(${SERIES_PIXELS})(${JSON.stringify(chartId)})`);
}

describeBrowser('learner dashboard in headless Chromium (real run: broker, learner, SQLite store)', () => {
  let app: INestApplication | undefined;
  let browser: Browser | undefined;
  let dir: string;
  let url: string;
  let store: AuditStore;
  let kafka: Kafka;
  let catalog: TopicCatalog;

  beforeAll(async () => {
    if (!CHROMIUM) throw new Error('SRPO_REQUIRE_BROWSER=1 but no Chromium was found: run infra/chromium/install.sh or set SRPO_CHROMIUM');
    const brokers = ensureKafka();
    kafka = createKafka({ brokers, clientId: 'dashboard-test' });
    const prefix = uniquePrefix('dashboard');
    catalog = topicCatalog({ prefix, rawPartitions: 1, derivedPartitions: 1 });
    const admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, catalog.all());
    await admin.disconnect();
    await produceGroups(kafka, catalog.advantageGroups.name, groups());

    dir = tempDir('dashboard');
    app = await bootstrap({
      KAFKA_BROKERS: brokers.join(','),
      SRPO_TOPIC_PREFIX: prefix,
      SRPO_CONSUMER_GROUP: `${prefix}learner`,
      SRPO_POLICY_ID: 'solver',
      SRPO_SQLITE_PATH: path.join(dir, 'learner.sqlite'),
      SRPO_CHECKPOINT_DIR: path.join(dir, 'checkpoints'),
      SRPO_SETS_PER_UPDATE: String(SETS_PER_UPDATE),
      SRPO_MODEL_CONFIG: TINY_MODEL_JSON,
      SRPO_SEED: String(SEED),
      SRPO_MAX_POLICY_LAG: '100',
      SRPO_SESSION_TIMEOUT_MS: '6000',
      SRPO_HTTP_PORT: '0',
      SRPO_BACKEND: 'tensorflow',
      SRPO_API_READ_TOKEN: READ_TOKEN,
      SRPO_LOG_LEVEL: 'error',
    });
    url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
    store = app.get<typeof AUDIT_STORE, AuditStore>(AUDIT_STORE);
    const deadline = Date.now() + 60_000;
    while ((await store.listUpdates({ policyId: 'solver' })).length < GROUPS / 2) {
      if (Date.now() > deadline) throw new Error('the learner did not apply 3 updates within 60 s');
      await sleep(250);
    }
    browser = await chromium.launch({ executablePath: CHROMIUM, args: process.getuid?.() === 0 ? ['--no-sandbox'] : [] });
  }, 100_000);

  afterAll(async () => {
    await browser?.close();
    await app?.close();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('records per-group statistics for every trained group', async () => {
    const stats = await store.listGroupStats({ policyId: 'solver' });
    const updates = await store.listUpdates({ policyId: 'solver' });
    expect(updates.map((u) => u.versionAfter)).toEqual([1, 2, 3]);
    expect(stats.map((s) => s.groupId)).toEqual(['g0', 'g1', 'g2', 'g3', 'g4', 'g5']);
    stats.forEach((s, i) => {
      const kind = WORKFLOWS[i % WORKFLOWS.length];
      expect(s).toEqual({
        policyId: 'solver',
        groupId: `g${i}`,
        updateId: updates[Math.floor(i / 2)].updateId,
        versionAfter: Math.floor(i / 2) + 1,
        workflowKind: kind,
        setCount: 2,
        memberCount: 3,
        rewardMean: (1 + i / 10) / 2,
        successCount: 1,
        successKnown: kind === 'ROUTED' ? 1 : 2,
        // Every member was sampled at version 0; the learner trained at versionAfter - 1.
        lagMax: Math.floor(i / 2),
        lagMean: Math.floor(i / 2),
        fillLatencyMs: 1000 * (i + 1),
        groupEventTimeMs: OUTPUT_TIME + 1000 * (i + 1),
        createdAtMs: updates[Math.floor(i / 2)].committedAtMs,
      });
    });
  });

  it('serves the chart library locally and guards the statistics like the other read endpoints', async () => {
    const js = await fetch(`${url}/assets/uPlot.iife.min.js`);
    expect(js.status).toBe(200);
    expect(js.headers.get('content-type')).toMatch(/^text\/javascript/);
    expect(await js.text()).toBe(fs.readFileSync(require.resolve('uplot/dist/uPlot.iife.min.js'), 'utf8'));
    expect((await fetch(`${url}/assets/uPlot.min.css`)).headers.get('content-type')).toMatch(/^text\/css/);
    expect((await fetch(`${url}/assets/package.json`)).status).toBe(404);
    expect((await fetch(`${url}/assets/..%2Fpackage.json`)).status).toBe(404);
    expect((await fetch(`${url}/group-stats`)).status).toBe(401);
    expect((await fetch(`${url}/erasures`)).status).toBe(401);
    const res = await fetch(`${url}/group-stats?policy=solver`, { headers: { Authorization: `Bearer ${READ_TOKEN}` } });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual(JSON.parse(JSON.stringify(await store.listGroupStats({ policyId: 'solver' }))));
    expect((await fetch(`${url}/group-stats?limit=0`, { headers: { Authorization: `Bearer ${READ_TOKEN}` } })).status).toBe(400);
  });

  it('loads offline, draws every chart from the store, opens an audit record and verifies it', async () => {
    const context = await (browser as Browser).newContext({ viewport: { width: 1500, height: 1000 } });
    const outside: string[] = [];
    // Anything not served by the learner is refused and remembered: the page must work with no internet.
    await context.route('**/*', (route) => {
      const u = route.request().url();
      if (u.startsWith(`${url}/`)) return route.continue();
      outside.push(u);
      return route.abort();
    });
    const page = await context.newPage();
    const pageErrors: string[] = [];
    page.on('pageerror', (e) => pageErrors.push(e.message));
    try {
      await page.goto(`${url}/`);
      // The read token is set: without it the page says so instead of drawing.
      await page.waitForSelector('body[data-state="error"]');
      expect(await page.textContent('#status')).toMatch(/HTTP 401/);
      await page.fill('#token', READ_TOKEN);
      await page.click('#reload');
      await page.waitForSelector('body[data-state="loaded"]');

      const updates = await store.listUpdates({ policyId: 'solver' });
      const stats = await store.listGroupStats({ policyId: 'solver' });
      expect(await page.textContent('#status')).toBe(`${updates.length} update(s), ${stats.length} group(s)`);
      const expected = expectedPoints(updates, stats);
      expect(Object.keys(expected.reward)).toEqual(['FIXED', 'JOINT', 'ROUTED']);
      for (const [id, points] of Object.entries(expected)) {
        await page.waitForSelector(`[data-chart="${id}"][data-state="drawn"]`);
        const drawn = JSON.parse((await page.getAttribute(`[data-chart="${id}"]`, 'data-points')) ?? 'null') as Record<string, number>;
        expect({ id, drawn }).toEqual({ id, drawn: points });
        expect({ id, pixels: (await seriesPixels(page, id)) > 30 }).toEqual({ id, pixels: true });
      }
      for (const [id, values] of Object.entries(expectedLast(updates, stats))) {
        const last = JSON.parse((await page.getAttribute(`[data-chart="${id}"]`, 'data-last')) ?? 'null') as Record<string, number>;
        for (const [label, value] of Object.entries(values)) {
          expect({ id, label, value: last[label] }).toEqual({ id, label, value: expect.closeTo(value, 9) });
        }
      }

      const target = updates[1];
      await page.click(`#updates tr[data-update-id="${target.updateId}"] a.open`);
      await page.waitForSelector(`#record[data-update-id="${target.updateId}"][data-state="loaded"]`);
      expect(page.url()).toBe(`${url}/#update=${encodeURIComponent(target.updateId)}`);
      const detail: UpdateDetail = await store.getUpdate(target.updateId);
      const rowLocators = await page.locator('#record table.groups tr[data-group-id]').all();
      const rows = await Promise.all(
        rowLocators.map(async (tr) => ({ id: await tr.getAttribute('data-group-id'), coords: await tr.locator('td.coords').textContent() })),
      );
      expect(rows).toEqual(detail.groups.map((g) => ({ id: g.groupId, coords: `${g.source.topic}:${g.source.partition}@${g.source.offset}` })));
      expect(JSON.parse((await page.textContent('#record pre.json')) ?? 'null')).toEqual(JSON.parse(JSON.stringify(detail)));

      await page.click(`#updates tr[data-update-id="${target.updateId}"] button.verify`);
      const result = page.locator(`#updates tr[data-update-id="${target.updateId}"] .verify-result`);
      await result.locator('xpath=self::*[contains(@class, "ok") or contains(@class, "bad")]').waitFor({ timeout: 60_000 });
      expect(await result.textContent()).toMatch(/^ verified \(\d+ checks, weights hash matches\)$/);
      expect(await result.getAttribute('class')).toBe('verify-result ok');

      fs.mkdirSync(path.dirname(ARTIFACT), { recursive: true });
      await page.screenshot({ path: ARTIFACT, fullPage: true });
      expect(fs.statSync(ARTIFACT).size).toBeGreaterThan(10_000);
      expect(outside).toEqual([]);
      expect(pageErrors).toEqual([]);
    } finally {
      await context.close();
    }
  }, 90_000);

  // Runs last: it erases content the learner then leaves out, after the tests above read the run.
  it("shows the erasures panel: empty, then the store's erasures newest first and the sets left out, never a key", async () => {
    const auth = { headers: { Authorization: `Bearer ${READ_TOKEN}` } };
    const noErasure = { erasures: [], total: 0, learner: { policyId: 'solver', setsErased: 0, groupsSkippedErased: 0 } };
    expect(await (await fetch(`${url}/erasures`, auth)).json()).toEqual(noErasure);
    const bad = await fetch(`${url}/erasures?limit=1001`, auth);
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { message?: string }).message).toBe('limit: expected an integer in [1, 1000], got 1001');

    const context = await (browser as Browser).newContext();
    const page = await context.newPage();
    const pageErrors: string[] = [];
    page.on('pageerror', (e) => pageErrors.push(e.message));
    // `srpo erase` is another process: its own connection to the learner's SQLite store.
    const eraser = await KeyStore.open({ kind: 'sqlite', path: path.join(dir, 'learner.sqlite') });
    try {
      await page.goto(`${url}/`);
      await page.waitForSelector('#erasures[data-state="error"]');
      expect(await page.textContent('#erasures-total')).toMatch(/\/erasures\?limit=100: HTTP 401/);
      await page.fill('#token', READ_TOKEN);
      await page.click('#reload');
      await page.waitForSelector('#erasures[data-state="empty"]');
      expect(await page.isVisible('#erasures-empty')).toBe(true);
      expect(await page.isVisible('#erasures-table')).toBe(false);
      expect([await page.textContent('#erased-sets'), await page.textContent('#erased-groups')]).toEqual(['0', '0']);

      // An episode erasure (one key), then alice's (four keys: the episodes of a group of four
      // sets, sealed under them and sent after the erasure). The learner leaves all four sets out
      // and skips the group as erased.
      const t = Date.now();
      const keys: ContentKey[] = [await eraser.keyFor(null, 'ep-anon', t)];
      await eraser.erase({ episodeId: 'ep-anon' }, 'er-dash-episode', t - 1000);
      const sealed = await Promise.all([0, 1, 2, 3].map((j) => eraser.keyFor('alice', `ep-e${j}/o`, t)));
      keys.push(...sealed);
      const erasedGroup = advantageGroup(
        'g-erased',
        sealed.map((key, j) => ({
          set: activeSet(`e${j}`, [member({ outputId: `e${j}/o`, logpOld: [-2.5, -2.75, -3], version: 0, subjectId: 'alice', seal: key })]),
          advantage: j < 2 ? 0.5 : -0.5,
        })),
      );
      expect((await eraser.erase({ subjectId: 'alice' }, 'er-dash-subject', t)).erasure.keyIds).toHaveLength(4);
      await produceGroups(kafka, catalog.advantageGroups.name, [erasedGroup]);
      const deadline = Date.now() + 20_000;
      while (!(await store.skippedGroupIds('solver', ['g-erased'])).has('g-erased')) {
        if (Date.now() > deadline) throw new Error('the learner did not skip the erased group within 20 s');
        await sleep(100);
      }
      expect((await store.listUpdates({ policyId: 'solver' })).length).toBe(GROUPS / 2);

      const res = await fetch(`${url}/erasures`, auth);
      const body = await res.text();
      expect(JSON.parse(body)).toEqual({
        erasures: [
          { erasureId: 'er-dash-subject', scope: 'subject', target: 'alice', erasedAtMs: t, erasedAt: new Date(t).toISOString(), keysDeleted: 4 },
          {
            erasureId: 'er-dash-episode',
            scope: 'episode',
            target: 'ep-anon',
            erasedAtMs: t - 1000,
            erasedAt: new Date(t - 1000).toISOString(),
            keysDeleted: 1,
          },
        ],
        total: 2,
        learner: { policyId: 'solver', setsErased: 4, groupsSkippedErased: 1 },
      });
      // The same counts as the learner's Prometheus counters.
      const metrics = await (await fetch(`${url}/metrics`, auth)).text();
      expect(metrics).toMatch(/^learner_sets_erased_total 4$/m);
      expect(metrics).toMatch(/^learner_groups_skipped_total\{reason="erased"\} 1$/m);

      await page.click('#reload');
      await page.waitForSelector('#erasures[data-state="loaded"]');
      const rows = await Promise.all(
        (await page.locator('#erasures-table tbody tr').all()).map(async (tr) => [
          await tr.getAttribute('data-erasure-id'),
          ...(await tr.locator('td').allTextContents()),
        ]),
      );
      expect(rows).toEqual([
        ['er-dash-subject', 'er-dash-subject', 'subject', 'alice', new Date(t).toISOString(), '4'],
        ['er-dash-episode', 'er-dash-episode', 'episode', 'ep-anon', new Date(t - 1000).toISOString(), '1'],
      ]);
      expect(await page.isVisible('#erasures-empty')).toBe(false);
      expect([await page.textContent('#erased-sets'), await page.textContent('#erased-groups')]).toEqual(['4', '1']);
      expect(await page.textContent('#erasures-total')).toBe('(policy solver); 2 erasure(s) in the store');

      // No key, in any spelling, nor a key id, in the endpoint's answer or the rendered page.
      const html = await page.content();
      expect(html).toContain('er-dash-subject');
      for (const k of keys) {
        const spellings = [k.key.toString('hex'), k.key.toString('hex').toUpperCase(), k.key.toString('base64'), k.key.toString('base64url'), k.keyId];
        for (const text of [body, html]) expect(spellings.filter((x) => text.includes(x))).toEqual([]);
      }
      expect(pageErrors).toEqual([]);
    } finally {
      await eraser.close();
      await context.close();
    }
  }, 60_000);
});
