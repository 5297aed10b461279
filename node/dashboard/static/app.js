// atnode dashboard: polls the node's JSON API (same origin, paths relative to
// the page) and draws one uPlot chart per destination plus a members table,
// with the node's warnings above it.
// No framework, no inline handlers, no network beyond the node itself.
//
// window.__dashboard exposes the live state for tests and for people poking
// at the page from the console; it is read-only by convention.
(function () {
  'use strict';

  const CHART_HEIGHT = 240;
  const FETCH_TIMEOUT_MS = 5000;
  const params = new URLSearchParams(window.location.search);
  const interval = clamp(parseInt(params.get('interval'), 10) || 2000, 250, 60000);

  const state = {
    interval: interval, // refresh period in ms (?interval=MS, 250..60000)
    updates: 0,         // refreshes that completed
    errors: 0,          // failed requests (whole refreshes or single histories)
    lastError: null,    // message of the most recent failure, null after a clean refresh
    lastUpdate: null,   // Date of the last completed refresh
    status: null,       // last /v1/status body
    members: [],        // last /v1/members body
    destinations: [],   // destinations shown, sorted
    failing: [],        // destinations /v1/timeout reports as failing, sorted
    warnings: [],       // last /v1/status warnings shown, as {kind, message}
    charts: {},         // dest -> uPlot instance
  };
  window.__dashboard = state;

  const cards = new Map(); // dest -> card (see newCard)
  let prevStatus = null;   // previous status and its time, for gossip rates
  let prevStatusAt = 0;

  const $ = (id) => document.getElementById(id);

  // ---- formatting --------------------------------------------------------

  function clamp(v, lo, hi) { return Math.min(hi, Math.max(lo, v)); }
  function isNum(v) { return typeof v === 'number' && Number.isFinite(v); }
  function num(v) { return isNum(v) ? v : null; }
  function str(v) { return typeof v === 'string' && v !== '' ? v : '—'; }
  function asArray(v) { return Array.isArray(v) ? v : []; }

  // fmtMs prints a duration given in ms with three significant digits.
  function fmtMs(v) {
    if (!isNum(v)) return '—';
    if (v >= 1000) return Number((v / 1000).toPrecision(3)) + ' s';
    if (v === 0) return '0 ms';
    return Number(v.toPrecision(3)) + ' ms';
  }
  // fmtAxisMs labels a tick of the latency axis: every label carries its
  // unit (100 ms, 500 ms, 1 s), so the log scale reads without the hint.
  function fmtAxisMs(v) { return isNum(v) ? fmtMs(v) : ''; }
  function fmtDuration(ms) {
    if (!isNum(ms)) return '—';
    return ms < 1000 ? ms + ' ms' : Number((ms / 1000).toPrecision(4)) + ' s';
  }
  function fmtCount(v) { return isNum(v) ? Math.round(v).toLocaleString('en-US') : '—'; }
  function fmtBytes(v) {
    if (!isNum(v)) return '—';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (i === 0 ? String(Math.round(v)) : v.toFixed(1)) + ' ' + units[i];
  }
  // fmtQuantile turns 0.9999 into "P99.99".
  function fmtQuantile(q) {
    if (!isNum(q) || q <= 0 || q >= 1) return 'quantile';
    return 'P' + Number((q * 100).toFixed(6));
  }

  function el(tag, className, text) {
    const e = document.createElement(tag);
    if (className) e.className = className;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function setText(id, text) { const e = $(id); if (e.textContent !== text) e.textContent = text; }

  // ---- fetching ----------------------------------------------------------

  async function getJSON(path) {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), FETCH_TIMEOUT_MS);
    try {
      const res = await fetch(path, { cache: 'no-store', headers: { Accept: 'application/json' }, signal: ctl.signal });
      let body = null;
      try { body = await res.json(); } catch (e) { body = null; }
      if (!res.ok) {
        const why = body && typeof body.error === 'string' ? body.error : res.statusText;
        throw new Error(path + ': ' + res.status + ' ' + why);
      }
      if (body === null) throw new Error(path + ': response is not JSON');
      return body;
    } catch (err) {
      if (err && err.name === 'AbortError') throw new Error(path + ': no answer within ' + FETCH_TIMEOUT_MS / 1000 + ' s');
      throw err;
    } finally {
      clearTimeout(timer);
    }
  }

  function message(err) { return String((err && err.message) || err); }

  // timeoutQueries asks GET /v1/timeout about every destination, at most 64
  // (the API's limit) and about 4000 characters of query per request: its
  // failing field lists the requested destinations this node treats as
  // failing, so a few requests cover the whole page.
  const MAX_TIMEOUT_DESTS = 64;
  const MAX_QUERY_CHARS = 4000;
  function timeoutQueries(dests) {
    const out = [];
    let params = [];
    let chars = 0;
    for (const d of dests) {
      const p = 'dest=' + encodeURIComponent(d);
      if (params.length > 0 && (params.length === MAX_TIMEOUT_DESTS || chars + p.length > MAX_QUERY_CHARS)) {
        out.push('v1/timeout?' + params.join('&'));
        params = [];
        chars = 0;
      }
      params.push(p);
      chars += p.length + 1;
    }
    if (params.length > 0) out.push('v1/timeout?' + params.join('&'));
    return out;
  }

  // failingSet collects the failing destinations of the /v1/timeout
  // answers. A node without failure-aware timeouts sends no failing field:
  // then nothing is failing. A request that failed counts as an error of the
  // refresh and marks none of its destinations.
  function failingSet(dests, timeouts) {
    const known = new Set(dests);
    const out = new Set();
    for (const r of timeouts) {
      if (!r.ok || !r.body || typeof r.body !== 'object') continue;
      for (const d of asArray(r.body.failing)) if (known.has(d)) out.add(d);
    }
    return out;
  }

  // One refresh at a time: the next is scheduled when this one ends. A
  // hidden tab skips its turns and refreshes as soon as it is shown again.
  let timer = 0;
  let inflight = false;
  function schedule(delay) {
    window.clearTimeout(timer);
    timer = window.setTimeout(refresh, delay);
  }
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden && !inflight) schedule(0);
  });

  async function refresh() {
    if (document.hidden) {
      schedule(interval);
      return;
    }
    inflight = true;
    try {
      const [status, members] = await Promise.all([getJSON('v1/status'), getJSON('v1/members')]);
      const dests = Array.from(new Set(asArray(status.destinations).filter((d) => typeof d === 'string' && d !== ''))).sort();
      // One failed history (a destination that just expired, say) marks its
      // card and leaves the others alone.
      const settle = (p) => p.then((body) => ({ ok: true, body: body }), (err) => ({ ok: false, err: message(err) }));
      const [histories, timeouts] = await Promise.all([
        Promise.all(dests.map((d) => settle(getJSON('v1/history?dest=' + encodeURIComponent(d))))),
        Promise.all(timeoutQueries(dests).map((q) => settle(getJSON(q)))),
      ]);
      let failed = null;
      for (const r of histories.concat(timeouts)) if (!r.ok) { state.errors++; failed = r.err; }
      const failing = failingSet(dests, timeouts);

      renderStatus(status);
      renderWarnings(status.warnings);
      renderMembers(asArray(members), status);
      renderDests(dests, histories, failing);

      state.status = status;
      state.members = asArray(members);
      state.destinations = dests;
      state.failing = Array.from(failing).sort();
      state.updates++;
      state.lastUpdate = new Date();
      state.lastError = failed;
      renderConn();
    } catch (err) {
      state.errors++;
      state.lastError = message(err);
      renderConn();
    } finally {
      inflight = false;
      schedule(interval);
    }
  }

  // ---- header --------------------------------------------------------------

  function renderConn() {
    const c = $('conn');
    let st, text;
    const age = state.lastUpdate ? (Date.now() - state.lastUpdate.getTime()) / 1000 : null;
    if (state.lastError && (age === null || age * 1000 > 2 * interval)) {
      st = 'error';
      text = 'cannot refresh: ' + state.lastError;
    } else if (age === null) {
      st = 'connecting';
      text = 'connecting…';
    } else if (age * 1000 > 3 * interval + 1000) {
      st = 'stale';
      text = 'stale: last update ' + Math.round(age) + ' s ago';
    } else {
      st = 'live';
      text = 'live, every ' + fmtDuration(interval) + (state.lastError ? ' (' + state.lastError + ')' : '');
    }
    c.dataset.state = st;
    if (c.textContent !== text) c.textContent = text;
  }

  // setGossip shows a cumulative byte counter, its batches and the rate
  // since the previous status.
  function setGossip(id, bytes, batches, prevBytes, seconds) {
    const sub = el('span', 'sub');
    sub.append(el('span', '', fmtCount(batches) + ' batches'));
    if (isNum(bytes) && isNum(prevBytes) && seconds > 0 && bytes >= prevBytes) {
      sub.append(' · ', el('span', '', fmtBytes((bytes - prevBytes) / seconds) + '/s'));
    }
    $(id).replaceChildren(fmtBytes(bytes), sub);
  }

  function renderStatus(s) {
    const node = str(s.node);
    setText('node-name', node);
    document.title = 'atnode ' + node;
    setText('f-member', str(s.member));
    setText('f-gossip-addr', str(s.gossip_addr));
    setText('f-http-addr', str(s.http_addr));
    let win = fmtDuration(num(s.window_ms));
    if (isNum(s.window_ms) && isNum(s.sub_window_ms) && s.sub_window_ms > 0) {
      win += ' = ' + Math.round(s.window_ms / s.sub_window_ms) + ' × ' + fmtDuration(s.sub_window_ms);
    }
    setText('f-window', win);
    setText('f-alive', fmtCount(num(s.members_alive)));

    const g = s.gossip && typeof s.gossip === 'object' ? s.gossip : {};
    const now = performance.now();
    const pg = prevStatus && prevStatus.gossip && typeof prevStatus.gossip === 'object' ? prevStatus.gossip : {};
    const secs = prevStatus ? (now - prevStatusAt) / 1000 : 0;
    setGossip('f-gossip-in', num(g.bytes_in), num(g.batches_in), num(pg.bytes_in), secs);
    setGossip('f-gossip-out', num(g.bytes_out), num(g.batches_out), num(pg.bytes_out), secs);

    const rej = g.rejected && typeof g.rejected === 'object' ? g.rejected : {};
    const reasons = Object.keys(rej).sort();
    let total = 0;
    const parts = reasons.map((k) => { const n = num(rej[k]) || 0; total += n; return k.replace(/_/g, ' ') + ' ' + fmtCount(n); });
    const r = $('f-rejected');
    setText('f-rejected', parts.length ? parts.join(' · ') : 'none');
    r.classList.toggle('warn', total > 0);
    prevStatus = s;
    prevStatusAt = now;
  }

  // ---- warnings ------------------------------------------------------------

  // renderWarnings shows /v1/status's warnings ({kind, message}; kinds such
  // as config_mismatch, name_conflict, clock_skew) in the banner above the
  // members table, and their count in the header. No warnings field, or an
  // empty list, hides both.
  let warningsKey = '';
  function renderWarnings(list) {
    const ws = asArray(list).filter((w) => w && typeof w === 'object' &&
      (typeof w.kind === 'string' || typeof w.message === 'string'))
      .map((w) => ({ kind: typeof w.kind === 'string' ? w.kind : '', message: typeof w.message === 'string' ? w.message : '' }));
    const key = JSON.stringify(ws);
    if (key === warningsKey) return; // the banner is a live region: rewrite it only on change
    warningsKey = key;
    state.warnings = ws;
    const box = $('warnings');
    const items = ws.map((w) => {
      const li = el('li');
      li.dataset.kind = w.kind;
      li.append(el('span', 'w-kind', w.kind ? w.kind.replace(/_/g, ' ') : 'warning'), ' ', el('span', 'w-msg', w.message));
      return li;
    });
    $('warnings-list').replaceChildren(...items);
    setText('warnings-title', ws.length === 1 ? '1 warning' : ws.length + ' warnings');
    box.hidden = ws.length === 0;
    const link = $('warn-link');
    link.textContent = ws.length === 1 ? '1 warning' : ws.length + ' warnings';
    link.hidden = ws.length === 0;
  }

  // ---- members -------------------------------------------------------------

  const STATES = ['alive', 'suspect', 'dead', 'left'];

  function renderMembers(members, status) {
    const tbody = $('members').tBodies[0];
    const rows = members.filter((m) => m && typeof m === 'object').slice().sort((a, b) =>
      String(a.name).localeCompare(String(b.name)) || String(a.member).localeCompare(String(b.member)));
    const frag = document.createDocumentFragment();
    if (rows.length === 0) {
      const tr = el('tr', 'placeholder');
      const td = el('td', '', 'No members known yet.');
      td.colSpan = 5;
      tr.append(td);
      frag.append(tr);
    }
    for (const m of rows) {
      const tr = el('tr');
      tr.dataset.member = String(m.member);
      if (status && m.member === status.member) tr.classList.add('self');
      const stateName = STATES.includes(m.state) ? m.state : 'unknown';
      const badge = el('span', 'state state-' + stateName, str(m.state));
      const stateCell = el('td');
      stateCell.append(badge);
      tr.append(el('td', '', str(m.name)), el('td', '', str(m.member)), el('td', '', str(m.addr)), stateCell, el('td', '', str(m.boot_id)));
      frag.append(tr);
    }
    tbody.replaceChildren(frag);
  }

  // ---- destinations ----------------------------------------------------------

  function cssColor(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }

  // Series of every chart, in the order uPlot draws them (and lists them
  // in the legend): the timeout is drawn last, so that where it coincides
  // with the peers line (a peer count and a timeout on different scales can
  // meet anywhere) its dashes stay on top.
  const SERIES = ['time', 'local', 'fleet', 'peers', 'timeout'];
  const COL = Object.fromEntries(SERIES.map((name, i) => [name, i]));

  // lastValue is series i's value at the latest point (null in a gap),
  // which the legend shows while the cursor is not over the chart: the
  // same values as the stats above the chart.
  function lastValue(u, i) {
    const col = u.data[i] || [];
    return col.length ? col[col.length - 1] : null;
  }

  // axisSize fits a y axis to its widest tick label (uPlot's size callback):
  // tick, gap and text, so "500 ms" is never clipped.
  function axisSize(u, values, axisIdx, cycleNum) {
    const axis = u.axes[axisIdx];
    if (cycleNum > 1) return axis._size;
    let size = axis.ticks.size + axis.gap;
    const longest = asArray(values).reduce((a, v) => (typeof v === 'string' && v.length > a.length ? v : a), '');
    if (longest !== '') {
      u.ctx.font = axis.font[0];
      size += u.ctx.measureText(longest).width / window.devicePixelRatio;
    }
    return Math.ceil(size) + 2;
  }

  // decades widens [min, max] to whole powers of ten (0 stays 0), for the
  // latency scale; no data gives 1 ms to 1 s.
  function decades(min, max) {
    if (!isNum(min) || !isNum(max)) return [1, 1000];
    const lo = min > 0 ? Math.pow(10, Math.floor(Math.log10(min))) : 0;
    const hi = max > 0 ? Math.pow(10, Math.ceil(Math.log10(max))) : 1;
    return [lo, Math.max(hi, lo * 10, 1)];
  }

  // Time ticks in 24-hour time, as in the legend, with the hour and minute
  // under the first tick and wherever the minute rolls over. A history
  // spans minutes, so no tick carries a date. Rows: uPlot's [smallest tick
  // step in s, format, then on a change of year, month, day, hour, minute,
  // second, mode 1 = append].
  const HHMM = '\n{HH}:{mm}';
  const TIME_TICKS = [
    [60, '{HH}:{mm}', null, null, null, null, null, null, 1],
    [1, ':{ss}', HHMM, HHMM, HHMM, HHMM, HHMM, null, 1],
    [0.001, ':{ss}.{fff}', HHMM, HHMM, HHMM, HHMM, HHMM, null, 1],
  ];

  // Axis titles, drawn by uPlot beside the y axes.
  const AXIS_TITLES = { ms: 'latency (log scale)', peers: 'peers' };

  function chartOptions(width, qLabel) {
    const c = {
      local: cssColor('--c-local'),
      fleet: cssColor('--c-fleet'),
      timeout: cssColor('--c-timeout'),
      peers: cssColor('--c-peers'),
      axis: cssColor('--muted'),
      grid: cssColor('--grid'),
    };
    // Legend values: at the cursor while it is over a chart (cursor sync
    // moves it on every chart), else the latest value (uPlot then passes
    // idx null).
    const legend = (fmt) => (u, v, i, idx) => fmt(idx == null ? lastValue(u, i) : v);
    const clock = uPlot.fmtDate('{HH}:{mm}:{ss}');
    const timeValue = (u, v, i, idx) => {
      const t = idx == null ? lastValue(u, i) : v;
      if (!isNum(t)) return '—';
      return clock(new Date(t * 1000)) + (idx == null ? ' (latest)' : '');
    };
    const titleFont = '600 12px ' + getComputedStyle(document.body).fontFamily;
    const axis = { stroke: c.axis, grid: { stroke: c.grid, width: 1 }, ticks: { stroke: c.grid, width: 1 } };
    const yAxis = { size: axisSize, labelSize: 18, labelGap: 0, labelFont: titleFont };
    return {
      width: width,
      height: CHART_HEIGHT,
      cursor: { sync: { key: 'atnode' }, drag: { x: true, y: false } },
      scales: {
        x: { time: true },
        // asinh behaves like a log scale above 1 ms and stays defined at 0,
        // so a 3 ms quantile and a 60 s timeout are both readable. The
        // range spans whole decades, so both ends carry a tick label.
        ms: { distr: 4, asinh: 1, range: (u, min, max) => decades(min, max) },
        peers: { range: (u, min, max) => [0, Math.max(4, Math.ceil((isNum(max) ? max : 0) * 1.25))] },
      },
      axes: [
        Object.assign({}, axis, { values: TIME_TICKS }),
        Object.assign({}, axis, yAxis, { scale: 'ms', label: AXIS_TITLES.ms, values: (u, splits) => {
          const { min, max } = u.scales.ms; // uPlot may offer splits beyond the range: leave them unlabelled
          return splits.map((v) => (isNum(v) && v >= min && v <= max ? fmtAxisMs(v) : ''));
        } }),
        Object.assign({}, axis, yAxis, { scale: 'peers', label: AXIS_TITLES.peers, side: 1, grid: { show: false },
          values: (u, splits) => splits.map((v) => (Number.isInteger(v) ? String(v) : '')) }),
      ],
      series: [
        { label: 'time', value: timeValue },
        { label: 'local ' + qLabel, scale: 'ms', stroke: c.local, width: 2, value: legend(fmtMs) },
        { label: 'fleet ' + qLabel, scale: 'ms', stroke: c.fleet, width: 2, value: legend(fmtMs) },
        { label: 'peers', scale: 'peers', stroke: c.peers, width: 1.5,
          paths: uPlot.paths.stepped({ align: 1 }), value: legend((v) => (isNum(v) ? String(v) : '—')) },
        { label: 'timeout', scale: 'ms', stroke: c.timeout, width: 2, dash: [6, 4], value: legend(fmtMs) },
      ],
    };
  }

  // toColumns turns the points of a history into uPlot's column layout,
  // null for missing or non-numeric values (drawn as gaps).
  function toColumns(points) {
    const cols = SERIES.map(() => []);
    for (const p of points) {
      if (!p || !isNum(p.t_ms)) continue;
      cols[COL.time].push(p.t_ms / 1000);
      cols[COL.local].push(num(p.local_ms));
      cols[COL.fleet].push(num(p.fleet_ms));
      cols[COL.peers].push(num(p.peers));
      cols[COL.timeout].push(num(p.timeout_ms));
    }
    return cols;
  }

  // Stats above each chart: the latest point's values.
  const STATS = [
    ['local', 'local'], ['fleet', 'fleet'], ['timeout', 'timeout'], ['peers', 'peers'],
    ['samples', 'fleet samples'], ['localSamples', 'local samples'],
  ];

  function newCard(dest) {
    const root = el('article', 'card');
    root.dataset.dest = dest;
    const head = el('header', 'card-head');
    const title = el('h3', '', dest);
    title.title = dest;
    const source = el('span', 'badge');
    source.title = 'source of the latest estimate';
    const failing = el('span', 'badge badge-failing', 'failing');
    failing.title = 'this node treats the destination as failing: its timeouts are the backoff fallback until an attempt completes again';
    failing.hidden = true;
    head.append(title, failing, source);
    const stats = el('dl', 'stats');
    const statEls = {};
    for (const [key, label] of STATS) {
      const d = el('div', 's-' + key);
      const dt = el('dt', '', label);
      const dd = el('dd', '', '—');
      d.append(dt, dd);
      stats.append(d);
      statEls[key] = { dt: dt, dd: dd };
    }
    const plot = el('div', 'plot');
    const note = el('p', 'note');
    root.append(head, stats, plot, note);
    const card = { dest: dest, root: root, source: source, failing: failing, statEls: statEls, plot: plot, note: note,
      chart: null, qLabel: null, data: null, lastSource: '', lastGuarded: false, observer: null };
    card.observer = new ResizeObserver(() => resizeCard(card));
    card.observer.observe(plot);
    return card;
  }

  function plotWidth(card) { return Math.max(200, Math.floor(card.plot.clientWidth)); }

  function resizeCard(card) {
    if (!card.chart) return;
    const w = plotWidth(card);
    if (w !== card.chart.width) card.chart.setSize({ width: w, height: CHART_HEIGHT });
  }

  function buildChart(card) {
    if (card.chart) card.chart.destroy();
    card.chart = new uPlot(chartOptions(plotWidth(card), card.qLabel), card.data, card.plot);
    state.charts[card.dest] = card.chart;
  }

  function dropCard(card) {
    card.observer.disconnect();
    if (card.chart) card.chart.destroy();
    card.root.remove();
    delete state.charts[card.dest];
    cards.delete(card.dest);
  }

  // timeoutLabel names what set the timeout shown: the fallback when the
  // destination is failing or has no estimate (source none), this node's
  // own quantile when the local guard decided (it is above the fleet's),
  // else the estimate (plain "timeout").
  function timeoutLabel(failing, source, guarded) {
    if (failing) return 'timeout: fallback (failing)';
    if (source === 'none') return 'timeout: fallback';
    if (guarded) return 'timeout: local guard';
    return 'timeout';
  }

  function updateCard(card, result, failing) {
    card.failing.hidden = !failing;
    card.root.classList.toggle('failing', failing);
    card.statEls.timeout.dt.textContent = timeoutLabel(failing, card.lastSource, card.lastGuarded);
    if (!result.ok) {
      card.note.textContent = 'history unavailable: ' + result.err;
      card.note.classList.add('bad');
      return;
    }
    const h = result.body && typeof result.body === 'object' ? result.body : {};
    const points = asArray(h.points);
    const qLabel = fmtQuantile(h.quantile);
    card.data = toColumns(points);
    if (!card.chart || card.qLabel !== qLabel) {
      card.qLabel = qLabel;
      buildChart(card);
    } else {
      card.chart.setData(card.data);
    }

    const last = points.length ? points[points.length - 1] : {};
    const source = typeof last.source === 'string' ? last.source : '';
    card.lastSource = source;
    card.lastGuarded = last.guarded === true;
    const st = card.statEls;
    st.local.dt.textContent = 'local ' + qLabel;
    st.fleet.dt.textContent = 'fleet ' + qLabel;
    st.local.dd.textContent = fmtMs(num(last.local_ms));
    st.fleet.dd.textContent = fmtMs(num(last.fleet_ms));
    st.timeout.dt.textContent = timeoutLabel(failing, source, card.lastGuarded);
    st.timeout.dd.textContent = fmtMs(num(last.timeout_ms));
    st.peers.dd.textContent = fmtCount(num(last.peers));
    st.samples.dd.textContent = fmtCount(num(last.samples));
    st.localSamples.dd.textContent = fmtCount(num(last.local_samples));
    card.source.textContent = source;
    card.note.classList.remove('bad');
    card.note.textContent = points.length ? '' : h.tracked === false
      ? 'No history kept here: a node keeps one for at most 100 destinations, those it saw first (a new one gets its first point within a second).'
      : 'No points yet: this destination has no recent history.';
  }

  function renderDests(dests, histories, failing) {
    const wanted = new Set(dests);
    for (const card of Array.from(cards.values())) {
      if (!wanted.has(card.dest)) dropCard(card);
    }
    const box = $('dests');
    dests.forEach((dest, i) => {
      let card = cards.get(dest);
      if (!card) {
        card = newCard(dest);
        cards.set(dest, card);
      }
      // Keep the DOM in sorted order without moving cards that are in place.
      if (box.children[i] !== card.root) box.insertBefore(card.root, box.children[i] || null);
      updateCard(card, histories[i], failing.has(dest));
    });
    $('dests-empty').hidden = dests.length > 0;
  }

  // Chart colours are read from CSS when a chart is built, so rebuild them
  // all when the colour scheme changes.
  window.matchMedia('(prefers-color-scheme: dark)').addEventListener('change', () => {
    for (const card of cards.values()) if (card.chart) buildChart(card);
  });

  window.setInterval(renderConn, 1000);
  refresh();
})();
