// The airlock console: reads the daemon's native API with the session's
// rights and draws it. Everything the daemon answers may come from a
// sandbox or a caller (commands, destinations, names): it is only ever
// set as text, never as markup.
'use strict';

const $ = (sel) => document.querySelector(sel);
const el = (tag, attrs = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k === 'onclick') e.addEventListener('click', v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k ?? '')));
  return e;
};
const api = async (path, opts = {}) => {
  const r = await fetch(path, { credentials: 'same-origin', ...opts, headers: { 'X-Airlock-Console': '1', ...(opts.headers || {}) } });
  if (!r.ok) {
    let msg = r.status + ' ' + r.statusText;
    try { const j = await r.json(); if (j.message) msg = j.message; } catch (_) { /* not JSON */ }
    throw new Error(msg);
  }
  return r.status === 204 ? null : r.json();
};
const size = (b) => {
  if (!b) return '0 B';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
  return (i ? b.toFixed(1) : b) + ' ' + u[i];
};
const secs = (ms) => (ms < 1000 ? ms + ' ms' : (ms / 1000).toFixed(1) + ' s');

// A sparkline of values against a ceiling, as SVG built node by node.
const NS = 'http://www.w3.org/2000/svg';
function spark(values, ceiling, w = 140, h = 28) {
  const svg = document.createElementNS(NS, 'svg');
  svg.setAttribute('width', w); svg.setAttribute('height', h); svg.setAttribute('viewBox', `0 0 ${w} ${h}`);
  const top = Math.max(ceiling || 0, ...values, 1);
  const pts = values.map((v, i) => `${values.length < 2 ? 0 : (i * w) / (values.length - 1)},${h - 2 - (v / top) * (h - 4)}`);
  if (ceiling) {
    const l = document.createElementNS(NS, 'line');
    const y = h - 2 - (ceiling / top) * (h - 4);
    l.setAttribute('x1', 0); l.setAttribute('x2', w); l.setAttribute('y1', y); l.setAttribute('y2', y);
    l.setAttribute('stroke', '#b3261e'); l.setAttribute('stroke-dasharray', '3 2');
    svg.append(l);
  }
  const p = document.createElementNS(NS, 'polyline');
  p.setAttribute('points', pts.join(' ')); p.setAttribute('fill', 'none'); p.setAttribute('stroke', '#1a56a6'); p.setAttribute('stroke-width', '1.5');
  svg.append(p);
  return svg;
}

// Samples of each run seen running, kept for its page (the daemon keeps
// none once a run ends).
const samples = new Map();
let selected = null;

async function pools() {
  const list = await api('/v1/pools');
  const tb = $('#pools tbody');
  tb.replaceChildren(...list.map((p) => el('tr', { 'data-tool': p.name },
    el('td', {}, p.node ? `${p.name} (${p.node})` : p.name), el('td', { class: 'num', title: p.reason || '' }, `${p.idle} / ${p.warm}` + (p.max ? ` (${p.min}–${p.max})` : '') + (p.at_capacity ? ' (node at capacity)' : '')),
    el('td', { class: 'num' }, p.hits), el('td', { class: 'num' }, p.misses), el('td', { class: 'num' }, p.create_failures), el('td', {}, p.reason || ''),
    el('td', {}, el('a', { href: '#policy/' + encodeURIComponent(p.name) }, 'suggest')))));
}

async function capacity() {
  const r = await fetch('/metrics', { credentials: 'same-origin' });
  if (!r.ok) return;
  const text = await r.text();
  // A node's, or every node's through a cluster's front (its samples
  // labelled by node): summed.
  const g = (name) => {
    let sum = 0;
    for (const m of text.matchAll(new RegExp('^' + name + '(?:\\{[^}]*\\})? (\\S+)', 'gm'))) sum += Number(m[1]);
    return sum;
  };
  const box = $('#capacity');
  const gauge = (label, used, total, fmt) => el('div', { class: 'gauge', 'data-gauge': label }, el('div', { class: 'quiet' }, label),
    el('div', {}, `${fmt(used)} of ${fmt(total)}`));
  box.replaceChildren(
    gauge('sandboxes', g('airlock_sandboxes_live'), g('airlock_capacity_sandboxes'), (x) => x),
    gauge('memory reserved', g('airlock_sandboxes_memory_reserved_bytes'), g('airlock_capacity_memory_bytes'), size),
    gauge('paused, of the live', g('airlock_sandboxes_paused'), g('airlock_sandboxes_live'), (x) => x));
}

