/**
 * The dashboard page. Its only dependency, the uPlot chart library, is served
 * by the learner itself (`/assets/`), so the page works offline and
 * air-gapped; it references no other origin. It reads the same JSON API as any
 * client (`/policies`, `/updates`, `/group-stats`, `/erasures`); with SRPO_API_READ_TOKEN
 * or SRPO_API_TOKEN set, the token typed into the page (either) is sent as a
 * bearer header and kept in sessionStorage only.
 *
 * After each chart draws, its element carries `data-points` and `data-last`:
 * for each series, the number of finite values plotted and the last of them.
 * That is the chart's contract with its readers (the browser test compares it
 * with the store), not a debug aid. Likewise the erasures panel carries
 * `data-state` (`loading`, `empty`, `loaded`, `error`) and one row per erasure
 * with `data-erasure-id`. It shows counts of deleted keys, never keys.
 */
export const DASHBOARD_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>SRPO learner</title>
<link rel="stylesheet" href="/assets/uPlot.min.css">
<style>
  body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
  h1 { font-size: 1.3em; } h2 { font-size: 1.05em; margin: 1.2em 0 .3em; } h3 { font-size: .95em; margin: 0 0 .3em; font-weight: 600; }
  .charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(420px, 1fr)); gap: 1em; }
  .chart { border: 1px solid #ddd; padding: .5em; min-height: 120px; } .chart .empty { color: #888; padding: 2em 0; text-align: center; }
  .chart .note { color: #666; font-size: .85em; }
  table { border-collapse: collapse; margin-top: .5em; } td, th { border-bottom: 1px solid #eee; padding: .25em .6em; text-align: left; vertical-align: top; }
  code { font-size: .9em; } .ok { color: #070; } .bad { color: #b00; } #status { color: #666; font-weight: normal; }
  #record { border: 1px solid #bbb; padding: .6em 1em; margin-top: 1em; background: #fafafa; }
  #erasures .empty { color: #888; } #erasures .counts b { font-weight: 600; }
  #record[hidden] { display: none; } #record pre { max-height: 24em; overflow: auto; background: #fff; border: 1px solid #eee; padding: .5em; }
</style>
</head>
<body>
<h1>SRPO learner <span id="status"></span></h1>
<label>policy <select id="policy"></select></label>
<label>API token <input id="token" type="password" size="24"></label>
<button id="reload">reload</button>
<div class="charts" id="charts"></div>
<section id="record" hidden></section>
<h2>Erasures</h2>
<section id="erasures" data-state="loading">
<div class="counts">sets left out as erased since this learner started: <b id="erased-sets">–</b>; groups skipped as erased: <b id="erased-groups">–</b> <span id="erasures-total"></span></div>
<div class="empty" id="erasures-empty" hidden>no erasure recorded in this store</div>
<table id="erasures-table" hidden><thead><tr><th>erasure</th><th>scope</th><th>subject / episode</th><th>erased at</th><th>keys deleted</th></tr></thead><tbody></tbody></table>
</section>
<h2>Updates</h2>
<table id="updates"><thead><tr><th>version</th><th>update</th><th>committed</th><th>loss</th><th>groups</th><th>weights after</th><th>audit</th></tr></thead><tbody></tbody></table>
<script src="/assets/uPlot.iife.min.js"></script>
<script>
(function () {
  'use strict';
  var WHOLE = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000];
  var COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#17becf', '#8c564b', '#e377c2'];
  var tokenInput = document.getElementById('token');
  var statusEl = document.getElementById('status');
  var charts = [];
  tokenInput.value = sessionStorage.getItem('srpo-token') || '';

  function api(path, init) {
    init = init || {};
    var t = tokenInput.value.trim();
    if (t) { sessionStorage.setItem('srpo-token', t); init.headers = { Authorization: 'Bearer ' + t }; }
    return fetch(path, init).then(function (r) {
      if (!r.ok) return r.json().catch(function () { return {}; }).then(function (b) { throw new Error(path + ': HTTP ' + r.status + (b.message ? ' ' + b.message : '')); });
      return r.json();
    });
  }
  function el(tag, text, cls) { var e = document.createElement(tag); if (text !== undefined) e.textContent = String(text); if (cls) e.className = cls; return e; }
  function finite(v) { return typeof v === 'number' && isFinite(v); }
  function num(v, digits) { return finite(v) ? Number(v).toPrecision(digits || 4) : String(v); }
  function coords(c) { return c.topic + ':' + c.partition + '@' + c.offset; }

  /** Shared x values, one array per series (null where a series has no value). */
  function aligned(xs, series) {
    return [xs].concat(series.map(function (s) { return xs.map(function (x) { var v = s.values[x]; return finite(v) ? v : null; }); }));
  }

  /** Per series: how many finite values were plotted, and the last of them. */
  function drawnSummary(u) {
    var points = {}, last = {};
    for (var i = 1; i < u.series.length; i++) {
      var n = 0, ys = u.data[i] || [];
      for (var j = 0; j < ys.length; j++) if (finite(ys[j])) { n++; last[u.series[i].label] = ys[j]; }
      points[u.series[i].label] = n;
    }
    return { points: points, last: last };
  }

  /**
   * spec: { id, title, note, time (x in epoch ms), xs, series: [{ label, values: {x: y}, scale }], scales }
   */
  function chart(spec) {
    var box = el('div', undefined, 'chart'); box.dataset.chart = spec.id; box.id = 'chart-' + spec.id;
    box.appendChild(el('h3', spec.title));
    document.getElementById('charts').appendChild(box);
    var series = spec.series.filter(function (s) { return Object.keys(s.values).some(function (x) { return finite(s.values[x]); }); });
    if (spec.xs.length === 0 || series.length === 0) {
      box.appendChild(el('div', 'no data', 'empty'));
      box.dataset.points = '{}';
      box.dataset.state = 'empty';
      return;
    }
    // Versions and lags are whole numbers: no ticks between them.
    var axes = [spec.time ? {} : { incrs: WHOLE }, { scale: 'y', size: 60 }];
    var scales = { x: { time: !!spec.time } };
    if (spec.right) { axes.push({ scale: spec.right, side: 1, grid: { show: false }, size: 50, incrs: WHOLE }); scales[spec.right] = {}; }
    var opts = {
      width: Math.max(320, box.clientWidth - 16), height: 220, ms: 1, scales: scales, axes: axes,
      series: [{ label: spec.time ? 'time' : 'version' }].concat(series.map(function (s, i) {
        return { label: s.label, stroke: COLORS[i % COLORS.length], width: 2, spanGaps: true, scale: s.scale || 'y', points: { show: true, size: 5 } };
      })),
      hooks: { draw: [function (u) { var d = drawnSummary(u); box.dataset.points = JSON.stringify(d.points); box.dataset.last = JSON.stringify(d.last); box.dataset.state = 'drawn'; }] },
    };
    charts.push(new uPlot(opts, aligned(spec.xs, series), box));
    if (spec.note) box.appendChild(el('div', spec.note, 'note'));
  }

  function byVersion(updates, pick) {
    var values = {};
    updates.forEach(function (u) { values[u.versionAfter] = pick(u); });
    return values;
  }
  function diag(name) { return function (u) { return name === 'loss' ? u.loss : u.diagnostics[name]; }; }
  function diagnosticKs(updates, prefix) {
    var ks = {};
    updates.forEach(function (u) { Object.keys(u.diagnostics).forEach(function (k) { if (k.indexOf(prefix) === 0 && /^[0-9]+$/.test(k.slice(prefix.length))) ks[k.slice(prefix.length)] = true; }); });
    return Object.keys(ks).sort(function (a, b) { return a - b; });
  }

  /** Per update (x = its commit time) and workflow kind: sums of the group statistics. */
  function perUpdate(stats, keyOf) {
    var groups = {};
    stats.forEach(function (s) {
      var key = keyOf(s);
      var g = groups[key] || (groups[key] = {});
      var a = g[s.createdAtMs] || (g[s.createdAtMs] = { sets: 0, reward: 0, success: 0, known: 0, members: 0, lagSum: 0, lagMax: -Infinity, latSum: 0, latMax: -Infinity, n: 0, version: s.versionAfter });
      a.sets += s.setCount; a.reward += s.rewardMean * s.setCount; a.success += s.successCount; a.known += s.successKnown;
      a.members += s.memberCount; a.lagSum += s.lagMean * s.memberCount; a.lagMax = Math.max(a.lagMax, s.lagMax);
      a.latSum += s.fillLatencyMs; a.latMax = Math.max(a.latMax, s.fillLatencyMs); a.n++;
    });
    return groups;
  }
  function values(agg, f) { var out = {}; Object.keys(agg).forEach(function (x) { out[x] = f(agg[x]); }); return out; }
  function sortedNumbers(keys) { return keys.map(Number).sort(function (a, b) { return a - b; }); }

  function drawCharts(updates, stats) {
    charts.forEach(function (c) { c.destroy(); }); charts = [];
    document.getElementById('charts').innerHTML = '';
    var versions = updates.map(function (u) { return u.versionAfter; });
    var byKind = perUpdate(stats, function (s) { return s.workflowKind || '(mixed)'; });
    var kinds = Object.keys(byKind).sort();
    var all = perUpdate(stats, function () { return 'all'; }).all || {};
    var times = sortedNumbers(Object.keys(all));
    var lagByVersion = {}; Object.keys(all).forEach(function (t) { lagByVersion[all[t].version] = all[t]; });

    chart({ id: 'reward', title: 'reward per workflow (mean over the sets of each update)', time: true, xs: times,
      series: kinds.map(function (k) { return { label: k, values: values(byKind[k], function (a) { return a.reward / a.sets; }) }; }) });
    chart({ id: 'success', title: 'success rate per workflow', time: true, xs: times,
      series: kinds.map(function (k) { return { label: k, values: values(byKind[k], function (a) { return a.known > 0 ? a.success / a.known : null; }) }; }) });
    chart({ id: 'loss', title: 'loss', xs: versions, series: [{ label: 'loss', values: byVersion(updates, diag('loss')) }] });
    var clipKs = diagnosticKs(updates, 'losses/clip_frac_low_k');
    chart({ id: 'clip', title: 'clip fraction (low / high' + (clipKs.length ? ', per set size K' : '') + ')', xs: versions,
      note: clipKs.length ? undefined : 'per set size: not in the diagnostics of these updates',
      series: [{ label: 'low', values: byVersion(updates, diag('losses/clip_frac_low')) }, { label: 'high', values: byVersion(updates, diag('losses/clip_frac_high')) }].concat(
        clipKs.reduce(function (acc, k) {
          return acc.concat([{ label: 'low K=' + k, values: byVersion(updates, diag('losses/clip_frac_low_k' + k)) }, { label: 'high K=' + k, values: byVersion(updates, diag('losses/clip_frac_high_k' + k)) }]);
        }, [])) });
    var ratioKs = diagnosticKs(updates, 'ratio/mean_k');
    chart({ id: 'ratio', title: 'set ratio distribution (min / mean / max, mean per set size K)', xs: versions,
      series: [{ label: 'min', values: byVersion(updates, diag('ratio/min')) }, { label: 'mean', values: byVersion(updates, diag('ratio/mean')) }, { label: 'max', values: byVersion(updates, diag('ratio/max')) }].concat(
        ratioKs.map(function (k) { return { label: 'mean K=' + k, values: byVersion(updates, diag('ratio/mean_k' + k)) }; })) });
    chart({ id: 'kl-lag', title: 'approx. KL (k3, left) and policy lag in versions (right)', xs: versions, right: 'lag',
      series: [
        { label: 'KL', values: byVersion(updates, diag('kl/approx_k3')) },
        { label: 'lag max', scale: 'lag', values: values(lagByVersion, function (a) { return a.lagMax; }) },
        { label: 'lag mean', scale: 'lag', values: values(lagByVersion, function (a) { return a.members > 0 ? a.lagSum / a.members : null; }) },
      ] });
    // Engine/learner mismatch (docs/objective.md section 7): only updates run with SRPO_CORRECTION or SRPO_KL_COEF have these.
    chart({ id: 'mismatch', title: 'engine/learner mismatch: set log-ratio learner − engine, k3, KL to reference (left); share of sets truncated / masked (right)', xs: versions, right: 'share',
      note: updates.some(function (u) { return u.diagnostics['mismatch/log_ratio_mean'] !== undefined; }) ? undefined : 'no correction in these updates (SRPO_CORRECTION=none)',
      series: [
        { label: 'log-ratio min', values: byVersion(updates, diag('mismatch/log_ratio_min')) },
        { label: 'log-ratio mean', values: byVersion(updates, diag('mismatch/log_ratio_mean')) },
        { label: 'log-ratio max', values: byVersion(updates, diag('mismatch/log_ratio_max')) },
        { label: 'k3', values: byVersion(updates, diag('mismatch/k3')) },
        { label: 'KL to reference', values: byVersion(updates, diag('losses/kl')) },
        { label: 'truncated', scale: 'share', values: byVersion(updates, diag('mismatch/truncated_frac')) },
        { label: 'masked', scale: 'share', values: byVersion(updates, diag('mismatch/masked_frac')) },
      ] });
    chart({ id: 'latency', title: 'group-fill latency, ms (group event time minus its earliest set or output)', time: true, xs: times,
      series: [{ label: 'mean', values: values(all, function (a) { return a.latSum / a.n; }) }, { label: 'max', values: values(all, function (a) { return a.latMax; }) }] });
    chart({ id: 'grad', title: 'gradient norm (before clipping)', xs: versions, series: [{ label: 'grad norm', values: byVersion(updates, function (u) { return u.gradNorm; }) }] });
  }

  function showRecord(updateId) {
    var box = document.getElementById('record');
    box.hidden = false; box.innerHTML = ''; box.dataset.updateId = updateId; box.dataset.state = 'loading';
    box.appendChild(el('h2', 'Audit record ' + updateId));
    return api('/updates/' + encodeURIComponent(updateId)).then(function (d) {
      var dl = el('table'); dl.className = 'summary';
      [['policy', d.policyId], ['versions', d.versionBefore + ' → ' + d.versionAfter], ['committed', d.createdAt], ['loss', num(d.loss, 6)],
       ['gradient norm', num(d.gradNorm, 6)], ['backend', d.backend], ['seed', d.seed], ['code', d.codeVersion],
       ['weights before', d.weightsHashBefore], ['weights after', d.weightsHashAfter], ['checkpoint', d.checkpointUri]].forEach(function (row) {
        var tr = el('tr'); tr.appendChild(el('th', row[0])); tr.appendChild(el('td', row[1])); dl.appendChild(tr);
      });
      box.appendChild(dl);
      box.appendChild(el('h3', 'groups'));
      var gt = el('table'); gt.className = 'groups';
      var head = el('tr'); ['#', 'group', 'key', 'event', 'sets', 'advantages'].forEach(function (h) { head.appendChild(el('th', h)); }); gt.appendChild(head);
      d.groups.forEach(function (g) {
        var tr = el('tr'); tr.dataset.groupId = g.groupId;
        tr.appendChild(el('td', g.position)); tr.appendChild(el('td', g.groupId)); tr.appendChild(el('td', g.groupKey));
        tr.appendChild(el('td', coords(g.source), 'coords')); tr.appendChild(el('td', g.setIds.length));
        tr.appendChild(el('td', g.advantages.map(function (a) { return num(a, 3); }).join(', ')));
        gt.appendChild(tr);
      });
      box.appendChild(gt);
      var details = el('details'); details.appendChild(el('summary', 'full record (JSON)'));
      var pre = el('pre'); pre.className = 'json'; pre.textContent = JSON.stringify(d, null, 2); details.appendChild(pre);
      box.appendChild(details);
      box.dataset.state = 'loaded';
    }).catch(function (e) { box.appendChild(el('div', e.message, 'bad')); box.dataset.state = 'error'; });
  }

  function drawTable(updates) {
    var body = document.querySelector('#updates tbody'); body.innerHTML = '';
    updates.slice().reverse().forEach(function (u) {
      var tr = el('tr'); tr.dataset.updateId = u.updateId;
      tr.appendChild(el('td', 'v' + u.versionAfter));
      var a = el('a', u.updateId, 'open'); a.href = '/updates/' + encodeURIComponent(u.updateId);
      a.onclick = function (ev) { ev.preventDefault(); history.replaceState(null, '', '#update=' + encodeURIComponent(u.updateId)); showRecord(u.updateId); };
      var td = el('td'); td.appendChild(a); tr.appendChild(td);
      tr.appendChild(el('td', u.createdAt)); tr.appendChild(el('td', num(u.loss, 5)));
      tr.appendChild(el('td', u.diagnostics['batch/sets'] === undefined ? '' : u.diagnostics['batch/sets'] + ' set(s)'));
      var h = el('td'); h.appendChild(el('code', u.weightsHashAfter.slice(0, 16))); tr.appendChild(h);
      var vt = el('td'), b = el('button', 'verify', 'verify'), out = el('span', '', 'verify-result');
      b.onclick = function () {
        out.textContent = ' …'; out.className = 'verify-result'; b.disabled = true;
        api('/updates/' + encodeURIComponent(u.updateId) + '/verify', { method: 'POST' }).then(function (r) {
          out.textContent = r.ok ? ' verified (' + r.checks.length + ' checks, weights hash matches)' : ' FAILED: ' + r.failure;
          out.className = 'verify-result ' + (r.ok ? 'ok' : 'bad');
          out.title = r.checks.map(function (c) { return (c.ok ? 'ok ' : 'FAILED ') + c.name + ': ' + c.detail; }).join('\\n');
        }).catch(function (e) { out.textContent = ' ' + e.message; out.className = 'verify-result bad'; }).then(function () { b.disabled = false; });
      };
      vt.appendChild(b); vt.appendChild(out); tr.appendChild(vt); body.appendChild(tr);
    });
  }

  /** The erasures panel: the store's newest erasures (\`srpo erase\`, docs/erasure.md) and what this learner left out. */
  function loadErasures() {
    var box = document.getElementById('erasures'), table = document.getElementById('erasures-table'), empty = document.getElementById('erasures-empty');
    var total = document.getElementById('erasures-total');
    box.dataset.state = 'loading';
    return api('/erasures?limit=100').then(function (d) {
      document.getElementById('erased-sets').textContent = String(d.learner.setsErased);
      document.getElementById('erased-groups').textContent = String(d.learner.groupsSkippedErased);
      total.className = ''; total.textContent = '(policy ' + d.learner.policyId + '); ' + d.total + ' erasure(s) in the store' +
        (d.total > d.erasures.length ? ', the newest ' + d.erasures.length + ' shown' : '');
      var body = table.querySelector('tbody'); body.innerHTML = '';
      d.erasures.forEach(function (e) {
        var tr = el('tr'); tr.dataset.erasureId = e.erasureId;
        tr.appendChild(el('td', e.erasureId, 'erasure-id')); tr.appendChild(el('td', e.scope, 'scope')); tr.appendChild(el('td', e.target, 'target'));
        tr.appendChild(el('td', e.erasedAt, 'erased-at')); tr.appendChild(el('td', e.keysDeleted, 'keys-deleted'));
        body.appendChild(tr);
      });
      table.hidden = d.erasures.length === 0; empty.hidden = d.erasures.length > 0;
      box.dataset.state = d.erasures.length > 0 ? 'loaded' : 'empty';
    }).catch(function (e) { table.hidden = true; empty.hidden = true; total.textContent = e.message; total.className = 'bad'; box.dataset.state = 'error'; });
  }

  function load() {
    var policy = document.getElementById('policy').value;
    statusEl.textContent = 'loading…'; document.body.dataset.state = 'loading';
    api('/updates?limit=1000&policy=' + encodeURIComponent(policy)).then(function (updates) {
      var from = updates.length ? '&from=' + updates[0].committedAtMs : '';
      return api('/group-stats?limit=20000&policy=' + encodeURIComponent(policy) + from).then(function (stats) {
        drawCharts(updates, stats);
        drawTable(updates);
        statusEl.textContent = updates.length + ' update(s), ' + stats.length + ' group(s)';
        document.body.dataset.state = 'loaded';
        var m = /^#update=(.+)$/.exec(location.hash);
        if (m) showRecord(decodeURIComponent(m[1]));
      });
    }).catch(function (e) { statusEl.textContent = e.message; document.body.dataset.state = 'error'; });
  }
  function policies() {
    loadErasures();
    api('/policies').then(function (ps) {
      var sel = document.getElementById('policy'), keep = sel.value; sel.innerHTML = '';
      ps.forEach(function (p) { var o = el('option', p.policyId); o.value = p.policyId; sel.appendChild(o); });
      if (keep && ps.some(function (p) { return p.policyId === keep; })) sel.value = keep;
      load();
    }).catch(function (e) { statusEl.textContent = e.message; document.body.dataset.state = 'error'; });
  }
  document.getElementById('reload').onclick = policies;
  document.getElementById('policy').onchange = load;
  if (typeof uPlot === 'undefined') { statusEl.textContent = 'the chart library did not load (/assets/uPlot.iife.min.js)'; document.body.dataset.state = 'error'; return; }
  policies();
})();
</script>
</body>
</html>
`;
