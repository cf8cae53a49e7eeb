// The compare page: every metric of the chosen runs overlaid, one colour per run, from one
// request (GET /api/runs/compare, each series min/max downsampled on the server). Smoothing,
// log-y, the x-axis (step or wall time since each run's first step) and the shared x-zoom are
// charts.js's (GrpoCharts), the same as on the run page. The configs table is rendered by the
// server; the "only fields that differ" box hides the rows that are equal in every run.
//
// Charts come in GrpoCharts.orderMetrics order (reward/mean, accuracy, eval/accuracy first, then
// grouped by prefix), each with a legend of the run labels. A fork with a fresh optimizer is drawn
// from its fork step (its `step_offset`, from the server's compare-run-meta: see
// web/compare_views.py) on the step axis.
//
// The run picker (on every compare page): a list of the user's runs with checkboxes, filtered as
// one types (rows whose data-search holds every word typed), at most data-max-runs ticked.
//
// Each chart div carries data-metric, data-group and data-traces (how many runs have points in
// it), and the page's root data-state ("loading", "ready", "error"), which browser tests read.
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);

  // --- the run picker -------------------------------------------------------------------------
  const picker = $("compare-form");
  if (picker) {
    const filter = $("picker-filter");
    const rows = [...picker.querySelectorAll("tr[data-search]")];
    const maxRuns = Number(picker.dataset.maxRuns) || 20;
    const boxes = () => rows.map((r) => r.querySelector("input[type=checkbox]"));
    const update = () => {
      const words = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
      let shown = 0;
      for (const row of rows) {
        const box = row.querySelector("input[type=checkbox]");
        row.hidden = !box.checked && !words.every((w) => row.dataset.search.includes(w));
        if (!row.hidden) shown += 1;
      }
      const ticked = boxes().filter((b) => b.checked).length;
      $("picker-count").textContent = `${ticked} ticked (2 to ${maxRuns}), ${shown} of ${rows.length} shown`;
      $("picker-submit").disabled = ticked < 1 || ticked > maxRuns;
    };
    filter.addEventListener("input", update);
    picker.addEventListener("change", update);
    update();
  }

  const root = $("compare");
  if (!root) return;

  // 20 colours that stay apart (Tableau 10 and its lighter partners), one per run in URL order.
  const PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
                   "#9c755f", "#bab0ac", "#1f3b73", "#b35806", "#8c1d18", "#2a7f7a", "#2d6a27", "#a88b00",
                   "#6b3f68", "#c6576a", "#5e4433", "#6f6a67"];
  const colorOf = (i) => PALETTE[i % PALETTE.length];

  for (const swatch of document.querySelectorAll(".swatch[data-run-index]")) {
    swatch.style.background = colorOf(Number(swatch.dataset.runIndex));
  }

  const diffOnly = $("config-diff-only");
  const configTable = $("config-table");
  const showDiffOnly = () => configTable.classList.toggle("diff-only", diffOnly.checked);
  diffOnly.addEventListener("change", showDiffOnly);
  showDiffOnly();

  if (!window.Plotly || !window.GrpoCharts) return;
  const charts = GrpoCharts.group({smoothing: 0, logY: false, x: "step"});
  GrpoCharts.controls($("chart-controls"), charts, {step: "step", elapsed_s: "wall time"});

  const metaEl = $("compare-run-meta");
  const meta = new Map((metaEl ? JSON.parse(metaEl.textContent) : []).map((m) => [m.id, m]));
  const labelOf = (run) => (meta.get(run.id) || {}).label || `#${run.id} ${run.experiment}`;
  const offsetOf = (run) => (meta.get(run.id) || {}).step_offset || 0;

  function addChart(metric, runs) {
    const figure = document.createElement("figure");
    figure.className = "chart-box";
    figure.dataset.panel = metric;
    figure.dataset.group = GrpoCharts.metricGroup(metric);
    const caption = document.createElement("figcaption");
    caption.textContent = metric;
    const div = document.createElement("div");
    div.className = "chart";
    div.dataset.metric = metric;
    figure.append(caption, div);
    $("charts").append(figure);
    const traces = runs.map((run, i) => ({
      mode: "lines", name: labelOf(run), line: {width: 1.4, color: colorOf(i)},
    }));
    const chart = charts.chart(div, {
      traces, skipFirst: GrpoCharts.skipsFirstPoint(metric), markCompile: GrpoCharts.marksCompile(metric),
      empty: "no data: none of these runs reported it",
      layout: {showlegend: true},
    });
    let withPoints = 0;
    runs.forEach((run, i) => {
      const s = run.series[metric];
      if (!s) return;
      const offset = offsetOf(run);
      chart.setData(i, {step: offset ? s.steps.map((x) => x + offset) : s.steps, elapsed_s: s.elapsed_s}, s.values);
      if (s.steps.length) withPoints += 1;
    });
    chart.render();
    div.dataset.traces = String(withPoints);
  }

  async function load() {
    root.dataset.state = "loading";
    try {
      const response = await fetch(root.dataset.api, {credentials: "same-origin", headers: {Accept: "application/json"}});
      if (!response.ok) throw new Error(`the API answered ${response.status}`);
      const data = await response.json();
      for (const metric of GrpoCharts.orderMetrics(data.metrics)) addChart(metric, data.runs);
      $("compare-loading").textContent = data.metrics.length ? "" : "No metrics reported by these runs yet.";
      root.dataset.state = "ready";
    } catch (err) {
      const box = $("compare-api-error");
      box.textContent = "Metrics unavailable: " + err.message;
      box.hidden = false;
      $("compare-loading").textContent = "";
      root.dataset.state = "error";
    }
  }

  load();
  window.runCompare = {charts};  // for tests and the console
})();