async function ps() {
  const a = await api('/v1/ps');
  const now = Date.now();
  for (const r of a.runs) {
    const s = samples.get(r.id) || { run: r, points: [] };
    s.run = r;
    s.points.push({ t: now, mem: r.memory_bytes, pids: r.pids, cpu: r.cpu_ms, disk: r.disk_bytes });
    if (s.points.length > 600) s.points.shift();
    samples.set(r.id, s);
  }
  const tb = $('#runs tbody');
  const rows = a.runs.map((r) => {
    const pts = samples.get(r.id).points;
    const kill = el('button', { onclick: async () => {
      try { await api('/v1/runs/' + encodeURIComponent(r.id), { method: 'DELETE' }); } catch (e) { alert('not killed: ' + e.message); }
    } }, 'kill');
    return el('tr', { 'data-run': r.id },
      el('td', {}, el('a', { href: '#run/' + encodeURIComponent(r.id) }, r.id)), el('td', {}, r.kind), el('td', {}, r.node ? `${r.tool} (${r.node})` : r.tool), el('td', {}, r.client),
      el('td', { class: 'num' }, secs(r.age_ms)),
      el('td', {}, el('div', { class: 'meter' }, size(r.memory_bytes) + ' / ' + size(r.limits.memory_bytes), spark(pts.map((p) => p.mem), r.limits.memory_bytes))),
      el('td', {}, el('div', { class: 'meter' }, `${r.pids} / ${r.limits.pids}`, spark(pts.map((p) => p.pids), r.limits.pids))),
      el('td', { class: 'num' }, secs(r.cpu_ms)),
      el('td', {}, el('div', { class: 'meter' }, size(r.disk_bytes) + ' / ' + size(r.limits.disk_bytes), spark(pts.map((p) => p.disk), r.limits.disk_bytes))),
      el('td', {}, kill));
  });
  for (const s of a.sessions || []) {
    rows.push(el('tr', { 'data-session': s.id }, el('td', {}, s.id), el('td', {}, 'session'), el('td', {}, s.tool), el('td', {}, ''),
      el('td', {}, s.created), el('td', { colspan: 5 }, s.state + (s.running ? `, ${s.running} running` : ''))));
  }
  tb.replaceChildren(...rows);
  $('#runs-none').hidden = rows.length > 0;
  if (selected && samples.has(selected)) drawCharts(selected);
}

