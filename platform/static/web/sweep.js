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
  if (!root || !dataNode) return;
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
            ticks: {tickvals: choices.map((_c, i) => i), ticktext: choices.map(String)}};
  }

  function scored(sweep) { return sweep.trials.filter((t) => t.value !== null && t.value !== undefined); }

  function drawParcoords(sweep) {
    const trials = scored(sweep);
    const dimensions = paramNames(sweep).map((name) => {
      const a = axis(sweep, name, trials);
      const dim = {label: name, values: a.values};
      if (a.ticks) Object.assign(dim, a.ticks);
      const spec = sweep.space[name];
      if (spec.type !== "categorical" && spec.log) {
        dim.values = a.values.map((v) => Math.log10(v));
        dim.label = "log10 " + name;
      }
      return dim;
    });
    dimensions.push({label: sweep.metric, values: trials.map((t) => t.value)});
    const trace = {type: "parcoords", dimensions: dimensions,
                   line: {color: trials.map((t) => t.value), colorscale: "Viridis", showscale: true,
                          reversescale: sweep.direction === "minimize"}};
    Plotly.react("sweep-parcoords", [trace], {margin: {l: 60, r: 60, t: 50, b: 20},
                                              title: {text: "trials: params and " + sweep.metric}}, PLOT_CONFIG);
  }

  function drawScatter(sweep) {
    const trials = scored(sweep);
    const name = select && select.value ? select.value : paramNames(sweep)[0];
    const a = axis(sweep, name, trials);
    const spec = sweep.space[name];
    const statuses = Array.from(new Set(trials.map((t) => t.status))).sort();
    const traces = statuses.map((status) => {
      const rows = trials.map((t, i) => [t, i]).filter(([t]) => t.status === status);
      return {type: "scatter", mode: "markers", name: status, x: rows.map(([, i]) => a.values[i]),
              y: rows.map(([t]) => t.value), text: rows.map(([t]) => "trial " + t.number + (t.run_label ? " (" + t.run_label + ")" : "")),
              marker: {size: 10}};
    });
    const xaxis = {title: {text: name}, type: spec.type !== "categorical" && spec.log ? "log" : "linear"};
    if (a.ticks) Object.assign(xaxis, a.ticks);
    Plotly.react("sweep-scatter", traces, {margin: {l: 60, r: 20, t: 40, b: 50}, xaxis: xaxis,
                                           yaxis: {title: {text: sweep.metric}},
                                           title: {text: sweep.metric + " against " + name}}, PLOT_CONFIG);
  }

  function draw(sweep) {
    const empty = scored(sweep).length === 0;
    document.getElementById("sweep-plots-empty").hidden = !empty;
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
