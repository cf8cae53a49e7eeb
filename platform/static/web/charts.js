// Metric charts that read right, one module for the run page (run.js) and the compare page
// (compare.js): EMA smoothing, a log-y toggle, tick labels that keep a value's magnitude
// (1e-3, 2.5e-5, never a row of zeros), a y-range that a timing chart's first step (compilation)
// does not flatten, x-zoom shared by every chart of a group, and non-finite points (a diverged
// step: the API's "NaN", "Infinity", "-Infinity") drawn as red markers at the chart's top or bottom
// edge, with a hover text such as "step 2: NaN", instead of a silent gap.
//
// A step far slower than the rest (a recompilation: 13 s at step 1, 6.8 s again at step 3) does not
// flatten a chart either: when a series' top 5 % of points would stretch its span to more than 4
// times the rest's, its top is its 95th percentile plus a fifth, and the axis spans every series'
// bottom and top (robustRange: judged per series, so one run is never cut to another's scale); the
// points above it are drawn as markers at the top edge with their value in the hover text, and a
// line under the chart says how many there are (edgeNote). On a timing chart, steps slower than 3
// times the median are marked as likely compilation (compileSteps), left out of its y-range, and
// marked. A y-span of float noise is one value. A chart with no points yet says "no data" instead of
// drawing made-up axes. A legend sits above the plot, compact, and the mode bar in the right margin.
//
// The pure functions (ema, formatValue, tickLabels, niceTicks, logTicks, quantile, robustRange,
// compileSteps, skipsFirstPoint, marksCompile, metricValue, nonFiniteMarks, edgeNote) need no DOM and
// are tested in a browser against hand-computed values (tests/platform/web/test_web_charts_js.py,
// test_web_charts_robust_js.py, test_web_charts_axes_js.py). GrpoCharts.group() and group.chart()
// draw with Plotly.
//
// A chart keeps its raw data (each trace: x arrays by axis name, e.g. {step: [...],
// elapsed_s: [...]}, and y) and redraws from it with Plotly.react whenever data or an option
// changes, so smoothing and log-y never lose points.
(function (root) {
  "use strict";

  // --- pure functions ---------------------------------------------------------------------------

  // A user's string (a run or experiment name, a metric, a sweep's param or choice) as text for
  // Plotly, which reads <a href>, <b>, <br>, <span style> and entities in every legend name,
  // hover text, title and annotation: &, <, >, " and ' become entities Plotly shows as the
  // characters themselves. The one escaping helper of every page's charts: charts.js applies it
  // to what its callers hand it (trace names, the "no data" note), so they pass raw strings;
  // pages that call Plotly themselves (sweep.js) apply it to every string they pass.
  const PLOT_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&#34;", "'": "&#39;"};
  function plotText(value) {
    return String(value === null || value === undefined ? "" : value).replace(/[&<>"']/g, (c) => PLOT_ENTITIES[c]);
  }

  // A metric value from the API as a number: the strings "NaN", "Infinity", "-Infinity" (JSON has
  // no such numbers) become NaN and the infinities; a number stays; anything else is null.
  function metricValue(value) {
    if (typeof value === "number") return value;
    if (value === "NaN" || value === "Infinity" || value === "-Infinity") return Number(value);
    return null;
  }

  // The non-finite points of a trace (x and y arrays of one length) as markers on the y-range
  // [lo, hi] (data units): NaN and +inf at hi, -inf at lo, each with its hover text
  // "<xTitle> <x>: NaN" (or inf, -inf). -> {x: [...], y: [...], text: [...]}.
  function nonFiniteMarks(xs, ys, yRange, xTitle) {
    const out = {x: [], y: [], text: []};
    for (let i = 0; i < ys.length; i++) {
      const v = ys[i];
      if (typeof v !== "number" || Number.isFinite(v)) continue;
      out.x.push(xs[i]);
      out.y.push(v === -Infinity ? yRange[0] : yRange[1]);
      out.text.push(`${xTitle || "step"} ${xs[i]}: ${Number.isNaN(v) ? "NaN" : formatValue(v)}`);
    }
    return out;
  }

  // Exponential moving average with TensorBoard's debiasing: s_n = w*s_(n-1) + (1-w)*v_n from
  // s_0 = 0, shown as s_n / (1 - w^n), so the first point is the first value (not pulled to 0).
  // Non-finite values (null, NaN) stay as they are and do not move the average. weight 0 = raw.
  function ema(values, weight) {
    const w = Math.min(Math.max(Number(weight) || 0, 0), 0.999);
    if (w === 0) return values.slice();
    const out = new Array(values.length);
    let last = 0, n = 0;
    for (let i = 0; i < values.length; i++) {
      const v = values[i];
      if (v === null || v === undefined || !Number.isFinite(v)) { out[i] = v; continue; }
      last = last * w + (1 - w) * v;
      n += 1;
      out[i] = last / (1 - Math.pow(w, n));
    }
    return out;
  }

  function trimExponential(text) {
    // "2.50e-5" -> "2.5e-5", "1.00e+3" -> "1e3"
    const [mantissa, exponent] = text.split("e");
    const m = mantissa.includes(".") ? mantissa.replace(/0+$/, "").replace(/\.$/, "") : mantissa;
    return `${m}e${Number(exponent)}`;
  }

  const SMALL = 1e-2;   // below this (in absolute value) a number is written with its exponent
  const LARGE = 1e5;    // and from this up

  // One value with `digits` significant digits, keeping its magnitude: 0.001 -> "1e-3",
  // 2.5e-5 -> "2.5e-5", 0.5 -> "0.5", 12.345 -> "12.3", 123456 -> "1.23e5"; null/NaN -> "-".
  function formatValue(value, digits) {
    const d = digits || 3;
    if (value === null || value === undefined || Number.isNaN(value)) return "-";
    if (!Number.isFinite(value)) return value > 0 ? "inf" : "-inf";
    if (value === 0) return "0";
    const a = Math.abs(value);
    if (a < SMALL || a >= LARGE) return trimExponential(value.toExponential(d - 1));
    return String(Number(value.toPrecision(d)));
  }

  // Labels for an axis's ticks, one style for all of them: exponents when the largest tick is
  // tiny or huge (0, 2e-4, 4e-4, ...), else plain decimals as many as the step needs.
  function tickLabels(ticks) {
    const finite = ticks.filter((t) => Number.isFinite(t));
    const top = Math.max(0, ...finite.map(Math.abs));
    if (top === 0) return ticks.map(() => "0");
    if (top < SMALL || top >= LARGE) {
      return ticks.map((t) => (t === 0 ? "0" : trimExponential(t.toExponential(Math.min(precisionOf(ticks, top), 6)))));
    }
    const steps = [];
    for (let i = 1; i < finite.length; i++) steps.push(Math.abs(finite[i] - finite[i - 1]));
    const step = steps.length ? Math.min(...steps.filter((s) => s > 0), top) : top;
    const decimals = Math.max(0, Math.min(10, -Math.floor(Math.log10(step) + 1e-9)));
    return ticks.map((t) => String(Number(t.toFixed(decimals))));
  }

  // Mantissa digits after the point that tell evenly spaced exponent ticks apart.
  function precisionOf(ticks, top) {
    const finite = ticks.filter((t) => Number.isFinite(t) && t !== 0);
    let step = top;
    for (let i = 1; i < finite.length; i++) {
      const s = Math.abs(finite[i] - finite[i - 1]);
      if (s > 0) step = Math.min(step, s);
    }
    return Math.max(0, Math.floor(Math.log10(top)) - Math.floor(Math.log10(step) + 1e-9));
  }

  // About `target` round tick values (1, 2 or 5 times a power of ten apart) covering [lo, hi].
  function niceTicks(lo, hi, target) {
    const count = target || 5;
    if (!Number.isFinite(lo) || !Number.isFinite(hi)) return [];
    if (hi < lo) [lo, hi] = [hi, lo];
    if (hi === lo) return [lo];
    const raw = (hi - lo) / count;
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) || 10 * power;
    const ticks = [];
    const first = Math.ceil(lo / step - 1e-9);
    for (let k = first; k * step <= hi + step * 1e-9; k++) ticks.push(Number((k * step).toPrecision(12)));
    return ticks;
  }

  // Tick values for a log axis showing [lo, hi] (data units, positive): the powers of ten inside,
  // with 2x and 5x added when fewer than three fit, linear ticks when not even one does.
  function logTicks(lo, hi) {
    if (!(lo > 0) || !(hi > 0)) return [];
    if (hi < lo) [lo, hi] = [hi, lo];
    const inside = (t) => t >= lo * (1 - 1e-9) && t <= hi * (1 + 1e-9);
    const ticks = [];
    for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
      for (const m of [1, 2, 5]) ticks.push(Number((m * Math.pow(10, e)).toPrecision(12)));
    }
    const decades = ticks.filter((t, i) => i % 3 === 0 && inside(t));
    if (decades.length >= 3) return decades;
    const some = ticks.filter(inside);
    return some.length >= 2 ? some : niceTicks(lo, hi, 4);
  }

  // Whether a metric's first point is left out of its chart's y-range: timings and throughput,
  // whose first step includes compilation.
  function skipsFirstPoint(metric) {
    return /^(timing|throughput)\//.test(metric || "");
  }

  // The metrics people read first, in this order, then the rest grouped by prefix (GROUP_ORDER,
  // then other prefixes alphabetically), alphabetical inside a group.
  const KEY_METRICS = ["reward/mean", "accuracy", "eval/accuracy"];
  const GROUP_ORDER = ["reward", "eval", "", "loss", "response_length", "rollout", "env", "train", "dynamic", "selection", "async",
                       "is", "timing", "throughput", "system"];

  // A metric's group: the part before its first "/" ("" for none): "reward/std" -> "reward".
  function metricGroup(metric) {
    const cut = metric.indexOf("/");
    return cut < 0 ? "" : metric.slice(0, cut);
  }

  // Metric names in the order charts show them (see KEY_METRICS and GROUP_ORDER).
  function orderMetrics(names) {
    const rank = (name) => {
      const key = KEY_METRICS.indexOf(name);
      if (key >= 0) return [0, key, "", name];
      const group = metricGroup(name);
      const known = GROUP_ORDER.indexOf(group);
      return [1, known >= 0 ? known : GROUP_ORDER.length, known >= 0 ? "" : group, name];
    };
    const compare = (a, b) => {
      for (let i = 0; i < a.length; i++) {
        if (a[i] < b[i]) return -1;
        if (a[i] > b[i]) return 1;
      }
      return 0;
    };
    return names.slice().sort((a, b) => compare(rank(a), rank(b)));
  }

  // Whether a metric's chart marks its slow steps as compilation: timings.
  function marksCompile(metric) {
    return /^timing\//.test(metric || "");
  }

  // The q-quantile (0..1) of numbers, linearly interpolated between the sorted values (the
  // definition numpy.quantile uses by default); null for none.
  function quantile(values, q) {
    if (!values.length) return null;
    const sorted = values.slice().sort((a, b) => a - b);
    const at = (sorted.length - 1) * Math.min(Math.max(q, 0), 1);
    const below = Math.floor(at), above = Math.ceil(at);
    return sorted[below] + (sorted[above] - sorted[below]) * (at - below);
  }

  const OUTLIER_QUANTILE = 0.95;   // the axis may stop here when the points above it dominate
  const OUTLIER_MIN_ABOVE = 1.5;   // on few points, a lower quantile: 1.5 points' worth lie above it
  const OUTLIER_STRETCH = 4;       // ... that is, when they stretch the axis more than this many times
  const OUTLIER_HEADROOM = 0.2;    // the axis then ends this fraction above the quantile
  const MIN_POINTS_TO_CLIP = 5;
  const FLOAT_NOISE = 1e-6;        // a y-span this small next to the values is one value (robustRange)
  const COMPILE_FACTOR = 3;        // a timing this many times the median: likely compilation
  const COMPILE_MAX_SHARE = 0.05;  // more slow steps than this share (and than COMPILE_MAX_FEW) ...
  const COMPILE_MAX_FEW = 3;       // ... are the run's rhythm (an eval every other step), not compilation

  // The indices of the steps whose value is above COMPILE_FACTOR x the median of the finite
  // positive values (none with fewer than 3 values): on a timing chart, steps that compiled.
  // Compilation is rare: when more than max(3, 5 %) of the steps are that slow, none is marked
  // (a chart of markers hid its line), and the y-range's outlier rule alone applies.
  function compileSteps(values) {
    const finite = values.filter((v) => typeof v === "number" && Number.isFinite(v) && v > 0);
    if (finite.length < 3) return [];
    const median = quantile(finite, 0.5);
    const out = [];
    values.forEach((v, i) => { if (typeof v === "number" && Number.isFinite(v) && v > COMPILE_FACTOR * median) out.push(i); });
    return out.length > Math.max(COMPILE_MAX_FEW, Math.ceil(COMPILE_MAX_SHARE * finite.length)) ? [] : out;
  }

  // The axis for one value (every point of a chart at the same x, or the same y): a range of
  // +-10 % around it (+-1 around 0, or for a whole step) with the value as its one tick, instead
  // of the 0.5-steps or 8-digit ticks Plotly invents for a range of width 0.
  function singleValueAxis(value, whole) {
    const pad = whole ? 1 : (Math.abs(value) * 0.1 || 1);
    return {range: [value - pad, value + pad], tickmode: "array", tickvals: [value],
            ticktext: [whole ? String(value) : formatValue(value, 4)]};
  }

  // The y-range [lo, hi] that shows every trace's points whose x lies in xRange (null: all), each
  // trace {x: [...], y: [...], skipFirst}: skipFirst leaves out the trace's first point. With log,
  // only positive values count and the range is in log10 units (Plotly's log axes). Outliers
  // (linear axes), judged within each trace of at least 5 points, so that no trace is cut to another's
  // scale (a run of 3 points at 7 beside a run of 40 at 0.1 shows both whole): q = the trace's
  // p-quantile, p = min(0.95, 1 - 1.5 / n) for its n points; when its max - min > 4 x (q - min), its
  // top is q + 0.2 x max(q - min, |q|) instead of its max. The range spans every trace's min and
  // top, and the result's `clipped` is true when a point lies above it (the caller marks those). A
  // span under a millionth of the values' size (float noise: 0.19 beside 0.18999999761, a float32
  // read back) counts as one value. 5 % padding; null when nothing is left to show.
  function robustRange(traces, options) {
    const opts = options || {};
    let lo = Infinity, hi = -Infinity, top = -Infinity;
    for (const t of traces) {
      const values = [];
      let tLo = Infinity, tHi = -Infinity;
      const start = t.skipFirst && t.y.length > 1 ? 1 : 0;
      for (let i = start; i < t.y.length; i++) {
        const v = t.y[i];
        if (v === null || v === undefined || !Number.isFinite(v) || (opts.log && v <= 0)) continue;
        if (opts.xRange) {
          const x = t.x[i];
          if (x < opts.xRange[0] || x > opts.xRange[1]) continue;
        }
        if (v < tLo) tLo = v;
        if (v > tHi) tHi = v;
        values.push(v);
      }
      if (!values.length) continue;
      let tTop = tHi;
      if (!opts.log && opts.clip !== false && values.length >= MIN_POINTS_TO_CLIP) {
        const q = quantile(values, Math.min(OUTLIER_QUANTILE, 1 - OUTLIER_MIN_ABOVE / values.length));
        if (tHi - tLo > OUTLIER_STRETCH * (q - tLo)) tTop = Math.min(tHi, q + OUTLIER_HEADROOM * Math.max(q - tLo, Math.abs(q)));
      }
      lo = Math.min(lo, tLo);
      hi = Math.max(hi, tHi);
      top = Math.max(top, tTop);
    }
    if (lo === Infinity) return null;
    const clipped = top < hi;
    hi = top;
    if (hi - lo <= FLOAT_NOISE * Math.max(Math.abs(lo), Math.abs(hi))) lo = hi = (lo + hi) / 2;
    if (opts.log) { lo = Math.log10(lo); hi = Math.log10(hi); }
    const pad = hi > lo ? (hi - lo) * 0.05 : (opts.log ? 0.5 : Math.abs(hi) * 0.05 || 1);
    const range = [lo - pad, hi + pad];
    range.clipped = clipped;
    return range;
  }

  // Markers for a trace's finite points above the y-axis top (`top`, data units) and, with
  // `compile` (indices from compileSteps), its compilation steps: {x, y, text, symbol}. A point
  // above the axis sits on its top edge; its hover text gives the value.
  function outlierMarks(xs, ys, top, compile, xTitle) {
    const out = {x: [], y: [], text: [], symbol: []};
    const slow = new Set(compile || []);
    for (let i = 0; i < ys.length; i++) {
      const v = ys[i];
      if (typeof v !== "number" || !Number.isFinite(v)) continue;
      const above = top !== null && v > top;
      if (!above && !slow.has(i)) continue;
      out.x.push(xs[i]);
      out.y.push(above ? top : v);
      const why = slow.has(i) ? " (slow: likely compilation)" : " (above the axis)";
      out.text.push(`${xTitle || "step"} ${xs[i]}: ${formatValue(v)}${why}`);
      out.symbol.push(above ? "triangle-up" : "diamond-open");
    }
    return out;
  }

  // --- charts ---------------------------------------------------------------------------------

  const PLOT_CONFIG = {displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"]};
  // Plotly's toolbar (the mode bar) stands upright in a right margin kept for it, so it covers
  // neither a legend nor the data. A legend (a chart with several series) sits above the plot,
  // compact: small type, entries flowing in rows by their own widths (one legend group per series;
  // Plotly lays ungrouped entries that wrap out in columns as wide as the widest).
  const MARGIN = {l: 56, r: 34, t: 8, b: 36};
  const MODEBAR = {orientation: "v"};
  const LEGEND = {orientation: "h", x: 0, xanchor: "left", y: 1.02, yanchor: "bottom", font: {size: 9},
                  traceorder: "grouped", tracegroupgap: 0};
  const X_TITLES = {step: "step", elapsed_s: "wall time"};
  const TIME_UNITS = [[3600 * 2, 3600, "h"], [60 * 10, 60, "min"], [0, 1, "s"]];  // [from span_s, divisor, unit]

  // A group of charts sharing options ({smoothing: 0..0.99, logY, x: "step" | "elapsed_s"}) and
  // their x-zoom. onChange(options) is called after an option changes.
  function group(options, onChange) {
    const g = {options: {smoothing: 0, logY: false, x: "step", ...(options || {})}, charts: [], syncing: false};

    g.chart = function (div, spec) {
      const old = g.charts.findIndex((c) => c.div === div);
      if (old >= 0) g.charts.splice(old, 1);
      const chart = makeChart(g, div, spec);
      g.charts.push(chart);
      return chart;
    };

    g.set = function (name, value) {
      g.options[name] = value;
      if (name === "x") for (const c of g.charts) { c.xRange = null; c.yRange = null; }
      for (const c of g.charts) c.render();
      if (onChange) onChange(g.options);
    };

    // Another chart's x-zoom: the same x window here, y fitted to it.
    g.zoomX = function (source, xRange) {
      if (g.syncing) return;
      g.syncing = true;
      try {
        for (const c of g.charts) {
          if (c === source) continue;
          c.xRange = xRange;
          c.yRange = null;
          c.render();
        }
      } finally {
        g.syncing = false;
      }
    };
    return g;
  }

  // What a chart's edge marks stand for, in words under it (a triangle alone says nothing):
  // "2 points above the axis (▲ on its top edge; hover for the values)", "1 non-finite point (NaN or
  // inf: red, at the edge)"; "" for none.
  function edgeNote(clipped, nonFinite) {
    const points = (n, what) => `${n} ${what}${n === 1 ? "point" : "points"}`;
    const parts = [];
    if (clipped) parts.push(`${points(clipped, "")} above the axis (\u25B2 on its top edge; hover for the values)`);
    if (nonFinite) parts.push(`${points(nonFinite, "non-finite ")} (NaN or inf: red, at the edge)`);
    return parts.join("; ");
  }

  // The note under a chart's div (a p.chart-note right after it, made when first needed).
  function showNote(div, text) {
    let note = div.nextElementSibling;
    if (!note || !note.classList.contains("chart-note")) {
      if (!text) return;
      note = document.createElement("p");
      note.className = "chart-note";
      div.after(note);
    }
    note.textContent = text;
    note.hidden = !text;
  }

  // spec: {traces: [{name, ...Plotly trace properties}], layout: {...}, skipFirst: bool,
  //        markCompile: bool (mark slow steps as compilation), empty: the "no data" note's text}
  function makeChart(g, div, spec) {
    const chart = {
      div, spec, xRange: null, yRange: null,
      data: spec.traces.map(() => ({x: {}, y: []})),
    };

    // x: {axisName: [...]} (the same length as y); replaces trace i's data.
    chart.setData = function (i, x, y) {
      chart.data[i] = {x: {...x}, y: y.map(metricValue)};
    };

    chart.extend = function (i, x, y) {
      const d = chart.data[i];
      for (const [axis, values] of Object.entries(x)) d.x[axis] = (d.x[axis] || []).concat(values);
      d.y = d.y.concat(y.map(metricValue));
    };

    chart.points = function (i) { return chart.data[i].y.length; };

    function xScale() {
      if (g.options.x !== "elapsed_s") return {divisor: 1, title: X_TITLES[g.options.x] || g.options.x};
      let span = 0;
      for (const d of chart.data) for (const v of d.x.elapsed_s || []) if (v > span) span = v;
      for (const c of g.charts) for (const d of c.data) for (const v of d.x.elapsed_s || []) if (v > span) span = v;
      const [, divisor, unit] = TIME_UNITS.find(([from]) => span >= from);
      return {divisor, title: `wall time since the run's first step (${unit})`};
    }

    // No point in any trace: a note instead of axes (Plotly would invent a -1..6 x -1..4 grid).
    function renderEmpty() {
      const layout = {
        margin: {l: 8, r: 8, t: 8, b: 8}, showlegend: false, paper_bgcolor: "rgba(0,0,0,0)",
        plot_bgcolor: "rgba(0,0,0,0)", font: {size: 11}, xaxis: {visible: false}, yaxis: {visible: false},
        annotations: [{text: plotText(spec.empty || "no data yet"), showarrow: false, xref: "paper", yref: "paper",
                       x: 0.5, y: 0.5, font: {size: 13, color: "#888"}}],
      };
      chart.rendering = true;
      try {
        Plotly.react(div, [], layout, PLOT_CONFIG);
      } finally {
        chart.rendering = false;
      }
      Object.assign(div.dataset, {empty: "1", yTicks: "", nonFinite: "0", clipped: "0", compileSteps: ""});
      showNote(div, "");
    }

    chart.render = function () {
      if (chart.data.every((d) => d.y.length === 0)) { renderEmpty(); return; }
      const {divisor, title} = xScale();
      const shown = chart.data.map((d) => ({
        x: (d.x[g.options.x] || []).map((v) => v / divisor),
        y: ema(d.y, g.options.smoothing),
      }));
      // A timing chart's compile steps (raw values) are marked, and left out of its y-range.
      const compiles = chart.data.map((d, i) => (spec.markCompile && spec.traces[i].hoverinfo !== "skip" ? compileSteps(d.y) : []));
      const robust = shown.map((s, i) => {
        const slow = new Set(compiles[i]);
        return {...s, y: slow.size ? s.y.map((v, k) => (slow.has(k) ? null : v)) : s.y,
                skipFirst: spec.skipFirst && !spec.traces[i].noSkip};
      });
      const anyPositive = shown.some((s) => s.y.some((v) => v > 0));
      const log = g.options.logY && anyPositive;
      // Non-finite points (raw values, not smoothed) of the traces people read (not a band's edges).
      const marked = chart.data.map((d, i) => (spec.traces[i].hoverinfo === "skip" ? [] : d.y)
        .some((v) => typeof v === "number" && !Number.isFinite(v)));
      let yRange = chart.yRange || robustRange(robust, {log, xRange: chart.xRange});
      // Points above the axis (clipped outliers, a left-out first step or compile step) get a marker
      // on its top edge; not under a range the user zoomed to, nor when smoothing (the axis fits the
      // smoothed line, which raw points leave all the time).
      const markTop = yRange && !chart.yRange && !g.options.smoothing ? (log ? Math.pow(10, yRange[1]) : yRange[1]) : null;
      if (!yRange && marked.some(Boolean)) yRange = log ? [-1, 1] : [0, 1];  // only non-finite points
      const yaxis = {zeroline: false, type: log ? "log" : "linear", hoverformat: ".4~g"};
      if (yRange) {
        yaxis.range = yRange;
        const [lo, hi] = log ? [Math.pow(10, yRange[0]), Math.pow(10, yRange[1])] : yRange;
        const ticks = log ? logTicks(lo, hi) : niceTicks(lo, hi, 5);
        Object.assign(yaxis, {tickmode: "array", tickvals: ticks, ticktext: tickLabels(ticks)});
      } else {
        yaxis.autorange = true;
      }
      const xaxis = {title: {text: title, standoff: 4}, zeroline: false};
      if (chart.xRange) xaxis.range = chart.xRange.slice(); else xaxis.autorange = true;
      // One x for every point (a run's first step): the axis around it, the step as its one tick.
      const xs = new Set();
      shown.forEach((s) => s.x.forEach((x, k) => { if (Number.isFinite(s.y[k])) xs.add(x); }));
      if (xs.size === 1 && !chart.xRange) {
        const [x] = xs;
        Object.assign(xaxis, singleValueAxis(x, g.options.x === "step"));
        delete xaxis.autorange;
      }
      // ... and its value (linear axis): the same, the value as the one tick.
      if (xs.size === 1 && yRange && !log && !chart.yRange && !marked.some(Boolean)) {
        const ys = new Set();
        robust.forEach((s) => s.y.forEach((v) => { if (typeof v === "number" && Number.isFinite(v)) ys.add(v); }));
        if (ys.size === 1) {
          const [y] = ys;
          Object.assign(yaxis, singleValueAxis(y, false));
          yRange = yaxis.range;
        }
      }
      // A trace of one point draws no line: it gets a marker, or it would not show at all.
      const traces = spec.traces.map((t, i) => {
        const lonely = t.hoverinfo !== "skip" && shown[i].y.filter((v) => Number.isFinite(v)).length === 1;
        return {legendgroup: `series-${i}`, ...t, name: plotText(t.name), x: shown[i].x, y: shown[i].y,
                ...(lonely ? {mode: "lines+markers", marker: {size: 8, color: (t.line || {}).color, ...(t.marker || {})}} : {})};
      });
      let nonFinite = 0;
      if (yRange) {
        const edges = log ? [Math.pow(10, yRange[0]), Math.pow(10, yRange[1])] : yRange;
        chart.data.forEach((d, i) => {
          if (!marked[i]) return;
          const marks = nonFiniteMarks(shown[i].x, d.y, edges, X_TITLES[g.options.x] || g.options.x);
          nonFinite += marks.x.length;
          traces.push({
            x: marks.x, y: marks.y, text: marks.text.map(plotText), mode: "markers", showlegend: false, cliponaxis: false,
            legendgroup: traces[i].legendgroup,
            name: plotText(`${spec.traces[i].name || ""} non-finite`), hovertemplate: "%{text}<extra></extra>",
            marker: {color: "#d62728", size: 9, symbol: marks.y.map((y) => (y === edges[0] ? "triangle-down" : "triangle-up"))},
          });
        });
      }
      // Points above a clipped axis, and a timing chart's compilation steps (raw values).
      let clipped = 0;
      const compiled = [];
      chart.data.forEach((d, i) => {
        if (spec.traces[i].hoverinfo === "skip") return;
        const compile = compiles[i];
        const marks = outlierMarks(shown[i].x, d.y, markTop, compile, X_TITLES[g.options.x] || g.options.x);
        if (!marks.x.length) return;
        clipped += marks.symbol.filter((sym) => sym === "triangle-up").length;
        for (const k of compile) compiled.push((d.x.step || [])[k]);
        traces.push({
          x: marks.x, y: marks.y, text: marks.text.map(plotText), mode: "markers", showlegend: false, cliponaxis: false,
          legendgroup: traces[i].legendgroup,
          name: plotText(`${spec.traces[i].name || ""} slow or off the axis`), hovertemplate: "%{text}<extra></extra>",
          marker: {color: "#8c564b", size: 7, opacity: 0.8, symbol: marks.symbol},
        });
      });
      const layout = {
        margin: MARGIN, modebar: MODEBAR, showlegend: false, hovermode: "x unified",
        paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)", font: {size: 11},
        ...(spec.layout || {}), xaxis, yaxis,
      };
      if (layout.showlegend) layout.legend = {...LEGEND, ...(layout.legend || {})};
      chart.rendering = true;
      try {
        Plotly.react(div, traces, layout, PLOT_CONFIG);
      } finally {
        chart.rendering = false;
      }
      div.dataset.log = log ? "1" : "0";
      div.dataset.smoothing = String(g.options.smoothing);
      div.dataset.x = g.options.x;
      div.dataset.yTicks = yaxis.ticktext ? yaxis.ticktext.join(" ") : "";
      div.dataset.nonFinite = String(nonFinite);
      div.dataset.clipped = String(clipped);
      div.dataset.compileSteps = compiled.join(" ");
      div.dataset.empty = "0";
      showNote(div, edgeNote(clipped, nonFinite));
    };

    chart.render();
    div.on("plotly_relayout", (event) => {
      if (chart.rendering || !event) return;
      const x0 = event["xaxis.range[0]"], x1 = event["xaxis.range[1]"];
      const y0 = event["yaxis.range[0]"], y1 = event["yaxis.range[1]"];
      if (event["xaxis.autorange"] || event["yaxis.autorange"]) {
        chart.xRange = null;
        chart.yRange = null;
        chart.render();
        g.zoomX(chart, null);
        return;
      }
      if (x0 !== undefined && x1 !== undefined) {
        chart.xRange = [x0, x1];
        chart.yRange = y0 !== undefined && y1 !== undefined ? [y0, y1] : null;
        chart.render();
        g.zoomX(chart, chart.xRange);
      } else if (y0 !== undefined && y1 !== undefined) {
        chart.yRange = [y0, y1];
        chart.render();
      }
    });
    return chart;
  }

  // The controls every chart page has: smoothing (a slider, 0 to 0.99) and log-y; with
  // xChoices ({step: "step", elapsed_s: "wall time"}) also the x-axis. Built into `container`.
  function controls(container, g, xChoices) {
    const smoothing = document.createElement("label");
    smoothing.className = "small";
    smoothing.append("smoothing ");
    const slider = document.createElement("input");
    Object.assign(slider, {type: "range", min: "0", max: "0.99", step: "0.01", id: "chart-smoothing"});
    slider.value = String(g.options.smoothing);
    const shown = document.createElement("output");
    shown.id = "chart-smoothing-value";
    shown.textContent = String(g.options.smoothing);
    slider.addEventListener("input", () => {
      shown.textContent = slider.value;
      g.set("smoothing", Number(slider.value));
    });
    smoothing.append(slider, " ", shown);

    const logY = document.createElement("label");
    logY.className = "small";
    const box = document.createElement("input");
    Object.assign(box, {type: "checkbox", id: "chart-log-y", checked: g.options.logY});
    box.addEventListener("change", () => g.set("logY", box.checked));
    logY.append(box, " log y");
    container.append(smoothing, logY);

    if (xChoices) {
      const xLabel = document.createElement("label");
      xLabel.className = "small";
      xLabel.append("x axis ");
      const select = document.createElement("select");
      select.id = "chart-x";
      for (const [value, text] of Object.entries(xChoices)) {
        const option = document.createElement("option");
        option.value = value;
        option.textContent = text;
        select.append(option);
      }
      select.value = g.options.x;
      select.addEventListener("change", () => g.set("x", select.value));
      xLabel.append(select);
      container.append(xLabel);
    }
  }

  const api = {plotText, edgeNote, singleValueAxis, ema, formatValue, tickLabels, niceTicks, logTicks, quantile, robustRange, compileSteps, outlierMarks,
               skipsFirstPoint, marksCompile, metricGroup, orderMetrics, metricValue, nonFiniteMarks, group, controls};
  root.GrpoCharts = api;
})(typeof window !== "undefined" ? window : this);