// The audit trail: the newest events, then each new one as it is
// recorded (a long poll), shown newest first and filtered here.
const events = [];
let next = 0;
const summary = (e) => {
  const d = e.detail || {};
  switch (e.kind) {
    case 'run.started': return (d.argv || []).join(' ');
    case 'run.finished': return e.decision === 'limit' && d.limit ? `limit ${d.limit.name}` : (e.decision === 'exited' ? `exit ${d.exit_code}` : (d.error || e.decision));
    case 'limit.breach': return `${d.name}: ceiling ${d.ceiling} ${d.unit || ''}, observed ${d.observed}`;
    case 'egress': case 'dns': return `${d.destination || ''} ${d.code ? '(' + d.code + ')' : ''}`;
    case 'broker': return `${d.service || ''} ${d.operation || d.method + ' ' + d.path} → ${d.status || ''} ${d.code ? '(' + d.code + ')' : ''}`;
    case 'session.ended': return d.reason || '';
    case 'api.request': return `${d.method} ${d.path} → ${d.status}`;
    default: return '';
  }
};
function filtered() {
  const f = Object.fromEntries(new FormData($('#filters')));
  return events.filter((e) => (!f.tool || e.tool === f.tool) && (!f.client || (e.client || '').includes(f.client)) &&
    (!f.kind || e.kind === f.kind || e.kind.startsWith(f.kind + '.') || e.kind.startsWith(f.kind)) &&
    (!f.decision || e.decision === f.decision) && (!f.code || ((e.detail || {}).code || '') === f.code));
}
function drawAudit() {
  const rows = filtered().slice(-300).reverse().map((e) => el('tr', { 'data-kind': e.kind, class: e.decision === 'deny' || e.kind === 'limit.breach' ? 'bad' : '' },
    el('td', {}, new Date(e.time).toLocaleTimeString()), el('td', {}, e.kind), el('td', {}, e.tool || ''), el('td', {}, e.client || ''),
    el('td', {}, e.decision || ''),
    el('td', {}, e.run ? el('a', { href: '#run/' + encodeURIComponent(e.run) }, e.run) : '', ' ', summary(e))));
  $('#audit tbody').replaceChildren(...rows);
}
async function follow() {
  let first = true;
  for (;;) {
    try {
      const q = first ? 'tail=true&limit=200' : `after=${next}&wait=20s&limit=500`;
      const page = await api('/v1/audit?' + q);
      first = false;
      for (const e of page.events) events.push(e);
      if (events.length > 5000) events.splice(0, events.length - 5000);
      if (page.next) next = page.next;
      drawAudit();
    } catch (e) {
      await new Promise((r) => setTimeout(r, 2000));
    }
  }
}

// A run's page: its command, its decisions, its outcome and breach, and
// the samples seen while it ran.
function drawCharts(id) {
  const s = samples.get(id);
  const box = $('#detail-charts');
  if (!s || !box) return;
  const lim = s.run.limits;
  const chart = (label, key, ceiling, fmt) => el('div', { class: 'chart' }, el('div', { class: 'quiet' }, `${label}: ${fmt(s.points[s.points.length - 1][key])}` + (ceiling ? ` of ${fmt(ceiling)}` : '')),
    spark(s.points.map((p) => p[key]), ceiling, 320, 80));
  box.replaceChildren(chart('memory', 'mem', lim.memory_bytes, size), chart('pids', 'pids', lim.pids, (x) => x),
    chart('disk', 'disk', lim.disk_bytes, size), chart('cpu', 'cpu', 0, secs));
}
async function showRun(id) {
  selected = id;
  $('#detail').hidden = false;
  $('#detail-title').textContent = 'Run ' + id;
  const body = $('#detail-body');
  body.replaceChildren(el('p', { class: 'quiet' }, 'loading…'));
  let evs = [];
  try { evs = (await api('/v1/audit?run=' + encodeURIComponent(id) + '&limit=1000')).events; } catch (e) { body.replaceChildren(el('p', { class: 'bad' }, e.message)); return; }
  const started = evs.find((e) => e.kind === 'run.started');
  const finished = evs.find((e) => e.kind === 'run.finished');
  const breach = evs.find((e) => e.kind === 'limit.breach');
  const net = evs.filter((e) => e.kind === 'egress' || e.kind === 'dns' || e.kind === 'broker');
  const parts = [];
  if (started) {
    parts.push(el('p', {}, 'tool ', el('b', {}, started.tool || ''), ', asked by ', started.client || '', ', at ', new Date(started.time).toLocaleString()));
    parts.push(el('pre', { id: 'detail-command' }, ((started.detail || {}).argv || []).join(' ')));
  }
  const s = samples.get(id);
  if (s) {
    const l = s.run.limits;
    parts.push(el('p', { id: 'detail-limits' }, `ceilings: memory ${size(l.memory_bytes)}, pids ${l.pids}, disk ${size(l.disk_bytes)}, time ${secs(l.time_ms)}`));
  }
  if (breach) {
    const d = breach.detail || {};
    parts.push(el('p', { class: 'bad', id: 'detail-breach' }, `breached ${d.name}: ceiling ${d.ceiling} ${d.unit || ''}, observed ${d.observed}`));
  }
  if (finished) {
    const d = finished.detail || {};
    const u = d.usage || {};
    parts.push(el('p', { id: 'detail-outcome' }, `outcome ${finished.decision}` + (finished.decision === 'exited' ? ` (exit ${d.exit_code})` : '') +
      `; wall ${secs(u.wall_ms || 0)}, cpu ${secs(u.cpu_ms || 0)}, memory peak ${size(u.memory_peak_bytes)}, pids peak ${u.pids_peak || 0}`));
  } else {
    parts.push(el('p', { class: 'quiet' }, 'running'));
  }
  if (net.length) {
    parts.push(el('h3', {}, 'Egress and broker decisions'));
    parts.push(el('table', { id: 'detail-net' }, el('tbody', {}, ...net.map((e) => el('tr', { class: e.decision === 'deny' ? 'bad' : '' },
      el('td', {}, e.kind), el('td', {}, e.decision), el('td', {}, summary(e)), el('td', {}, (e.detail || {}).reason || ''))))));
  }
  parts.push(el('div', { class: 'charts', id: 'detail-charts' }));
  body.replaceChildren(...parts);
  drawCharts(id);
}

