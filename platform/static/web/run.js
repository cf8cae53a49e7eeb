// The run dashboard: everything live, nothing reloads.
//
// Data comes from the JSON API under data-api (/api/runs/<id>):
//   GET  .../chart?max_points=2000      once (and after a restart): downsampled history per metric
//   GET  .../metrics?after_step=K       every POLL_MS: new points, appended to the charts
//   GET  ...                            every POLL_MS: status, step, attempt, worker, error
//   GET  .../samples?step=S, .../checkpoints   when the step moves (throttled), or a step is chosen
//   GET  .../events?after_id=N          every EVENTS_MS: the log tail
// Each chart div carries data-metric (its first metric) and data-points (how many points of that
// metric it shows), which browser tests read. Drawing, smoothing, log-y, tick labels, the
// outlier-proof y-range, compile-step marks, "no data" and the shared x-zoom are charts.js's
// (GrpoCharts), the same as on the compare page. The newest accuracy and eval/accuracy points also
// fill the facts beside the latest reward; "live" shows while the run is in a live status.
(function () {
  "use strict";
  const root = document.getElementById("run-dashboard");
  if (!root || !window.Plotly || !window.GrpoCharts) return;
  const api = root.dataset.api;
  const terminal = new Set(root.dataset.terminal.split(" "));
  const live = new Set((root.dataset.live || "").split(" "));
  const HEADLINE = {"accuracy": "run-accuracy", "eval/accuracy": "run-eval-accuracy"};  // metric -> fact
  const panels = JSON.parse(document.getElementById("chart-panels").textContent);
  const POLL_MS = 1000;
  const EVENTS_MS = 2000;
  const SIDE_MS = 3000;          // samples and checkpoints at most this often
  const MAX_POINTS = 2000;       // initial chart load, per metric (server-downsampled)
  const RELOAD_AFTER_POINTS = 4 * MAX_POINTS;  // then the whole history is fetched downsampled again
  const MAX_LOG_LINES = 1000;
  const COLORS = ["#2f5bd3", "#e07b24", "#1f8a4c", "#a23bb5", "#c0362c"];
  const $ = (id) => document.getElementById(id);

  const state = {
    lastStep: null, status: root.dataset.status, attempt: null, restarts: null,
    lastEventId: 0, lastSideRefresh: 0, sideDirty: false, runStep: null, finalPolls: 0, chartsLoaded: false,
    headlineSteps: {},  // metric -> the step of the value shown in its fact
  };

  async function getJSON(path) {
    const response = await fetch(api + path, {credentials: "same-origin", headers: {Accept: "application/json"}});
    if (!response.ok) throw new Error(`${path || "/"} answered ${response.status}`);
    return response.json();
  }

  function apiProblem(err) {
    const box = $("api-error");
    if (err) {
      box.textContent = "Live data unavailable: " + err.message;
      box.hidden = false;
      $("run-live").className = "muted small off";
    } else {
      box.hidden = true;
      $("run-live").className = "muted small on";
    }
    showLive();
  }

  function showLive() {
    $("run-live").hidden = !live.has(state.status) || state.finalPolls >= 3;
  }

  // --- charts -------------------------------------------------------------------------------

  const metricToPanel = new Map();   // metric name -> panel
  const charts = GrpoCharts.group({smoothing: 0, logY: false, x: "step"});

  function chartDiv(panel) {
    return document.querySelector(`.chart[data-metric="${CSS.escape(panel.metric)}"]`);
  }

  function addPanel(name) {
    // A metric the page does not know yet (a new trainer metric): a chart of its own.
    const panel = {metric: name, title: name, metrics: [name], band: null, lazy: true};
    const figure = document.createElement("figure");
    figure.className = "chart-box";
    figure.dataset.panel = name;
    figure.hidden = true;
    const caption = document.createElement("figcaption");
    caption.textContent = name;
    const div = document.createElement("div");
    div.className = "chart";
    div.id = "chart-" + name;
    div.dataset.metric = name;
    div.dataset.points = "0";
    figure.append(caption, div);
    $("charts").append(figure);
    panels.push(panel);
    initPanel(panel);
    return panel;
  }

  // Traces: with a band, [mean+spread, mean-spread (filled to the previous), mean]; else one per metric,
  // named without the prefix that a shared chart's title already says ("timing/*": step_s, rollout_s).
  function initPanel(panel) {
    panel.div = chartDiv(panel);
    panel.points = 0;
    panel.bandData = {mean: new Map(), spread: new Map(), drawn: new Set()};
    const traces = [];
    if (panel.band) {
      traces.push({x: [], y: [], mode: "lines", line: {width: 0}, hoverinfo: "skip", name: panel.band + " +"});
      traces.push({x: [], y: [], mode: "lines", line: {width: 0}, fill: "tonexty", fillcolor: "rgba(47,91,211,0.15)",
                   hoverinfo: "skip", name: panel.band + " -"});
    }
    const prefix = panel.title.endsWith("*") ? panel.title.slice(0, -1) : "";
    const label = (metric) => (prefix && metric.startsWith(prefix) && metric.length > prefix.length ? metric.slice(prefix.length) : metric);
    panel.metrics.forEach((metric, i) => traces.push(
      {x: [], y: [], mode: "lines", name: label(metric), line: {width: 1.6, color: COLORS[i % COLORS.length]}}));
    panel.traceOf = (metric) => (panel.band ? 2 : 0) + panel.metrics.indexOf(metric);
    metricToPanel.set(panel.metric, panel);
    for (const m of panel.metrics) metricToPanel.set(m, panel);
    if (panel.band) metricToPanel.set(panel.band, panel);
    panel.chart = charts.chart(panel.div, {
      traces, skipFirst: panel.metrics.some(GrpoCharts.skipsFirstPoint),
      markCompile: panel.metrics.some(GrpoCharts.marksCompile),
      empty: "no data yet",
      layout: {showlegend: panel.metrics.length > 1},
    });
  }

  // points: {metric: [[step, value], ...]} for this panel -> one extendTraces call.
  function extendPanel(panel, points) {
    const x = [], y = [], indices = [];
    for (const metric of panel.metrics) {
      const pts = points[metric];
      if (!pts || !pts.length) continue;
      indices.push(panel.traceOf(metric));
      x.push(pts.map((p) => p[0]));
      y.push(pts.map((p) => p[1]));
      if (metric === panel.metric) panel.points += pts.length;
      if (panel.band) for (const [s, v] of pts) panel.bandData.mean.set(s, v);
    }
    if (panel.band && points[panel.band]) for (const [s, v] of points[panel.band]) panel.bandData.spread.set(s, v);
    if (panel.band) {
      // Band points for steps that now have both a mean and a spread, in step order.
      const ux = [], uy = [], ly = [];
      const steps = [...panel.bandData.mean.keys()].filter((s) => panel.bandData.spread.has(s) && !panel.bandData.drawn.has(s));
      steps.sort((a, b) => a - b);
      for (const s of steps) {
        const m = panel.bandData.mean.get(s), d = panel.bandData.spread.get(s);
        ux.push(s); uy.push(m + d); ly.push(m - d);
        panel.bandData.drawn.add(s);
      }
      if (ux.length) { indices.push(0, 1); x.push(ux, ux); y.push(uy, ly); }
    }
    if (!indices.length) return;
    indices.forEach((trace, k) => panel.chart.extend(trace, {step: x[k]}, y[k]));
    panel.chart.render();
    panel.div.dataset.points = String(panel.points);
    const figure = panel.div.closest("figure");
    if (figure.hidden) {
      figure.hidden = false;
      Plotly.Plots.resize(panel.div);
    }
  }

  function panelFor(metric) {
    return metricToPanel.get(metric) || addPanel(metric);
  }

  // series: {metric: [[step, value], ...]}; a value may be "NaN", "Infinity" or "-Infinity"
  // (GrpoCharts.metricValue makes numbers of them: the charts mark them at their edge).
  function distribute(series) {
    const byPanel = new Map();
    for (const [metric, pts] of Object.entries(series || {})) {
      if (HEADLINE[metric] && pts.length) showHeadline(metric, pts[pts.length - 1]);
      const panel = panelFor(metric);
      if (!byPanel.has(panel)) byPanel.set(panel, {});
      byPanel.get(panel)[metric] = pts.map(([step, value]) => [step, GrpoCharts.metricValue(value)]);
    }
    for (const [panel, points] of byPanel) extendPanel(panel, points);
  }

  // The fact beside the latest reward: the value at the newest step seen.
  function showHeadline(metric, [step, value]) {
    const seen = state.headlineSteps[metric];
    if (seen !== undefined && step < seen) return;
    state.headlineSteps[metric] = step;
    const v = GrpoCharts.metricValue(value);
    $(HEADLINE[metric]).textContent = v === null ? "-" : GrpoCharts.formatValue(v, 3);
  }

  function resetCharts() {
    for (const panel of panels) {
      if (!panel.div) continue;
      Plotly.purge(panel.div);
      initPanel(panel);
      panel.div.dataset.points = "0";
    }
  }

  async function loadCharts() {
    const data = await getJSON(`/chart?max_points=${MAX_POINTS}`);
    resetCharts();
    const series = {};
    for (const [metric, s] of Object.entries(data.series || {})) {
      series[metric] = s.steps.map((step, i) => [step, s.values[i]]);
    }
    distribute(series);
    state.lastStep = typeof data.last_step === "number" ? data.last_step : null;
    state.chartsLoaded = true;
  }

  async function pollMetrics() {
    const after = state.lastStep === null ? -1 : state.lastStep;
    const data = await getJSON(`/metrics?after_step=${after}`);
    distribute(data.series);
    if (typeof data.last_step === "number" && (state.lastStep === null || data.last_step > state.lastStep)) {
      state.lastStep = data.last_step;
    }
  }

  // --- status ---------------------------------------------------------------------------------

  function fmt(value, digits) {
    if (value === null || value === undefined || value === "") return "-";
    if (typeof value === "number" && !Number.isInteger(value)) return value.toPrecision(digits || 4);
    return String(value);
  }

  function fmtDuration(seconds) {
    if (seconds === null || seconds === undefined) return "-";
    seconds = Math.round(seconds);
    const h = Math.floor(seconds / 3600), m = Math.floor((seconds % 3600) / 60), s = seconds % 60;
    const pad = (n) => String(n).padStart(2, "0");
    if (h) return `${h}h ${pad(m)}m ${pad(s)}s`;
    if (m) return `${m}m ${pad(s)}s`;
    return `${s}s`;
  }

  // A time as every page writes it (run_table_format.js, the server's |when filter).
  function fmtTime(iso) {
    return window.RunTableFormat.formatWhen(iso);
  }

  function showRun(run) {
    const badge = $("run-status");
    badge.textContent = run.status;
    badge.dataset.status = run.status;
    badge.className = "badge status-" + run.status;
    root.dataset.status = run.status;
    $("run-step").textContent = run.step;
    $("run-max-steps").textContent = run.max_steps;
    const progress = $("run-progress");
    const fraction = Math.max(0, Math.min(1, run.progress || 0));
    progress.dataset.progress = String(fraction);
    progress.firstElementChild.style.width = (fraction * 100).toFixed(1) + "%";
    $("run-reward").textContent = fmt(run.latest_reward);
    $("run-attempt").textContent = run.attempt;
    $("run-restarts").textContent = run.restarts;
    $("run-max-restarts").textContent = run.max_restarts;
    $("run-worker").textContent = run.worker || "-";
    $("run-heartbeat").textContent = fmtTime(run.heartbeat_at);
    $("run-duration").textContent = fmtDuration(run.duration_s);
    $("run-digest").textContent = run.params_digest || "-";
    const error = $("run-error");
    error.textContent = run.error || "";
    error.hidden = !run.error;
    for (const control of document.querySelectorAll("[data-control]")) {
      control.hidden = !control.dataset.showWhen.split(" ").includes(run.status);
    }
  }

  async function pollRun() {
    const run = await getJSON("");
    const restarted = state.attempt !== null && (run.attempt !== state.attempt || run.restarts !== state.restarts);
    state.attempt = run.attempt;
    state.restarts = run.restarts;
    const stepMoved = run.step !== state.runStep;
    state.runStep = run.step;
    state.status = run.status;
    showRun(run);
    return {restarted, stepMoved};
  }

  // --- samples, checkpoints, log --------------------------------------------------------------

  function cell(text, className) {
    const td = document.createElement("td");
    td.textContent = text;
    if (className) td.className = className;
    return td;
  }

  // Text cut by the server into segments {kind: "text" | "special" | "role", text}: special tokens
  // (<|im_start|>) are muted spans, role names small labels; everything is a text node, never HTML.
  function segmentsCell(segments, fallback) {
    const td = document.createElement("td");
    td.className = "sample-text";
    if (!Array.isArray(segments)) {
      td.textContent = fallback;
      return td;
    }
    for (const seg of segments) {
      if (seg.kind === "text") {
        td.append(document.createTextNode(seg.text));
      } else {
        const span = document.createElement("span");
        span.className = seg.kind === "role" ? "role-label" : "tok-special";
        span.textContent = seg.text;
        td.append(span);
      }
    }
    return td;
  }

  // A multi-turn sample's episode (the API's `episode`): a block per turn (its label and token
  // count, then its text), then the reward parts, the end reason and the tool calls. Text nodes only.
  const TURN_CLASSES = {"assistant": "assistant", "tool call": "tool-call", "tool response": "tool-response", "user": "user"};

  function element(tag, className, text) {
    const el = document.createElement(tag);
    if (className) el.className = className;
    if (text !== undefined) el.textContent = text;
    return el;
  }

  function episodeCell(episode) {
    const td = element("td", "sample-text");
    const box = element("div", "episode");
    box.dataset.endReason = episode.end_reason || "";
    for (const turn of episode.turns || []) {
      const block = element("div", "turn turn-" + (TURN_CLASSES[turn.label] || "other"));
      const head = element("div", "turn-head");
      const tokens = turn.tokens === null || turn.tokens === undefined ? "– tokens"
        : `${turn.tokens} token${turn.tokens === 1 ? "" : "s"}`;
      head.append(element("span", "turn-role", turn.label), " ", element("span", "turn-tokens", tokens));
      block.append(head, element("div", "turn-text", turn.text));
      box.append(block);
    }
    const summary = element("p", "episode-summary");
    const parts = Object.entries(episode.reward_parts || {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([name, value]) => `${name} ${fmt(value, 3)}`);
    if (parts.length) summary.append("reward parts: " + parts.join(", ") + " · ");
    summary.append("ended by ", element("b", "episode-end", episode.end_reason || "–"));
    if (episode.error) summary.append(": ", element("span", "episode-error", episode.error));
    if (episode.tool_calls !== null && episode.tool_calls !== undefined) {
      const failed = episode.tool_errors ? `, ${episode.tool_errors} failed` : "";
      summary.append(` · ${episode.tool_calls} tool call${episode.tool_calls === 1 ? "" : "s"}${failed}`);
    }
    box.append(summary);
    td.append(box);
    return td;
  }

  // A sample's unit test results (the API's `code_tests`, already cut to length by the server): the
  // summary ("3/5 tests passed"), then per test a mark (✓ passed, ✗ failed, ? neither: more than
  // colour), its statement in monospace and its failure reason. Text nodes only; odd entries are skipped.
  const TEST_MARKS = {passed: "✓", failed: "✗", unknown: "?"};

  function codeTestsBlock(tests) {
    const shown = tests.filter((t) => t && typeof t === "object");
    const passed = shown.filter((t) => t.passed === true).length;
    const box = element("div", "code-tests" + (passed === shown.length ? " code-tests-all-passed" : ""));
    const summary = element("p", "code-tests-summary");
    summary.append(element("b", "", `${passed}/${shown.length} test${shown.length === 1 ? "" : "s"} passed`));
    box.append(summary);
    if (!shown.length) return box;
    const list = element("ul", "code-tests-list");
    for (const t of shown) {
      const state = t.passed === true ? "passed" : t.passed === false ? "failed" : "unknown";
      const item = element("li", "code-test code-test-" + state);
      const mark = element("span", "code-test-mark", TEST_MARKS[state]);
      mark.setAttribute("role", "img");
      mark.setAttribute("aria-label", state);
      mark.title = state;
      item.append(mark, " ", element("code", "code-test-text", String(t.test ?? "")));
      if (t.checked === "inside") {
        const inside = element("span", "code-test-inside", "checked inside the sandbox");
        inside.title = "a statement that ran inside the sandbox: code in the same process could forge its result";
        item.append(" ", inside);
      }
      if (t.reason) item.append(" ", element("span", "code-test-reason", String(t.reason)));
      list.append(item);
    }
    box.append(list);
    return box;
  }

  // A sample's judge verdict (the API's `judge`, already cut to length by the server): what the judge
  // said, the score it gave, its mode and why a score is 0 or clipped. Text nodes only.
  function judgeBlock(judge) {
    const score = typeof judge.score === "number" ? judge.score : null;
    const box = element("div", "judge-verdict" + (score !== null && score >= 0.5 ? " judge-verdict-high" : ""));
    const summary = element("p", "judge-summary");
    summary.append(element("b", "", `judge: ${judge.verdict ? String(judge.verdict) : "(no output)"}`), " ");
    const shownScore = element("span", "judge-score", `score ${score === null ? "?" : score.toFixed(3)}`);
    shownScore.title = "the judge reward's score, 0 to 1";
    summary.append(shownScore);
    if (judge.mode) summary.append(" ", element("span", "judge-mode", `(${String(judge.mode)})`));
    if (judge.reason) summary.append(" ", element("span", "judge-reason", String(judge.reason)));
    box.append(summary);
    return box;
  }

  async function loadSamples() {
    const select = $("sample-step");
    const chosen = select.value;
    const data = await getJSON(chosen ? `/samples?step=${encodeURIComponent(chosen)}` : "/samples");
    const steps = data.steps || [];
    const known = [...select.options].slice(1).map((o) => o.value);
    if (steps.map(String).join(",") !== known.join(",")) {
      select.replaceChildren(select.options[0]);
      for (const s of steps) {
        const option = document.createElement("option");
        option.value = String(s);
        option.textContent = String(s);
        select.append(option);
      }
      select.value = chosen && steps.map(String).includes(chosen) ? chosen : "";
    }
    const body = $("samples-table").tBodies[0];
    body.replaceChildren();
    for (const s of data.samples || []) {
      const row = document.createElement("tr");
      const completion = s.episode ? episodeCell(s.episode) : segmentsCell(s.completion_segments, s.completion);
      if (Array.isArray(s.code_tests)) completion.append(codeTestsBlock(s.code_tests));
      if (s.judge && typeof s.judge === "object") completion.append(judgeBlock(s.judge));
      row.append(cell(s.index), segmentsCell(s.prompt_segments, s.prompt), completion, cell(s.answer),
                 cell(fmt(s.reward, 3)), cell(fmt(s.advantage, 3)));
      body.append(row);
    }
    $("samples-empty").hidden = (data.samples || []).length > 0;
    $("samples-table").dataset.step = data.step === null || data.step === undefined ? "" : String(data.step);
  }

  // One compact row per checkpoint: checkpoints.js (GrpoCheckpoints) draws them.
  async function loadCheckpoints() {
    const data = await getJSON("/checkpoints");
    await window.GrpoCheckpoints.render($("checkpoints-table"), data.checkpoints || []);
    $("checkpoints-empty").hidden = (data.checkpoints || []).length > 0;
  }

  async function pollEvents() {
    const data = await getJSON(`/events?after_id=${state.lastEventId}`);
    const log = $("run-log");
    const atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    for (const e of data.events || []) {
      const line = document.createElement("span");
      line.className = `lvl-${e.level} kind-${e.kind}`;
      line.textContent = `${fmtTime(e.created_at)} ${e.level.padEnd(7)} ${e.message}\n`;
      log.append(line);
    }
    while (log.childNodes.length > MAX_LOG_LINES) log.removeChild(log.firstChild);
    if (typeof data.last_id === "number") state.lastEventId = Math.max(state.lastEventId, data.last_id);
    if (atBottom) log.scrollTop = log.scrollHeight;
  }

  // --- the loops ------------------------------------------------------------------------------

  // Samples and checkpoints: at most every SIDE_MS, while the run is live or after its step or
  // status moved (a change seen within SIDE_MS of the last refresh waits for the next tick).
  async function refreshSide(force) {
    const now = Date.now();
    if (!force && (now - state.lastSideRefresh < SIDE_MS || (!state.sideDirty && terminal.has(state.status)))) return;
    state.lastSideRefresh = now;
    state.sideDirty = false;
    await Promise.all([loadSamples(), loadCheckpoints()]);
  }

  async function tick() {
    try {
      const before = state.status;
      const {restarted, stepMoved} = await pollRun();
      if (stepMoved || restarted || before !== state.status) state.sideDirty = true;
      // A restart may rewrite steps; a chart grown far past MAX_POINTS is downsampled afresh.
      const tooLong = panels.some((p) => p.points > RELOAD_AFTER_POINTS);
      if (restarted || tooLong || !state.chartsLoaded) await loadCharts();
      else await pollMetrics();
      await refreshSide(false);
      apiProblem(null);
    } catch (err) {
      apiProblem(err);
    }
    // After a run ends, a few more polls catch its last points; then the page rests.
    if (terminal.has(state.status)) state.finalPolls += 1;
    if (state.finalPolls < 3) setTimeout(tick, POLL_MS);
    else $("run-live").className = "muted small off";
    showLive();
  }

  async function eventsTick() {
    try { await pollEvents(); } catch (err) { /* shown by the main loop */ }
    if (state.finalPolls < 3) setTimeout(eventsTick, EVENTS_MS);
  }

  $("sample-step").addEventListener("change", () => { loadSamples().catch(apiProblem); });

  GrpoCharts.controls($("chart-controls"), charts);
  for (const panel of panels) if (chartDiv(panel)) initPanel(panel);
  (async function start() {
    try {
      await loadCharts();
      await refreshSide(true);
    } catch (err) {
      apiProblem(err);
    }
    tick();
    eventsTick();
  })();
  window.runDashboard = {state, panels, loadCharts};  // for tests and the console
})();
