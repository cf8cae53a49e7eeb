// The sweep page (templates/web/sweep_detail.html): a parallel-coordinates plot of the trials'
// params and metric value, and a scatter of the value against one chosen param, drawn with Plotly
// from the page's JSON (#sweep-data, json_script). While the sweep runs, GET /api/sweeps/<id>
// every POLL_MS redraws them, updates the trials' status and value cells, and reloads the page
// when trials were added (unless trials are ticked for the compare page).
(function () {
  "use strict";
  const POLL_MS = 3000;
  const PLOT_CONFIG = {displaylogo: false, responsive: true};
  const root = document.getElementById("sweep-plots");
  const dataNode = document.getElementById("sweep-data");
  if (!root || !dataNode || !window.Plotly || !window.GrpoCharts) return;
  // Every string handed to Plotly goes through this (charts.js's one escaping helper): param
  // names, choices, the metric, run labels are the user's and Plotly reads HTML in them.
  const text = GrpoCharts.plotText;
  let data = JSON.parse(dataNode.textContent);
  const select = document.getElementById("sweep-scatter-param");

  function paramNames(sweep) { return Object.keys(sweep.space).sort(); }

  // A param as numbers for a plot axis: numbers as they are; other values (categorical choices)
  // as their index in the space's choices, with the choices as tick labels.
  function axis(sweep, name, trials) {
    const spec = sweep.space[name];
    const values = trials.map((t) => t.params[name]);
    if (spec.type !== "categorical" || values.every((v) => typeof v === "number")) {
      return {values: values, ticks: null};
    }
    const choices = spec.choices;
    return {values: values.map((v) => choices.findIndex((c) => c === v)),
            ticks: {tickvals: choices.map((_c, i) => i), ticktext: choices.map(text)}};
  }

  // Whether a param's axis is logarithmic: a log-sampled range, or positive values that span two
  // decades or more (a learning rate from 1e-7 to 8e-3 on a linear axis piles the small ones at 0).
  function logAxis(spec, values) {
    if (spec.type === "categorical" && !values.every((v) => typeof v === "number")) return false;
    if (spec.log) return true;
    const numbers = values.filter((v) => typeof v === "number" && Number.isFinite(v));
    if (!numbers.length || numbers.some((v) => v <= 0)) return false;
    return Math.max(...numbers) / Math.min(...numbers) >= 100;
  }

  function scored(sweep) { return sweep.trials.filter((t) => t.value !== null && t.value !== undefined); }

  // The parallel-coordinates plot, drawn as SVG lines (Plotly's own parcoords trace needs WebGL
  // through code that the site's Content-Security-Policy refuses): one vertical axis per param and
  // one for the metric, each scaled to [0, 1] between its lowest and highest value (log10 for a
  // log range, the index of a choice); one line per trial, coloured from worst (blue) to best (gold).
  function scaled(values) {
    const finite = values.filter((v) => Number.isFinite(v));
    const low = Math.min(...finite), high = Math.max(...finite);
    return {low: low, high: high, values: values.map((v) => (high > low ? (v - low) / (high - low) : 0.5))};
  }

  function lineColour(fraction) {
    const from = [49, 54, 149], to = [230, 170, 20];
    const rgb = from.map((c, i) => Math.round(c + (to[i] - c) * fraction));
    return "rgb(" + rgb.join(",") + ")";
  }

  function shortNumber(v) { return typeof v === "number" ? Number(v.toPrecision(3)).toString() : String(v); }

  function drawParcoords(sweep) {
    const trials = scored(sweep);
    const names = paramNames(sweep);
    const axes = names.map((name) => {
      const spec = sweep.space[name];
      const a = axis(sweep, name, trials);
      const log = !a.ticks && logAxis(spec, a.values);
      const s = scaled(log ? a.values.map((v) => Math.log10(v)) : a.values);
      const ends = a.ticks ? [String(spec.choices[0]), String(spec.choices[spec.choices.length - 1])]
        : [shortNumber(log ? 10 ** s.low : s.low), shortNumber(log ? 10 ** s.high : s.high)];
      if (a.ticks) s.values = a.values.map((i) => (a.ticks.tickvals.length > 1 ? i / (a.ticks.tickvals.length - 1) : 0.5));
      return {label: name, values: s.values, ends: ends};
    });
    const metric = scaled(trials.map((t) => t.value));
    axes.push({label: sweep.metric, values: metric.values, ends: [shortNumber(metric.low), shortNumber(metric.high)]});
    const x = axes.map((_a, i) => i);
    const goodness = sweep.direction === "minimize" ? metric.values.map((v) => 1 - v) : metric.values;
    const traces = trials.map((t, row) => ({
      type: "scatter", mode: "lines+markers", x: x, y: axes.map((a) => a.values[row]), showlegend: false,
      line: {color: lineColour(goodness[row]), width: 2}, marker: {size: 5, color: lineColour(goodness[row])},
      name: text("trial " + t.number), hoverinfo: "text",
      text: axes.map((a, i) => text("trial " + t.number + ": " + a.label + " = " +
                                    shortNumber(i < names.length ? t.params[names[i]] : t.value))),
    }));
    const annotations = [];
    axes.forEach((a, i) => {
      annotations.push({x: i, y: 1.04, text: text(a.ends[1]), showarrow: false, yanchor: "bottom", font: {size: 10}});
      annotations.push({x: i, y: -0.04, text: text(a.ends[0]), showarrow: false, yanchor: "top", font: {size: 10}});
    });
    const shapes = x.map((i) => ({type: "line", x0: i, x1: i, y0: 0, y1: 1, line: {color: "#888", width: 1}}));
    Plotly.react("sweep-parcoords", traces, {
      margin: {l: 40, r: 40, t: 50, b: 60}, title: {text: text("trials: params and " + sweep.metric)},
      xaxis: {tickvals: x, ticktext: axes.map((a) => text(a.label)), range: [-0.3, axes.length - 0.7], zeroline: false,
              showgrid: false},
      yaxis: {visible: false, range: [-0.12, 1.12]}, shapes: shapes, annotations: annotations,
    }, PLOT_CONFIG);
    root.dataset.parcoordsLines = String(traces.length);
  }

  function drawScatter(sweep) {
    const trials = scored(sweep);
    const name = select && select.value ? select.value : paramNames(sweep)[0];
    const a = axis(sweep, name, trials);
    const spec = sweep.space[name];
    const statuses = Array.from(new Set(trials.map((t) => t.status))).sort();
    const traces = statuses.map((status) => {
      const rows = trials.map((t, i) => [t, i]).filter(([t]) => t.status === status);
      return {type: "scatter", mode: "markers", name: text(status), x: rows.map(([, i]) => a.values[i]),
              y: rows.map(([t]) => t.value),
              text: rows.map(([t]) => text("trial " + t.number + (t.run_label ? " (" + t.run_label + ")" : ""))),
              marker: {size: 10}};
    });
    const xaxis = {title: {text: text(name)}, type: !a.ticks && logAxis(spec, a.values) ? "log" : "linear"};
    if (a.ticks) Object.assign(xaxis, a.ticks);
    Plotly.react("sweep-scatter", traces, {margin: {l: 60, r: 20, t: 40, b: 50}, xaxis: xaxis,
                                           yaxis: {title: {text: text(sweep.metric)}},
                                           title: {text: text(sweep.metric + " against " + name)}}, PLOT_CONFIG);
  }

  // No scored trial yet: the note alone, no axes (drawn from no values they read "Infinity").
  function draw(sweep) {
    const empty = scored(sweep).length === 0;
    document.getElementById("sweep-plots-empty").hidden = !empty;
    const body = document.getElementById("sweep-plots-body");
    root.dataset.empty = empty ? "1" : "0";
    if (empty) {
      body.hidden = true;
      Plotly.purge("sweep-parcoords");
      Plotly.purge("sweep-scatter");
      return;
    }
    body.hidden = false;
    drawParcoords(sweep);
    drawScatter(sweep);
  }

  function updateTable(sweep) {
    for (const t of sweep.trials) {
      const row = document.querySelector('#trial-table tr[data-trial="' + t.number + '"]');
      if (!row) continue;
      row.dataset.status = t.status;
      const badge = row.querySelector(".badge");
      if (badge) {
        badge.textContent = t.status;
        badge.className = "badge status-" + t.status;
        badge.dataset.status = t.status;
      }
      const cell = row.querySelector('[data-col="value"]');
      if (cell) cell.textContent = t.value === null ? "-" : t.value.toFixed(4);
    }
  }

  function anyTicked() { return document.querySelectorAll('#trial-table input[name="run"]:checked').length > 0; }

  function poll() {
    fetch(root.dataset.api, {credentials: "same-origin", headers: {Accept: "application/json"}})
      .then((r) => (r.ok ? r.json() : null))
      .then((sweep) => {
        if (!sweep) return;
        const added = sweep.trials.length !== data.trials.length;
        const ended = sweep.status !== data.status;
        data = sweep;
        draw(sweep);
        updateTable(sweep);
        if ((added || ended) && !anyTicked()) window.location.reload();
        else if (sweep.status === "running") window.setTimeout(poll, POLL_MS);
      })
      .catch(() => window.setTimeout(poll, POLL_MS * 2));
  }

  if (select) select.addEventListener("change", () => drawScatter(data));
  draw(data);
  if (data.status === "running") window.setTimeout(poll, POLL_MS);
})();
