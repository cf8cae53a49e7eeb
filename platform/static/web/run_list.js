// The runs page, live: every POLL_MS it asks GET /api/runs for what the page shows (the same
// filters, sort and metric columns as the address; this page's slice as limit/offset) and writes
// the cells that change: status, progress, latest reward, metric columns, tags, duration. When the
// runs or their order changed (a new run, a status filter a run left, a metric sort), the rows are
// rebuilt from the answer, keeping the ticked checkboxes. It also drives "Compare selected".
(function () {
  "use strict";
  const F = window.RunTableFormat;
  const live = document.getElementById("run-table-live");
  const table = document.getElementById("run-table");
  if (!live || !table || !F) return;
  const POLL_MS = 5000;
  const api = live.dataset.api;
  const perPage = Number(live.dataset.perPage);
  const metrics = live.dataset.metrics ? live.dataset.metrics.split(",") : [];
  const tbody = table.tBodies[0];
  const compareButton = document.getElementById("compare-selected");
  const liveMark = document.getElementById("runs-live");

  function el(tag, props = {}, children = []) {
    const node = document.createElement(tag);
    Object.assign(node, props);
    node.append(...children);
    return node;
  }

  // --- cells --------------------------------------------------------------------------------

  function statusCell(td, run) {
    const badge = el("span", {className: `badge status-${run.status}`, textContent: run.status});
    badge.dataset.status = run.status;
    const parts = [badge];
    if (run.restarts) {
      parts.push(" ", el("span", {className: "muted small", title: "automatic restarts", textContent: `↻${run.restarts}`}));
    }
    td.replaceChildren(...parts);
  }

  function progressCell(td, run) {
    const bar = el("div", {className: "progress-bar"});
    bar.style.width = `${F.percent(run.progress)}%`;
    const box = el("div", {className: "progress", title: `step ${run.step} of ${run.max_steps}`}, [bar]);
    box.dataset.progress = String(run.progress);
    td.replaceChildren(box, el("span", {className: "small", textContent: `${run.step}/${run.max_steps}`}));
  }

  function tagsCell(td, run) {
    const links = [];
    for (const name of run.tags) {
      links.push(el("a", {className: "tag", href: `?tag=${encodeURIComponent(name)}`, textContent: name}), " ");
    }
    td.replaceChildren(...links);
  }

  function setText(td, text) {
    if (td.textContent !== text) td.textContent = text;
  }

  // Write every changing cell of row `tr` from `run` (an entry of GET /api/runs).
  function fill(tr, run) {
    tr.dataset.status = run.status;
    for (const td of tr.querySelectorAll("td[data-col]")) {
      const col = td.dataset.col;
      if (col === "status") statusCell(td, run);
      else if (col === "progress") progressCell(td, run);
      else if (col === "reward") setText(td, F.formatNumber(run.latest_reward));
      else if (col === "metric") setText(td, F.formatNumber(run.metrics[td.dataset.metric]));
      else if (col === "tags") tagsCell(td, run);
      else if (col === "duration") setText(td, F.formatDuration(run.duration_s));
      else if (col === "owner") setText(td, run.owner);
    }
  }

  // A new row for `run`, laid out like the server's _run_table.html, then filled.
  function build(run, checked) {
    const tr = el("tr");
    tr.dataset.runId = String(run.id);
    const box = el("input", {type: "checkbox", name: "run", value: String(run.id), checked});
    box.setAttribute("aria-label", `select run ${run.id}`);
    const createdText = F.formatWhen(run.created_at);  // as the server's |when writes it
    const col = (name, extra = {}) => {
      const td = el("td", extra);
      td.dataset.col = name;
      return td;
    };
    const cells = [
      el("td", {className: "select-col"}, [box]),
      el("td", {}, [el("a", {href: `/runs/${run.id}/`}, run.name
        ? [run.name, " ", el("span", {className: "muted small", textContent: `#${run.id}`})] : [`#${run.id}`])]),
      el("td", {}, [el("a", {href: `/experiments/${run.experiment.id}/`, textContent: run.experiment.name})]),
      col("owner"), col("status"), col("progress", {className: "progress-cell"}), col("reward"),
    ];
    for (const name of metrics) {
      const td = col("metric");
      td.dataset.metric = name;
      cells.push(td);
    }
    cells.push(col("tags"), col("duration"), el("td", {title: run.created_at, textContent: createdText}));
    tr.append(...cells);
    fill(tr, run);
    return tr;
  }

  // --- polling ------------------------------------------------------------------------------

  function rowIds() {
    return Array.from(tbody.rows, (tr) => Number(tr.dataset.runId));
  }

  function render(runs) {
    const ids = runs.map((r) => r.id);
    if (F.sameOrder(rowIds(), ids)) {
      Array.from(tbody.rows).forEach((tr, i) => fill(tr, runs[i]));
    } else {
      const checked = new Set(selectedIds());
      tbody.replaceChildren(...runs.map((run) => build(run, checked.has(run.id))));
      updateCompare();
    }
    const empty = document.getElementById("runs-empty");
    if (empty) empty.hidden = runs.length > 0;
  }

  let busy = false;
  async function poll() {
    if (busy || document.hidden) return;
    busy = true;
    try {
      const response = await fetch(`${api}?${F.apiQuery(location.search, perPage)}`,
        {credentials: "same-origin", headers: {Accept: "application/json"}});
      if (!response.ok) throw new Error(`/api/runs answered ${response.status}`);
      const body = await response.json();
      render(body.runs);
      const count = document.getElementById("runs-count");
      if (count) count.textContent = `${body.count} run${body.count === 1 ? "" : "s"}`;
      if (liveMark) liveMark.className = "muted small on";
    } catch (err) {
      if (liveMark) {
        liveMark.className = "muted small off";
        liveMark.title = `live updates paused: ${err.message}`;
      }
    } finally {
      busy = false;
    }
  }

  // --- compare selected ---------------------------------------------------------------------

  function selectedIds() {
    return Array.from(tbody.querySelectorAll("input[name=run]:checked"), (box) => Number(box.value));
  }

  function updateCompare() {
    if (!compareButton) return;
    const url = F.compareUrl(compareButton.dataset.compareUrl, selectedIds(), Number(compareButton.dataset.maxRuns));
    compareButton.disabled = url === null;
    compareButton.title = url ? "" : `tick 2 to ${compareButton.dataset.maxRuns} runs to compare`;
  }

  table.addEventListener("change", (event) => {
    if (event.target.id === "select-all-runs") {
      for (const box of tbody.querySelectorAll("input[name=run]")) box.checked = event.target.checked;
    }
    updateCompare();
  });
  if (compareButton) {
    compareButton.addEventListener("click", () => {
      const url = F.compareUrl(compareButton.dataset.compareUrl, selectedIds(), Number(compareButton.dataset.maxRuns));
      if (url) location.assign(url);
    });
  }

  updateCompare();
  setInterval(poll, POLL_MS);
  document.addEventListener("visibilitychange", () => { if (!document.hidden) poll(); });
})();
