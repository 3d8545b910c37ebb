/**
 * The dashboard: one self-contained page (inline CSS, JS and SVG; no external
 * assets, so it works offline and air-gapped). It reads the same JSON API as
 * any client; with SRPO_API_READ_TOKEN set, the token typed into the page is
 * sent as a bearer header and kept in sessionStorage only.
 */
export const DASHBOARD_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>SRPO learner</title>
<style>
  body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
  h1 { font-size: 1.3em; } h2 { font-size: 1.05em; margin: 1.2em 0 .3em; }
  .charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(360px, 1fr)); gap: 1em; }
  .chart { border: 1px solid #ddd; padding: .5em; } .chart svg { width: 100%; height: 160px; }
  table { border-collapse: collapse; margin-top: .5em; } td, th { border-bottom: 1px solid #eee; padding: .25em .6em; text-align: left; }
  code { font-size: .9em; } .ok { color: #070; } .bad { color: #b00; } #status { color: #666; }
</style>
</head>
<body>
<h1>SRPO learner <span id="status"></span></h1>
<label>policy <select id="policy"></select></label>
<label>read token <input id="token" type="password" size="24"></label>
<button id="reload">reload</button>
<div class="charts" id="charts"></div>
<h2>Updates</h2>
<table id="updates"><thead><tr><th>version</th><th>update</th><th>committed</th><th>loss</th><th>weights after</th><th>audit</th></tr></thead><tbody></tbody></table>
<script>
(function () {
  'use strict';
  var tokenInput = document.getElementById('token');
  tokenInput.value = sessionStorage.getItem('srpo-token') || '';
  function api(path, init) {
    init = init || {};
    var t = tokenInput.value.trim();
    if (t) { sessionStorage.setItem('srpo-token', t); init.headers = { Authorization: 'Bearer ' + t }; }
    return fetch(path, init).then(function (r) { if (!r.ok) throw new Error(path + ': HTTP ' + r.status); return r.json(); });
  }
  function el(tag, text) { var e = document.createElement(tag); if (text !== undefined) e.textContent = String(text); return e; }
  var SVG = 'http://www.w3.org/2000/svg';
  function chart(title, series) {
    var box = el('div'); box.className = 'chart'; box.appendChild(el('div', title));
    var svg = document.createElementNS(SVG, 'svg'); svg.setAttribute('viewBox', '0 0 360 160'); box.appendChild(svg);
    var pts = []; series.forEach(function (s) { s.points.forEach(function (p) { if (isFinite(p[1])) pts.push(p); }); });
    if (pts.length === 0) { box.appendChild(el('div', 'no data')); return box; }
    var xs = pts.map(function (p) { return p[0]; }), ys = pts.map(function (p) { return p[1]; });
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs), y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
    if (x1 === x0) x1 = x0 + 1; if (y1 === y0) { y1 = y0 + 1; y0 = y0 - 1; }
    var colors = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e'];
    series.forEach(function (s, i) {
      var d = s.points.filter(function (p) { return isFinite(p[1]); }).map(function (p, j) {
        return (j ? 'L' : 'M') + (10 + (340 * (p[0] - x0)) / (x1 - x0)).toFixed(1) + ',' + (150 - (140 * (p[1] - y0)) / (y1 - y0)).toFixed(1);
      }).join(' ');
      var path = document.createElementNS(SVG, 'path');
      path.setAttribute('d', d); path.setAttribute('fill', 'none'); path.setAttribute('stroke', colors[i % colors.length]);
      svg.appendChild(path);
    });
    box.appendChild(el('div', series.map(function (s) { return s.name; }).join(' / ') + '  [' + y0.toPrecision(3) + ', ' + y1.toPrecision(3) + ']'));
    return box;
  }
  function load() {
    var policy = document.getElementById('policy').value;
    document.getElementById('status').textContent = 'loading…';
    api('/updates?limit=1000&policy=' + encodeURIComponent(policy)).then(function (updates) {
      var charts = document.getElementById('charts'); charts.innerHTML = '';
      var v = function (name) { return updates.map(function (u) { return [u.versionAfter, name === 'loss' ? u.loss : u.diagnostics[name]]; }); };
      charts.appendChild(chart('loss', [{ name: 'loss', points: v('loss') }]));
      charts.appendChild(chart('clip fraction (low / high)', [{ name: 'low', points: v('losses/clip_frac_low') }, { name: 'high', points: v('losses/clip_frac_high') }]));
      var ks = {}; updates.forEach(function (u) { Object.keys(u.diagnostics).forEach(function (k) { var m = /^ratio\\/mean_k(\\d+)$/.exec(k); if (m) ks[m[1]] = true; }); });
      charts.appendChild(chart('set ratio mean per K', Object.keys(ks).map(function (k) { return { name: 'K=' + k, points: v('ratio/mean_k' + k) }; })));
      charts.appendChild(chart('ratio min / mean / max', [{ name: 'min', points: v('ratio/min') }, { name: 'mean', points: v('ratio/mean') }, { name: 'max', points: v('ratio/max') }]));
      charts.appendChild(chart('approx. KL (k3)', [{ name: 'kl', points: v('kl/approx_k3') }]));
      charts.appendChild(chart('gradient norm', [{ name: 'grad', points: v('grad/norm') }]));
      var body = document.querySelector('#updates tbody'); body.innerHTML = '';
      updates.slice().reverse().forEach(function (u) {
        var tr = el('tr');
        tr.appendChild(el('td', 'v' + u.versionAfter));
        var a = el('a', u.updateId); a.href = '/updates/' + encodeURIComponent(u.updateId); var td = el('td'); td.appendChild(a); tr.appendChild(td);
        tr.appendChild(el('td', u.createdAt)); tr.appendChild(el('td', Number(u.loss).toPrecision(5)));
        var h = el('td'); h.appendChild(el('code', u.weightsHashAfter.slice(0, 16))); tr.appendChild(h);
        var vt = el('td'), b = el('button', 'verify'), out = el('span'); b.className = 'verify';
        b.onclick = function () {
          out.textContent = ' …';
          api('/updates/' + encodeURIComponent(u.updateId) + '/verify', { method: 'POST' }).then(function (r) {
            out.textContent = r.ok ? ' verified' : ' FAILED: ' + r.failure; out.className = r.ok ? 'ok' : 'bad';
          }).catch(function (e) { out.textContent = ' ' + e.message; out.className = 'bad'; });
        };
        vt.appendChild(b); vt.appendChild(out); tr.appendChild(vt); body.appendChild(tr);
      });
      document.getElementById('status').textContent = updates.length + ' update(s)';
    }).catch(function (e) { document.getElementById('status').textContent = e.message; });
  }
  function policies() {
    api('/policies').then(function (ps) {
      var sel = document.getElementById('policy'); sel.innerHTML = '';
      ps.forEach(function (p) { var o = el('option', p.policyId); o.value = p.policyId; sel.appendChild(o); });
      load();
    }).catch(function (e) { document.getElementById('status').textContent = e.message; });
  }
  document.getElementById('reload').onclick = policies;
  document.getElementById('policy').onchange = load;
  policies();
})();
</script>
</body>
</html>
`;