// A tool's policy suggestion (GET /v1/tools/{name}/policy-suggestion):
// the narrowest egress and broker config its recorded runs needed, as
// `airlock policy suggest` prints it, and the notes that go with it.
async function showPolicy(tool, wildcards) {
  selected = null;
  $('#detail').hidden = false;
  $('#detail-title').textContent = 'Policy suggestion for ' + tool;
  const body = $('#detail-body');
  body.replaceChildren(el('p', { class: 'quiet' }, 'reading the audit log…'));
  let s;
  try {
    s = await api('/v1/tools/' + encodeURIComponent(tool) + '/policy-suggestion' + (wildcards ? '?wildcards=true' : ''));
  } catch (e) { body.replaceChildren(el('p', { class: 'bad', id: 'policy-error' }, e.message)); return; }
  const changed = (s.egress || []).filter((e) => e.action !== 'keep').length + (s.services || []).filter((v) => v.action !== 'keep').length;
  const parts = [
    el('p', { id: 'policy-summary' }, `${s.decisions} decisions from ${new Date(s.since).toLocaleString()} to ${new Date(s.until).toLocaleString()}` +
      (s.truncated ? ' (more were recorded: the oldest were read)' : '') + `; ${changed} change(s) proposed.`),
    el('p', {}, el('a', { href: '#policy/' + encodeURIComponent(tool) + (wildcards ? '' : '/wildcards') }, wildcards ? 'names only' : 'with wildcards, each with its cost')),
  ];
  if ((s.notes || []).length) parts.push(el('ul', { id: 'policy-notes' }, ...s.notes.map((n) => el('li', {}, n))));
  parts.push(el('pre', { id: 'policy-yaml' }, s.yaml));
  body.replaceChildren(...parts);
}

function route() {
  const m = location.hash.match(/^#run\/(.+)$/);
  const p = location.hash.match(/^#policy\/([^/]+)(\/wildcards)?$/);
  if (m) showRun(decodeURIComponent(m[1]));
  else if (p) showPolicy(decodeURIComponent(p[1]), !!p[2]);
  else { selected = null; $('#detail').hidden = true; }
}

async function main() {
  let who;
  try { who = await api('/console/whoami'); } catch (_) {
    $('#login').hidden = false;
    $('#login-failed').hidden = !/login=failed/.test(location.search);
    return;
  }
  $('#who').textContent = 'as ' + who.caller;
  $('#logout').hidden = false;
  $('#app').hidden = false;
  $('#filters').addEventListener('input', drawAudit);
  window.addEventListener('hashchange', route);
  route();
  const every = (fn, ms) => { const tick = async () => { try { await fn(); } catch (_) { /* shown next time */ } setTimeout(tick, ms); }; tick(); };
  every(pools, 2000);
  every(capacity, 2000);
  every(ps, 1000);
  follow();
}
main();
