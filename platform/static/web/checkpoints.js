// The run page's checkpoints table: one compact row per checkpoint (step, the key metric: the
// config's checkpoint.keep_best_metric, the table's data-key-metric and its column's label, else
// eval/accuracy or reward/mean; size,
// created, the best evaluation result, actions: download, export bfloat16, fork, evaluate).
// run.js fetches .../checkpoints and calls GrpoCheckpoints.render(table, checkpoints); the table's
// data attributes say which actions this user has (data-downloadable, data-can-export,
// data-can-fork) and carry the export URL and the CSRF token (no inline script: strict CSP).
// The evaluation column reads /api/evaluations?run=ID&status=succeeded: per step, the best
// accuracy on any dataset, linking to that job.
"use strict";
window.GrpoCheckpoints = (function () {
  const KEY_METRICS = ["eval/accuracy", "reward/mean"];

  // The key metric of a checkpoint's metrics: `preferred` (the metric the config keeps the best
  // checkpoint by) when given, else eval/accuracy if present, else reward/mean.
  function keyMetric(metrics, preferred) {
    for (const name of preferred ? [preferred] : KEY_METRICS) {
      const v = (metrics || {})[name];
      if (typeof v === "number" && Number.isFinite(v)) return {name, value: v};
    }
    return null;
  }

  function humanBytes(n) {
    if (!n) return "-";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
  }

  // Best succeeded job per step: {step: job} (highest accuracy; the newer job on ties).
  function bestByStep(jobs) {
    const best = {};
    for (const job of jobs) {
      if (job.step === null || job.accuracy === null) continue;
      const seen = best[job.step];
      if (!seen || job.accuracy > seen.accuracy || (job.accuracy === seen.accuracy && job.id > seen.id)) {
        best[job.step] = job;
      }
    }
    return best;
  }

  function td(content, className) {
    const cell = document.createElement("td");
    if (content instanceof Node) cell.append(content); else cell.textContent = content;
    if (className) cell.className = className;
    return cell;
  }

  function link(text, href, className) {
    const a = document.createElement("a");
    a.href = href;
    a.textContent = text;
    a.className = className;
    return a;
  }

  function exportForm(table, step) {
    const form = document.createElement("form");
    form.method = "post";
    form.action = table.dataset.exportUrl;
    form.className = "inline checkpoint-export";
    for (const [name, value] of [["csrfmiddlewaretoken", table.dataset.csrf], ["step", String(step)],
                                 ["dtype", "bfloat16"]]) {
      const input = document.createElement("input");
      input.type = "hidden";
      input.name = name;
      input.value = value;
      form.append(input);
    }
    const button = document.createElement("button");
    button.type = "submit";
    button.className = "link";
    button.textContent = "export bf16";
    button.title = "write a bfloat16 Hugging Face folder of this checkpoint under the exports folder";
    form.append(button);
    return form;
  }

  function forkLink(step) {
    const a = link("fork", "#fork", "checkpoint-fork");
    a.addEventListener("click", () => {
      const select = document.getElementById("fork-step");
      if (select) select.value = String(step);
    });
    return a;
  }

  async function evaluations(runId) {
    try {
      const response = await fetch(`/api/evaluations?run=${runId}&status=succeeded&limit=500`,
                                   {credentials: "same-origin"});
      return response.ok ? (await response.json()).evaluations || [] : [];
    } catch (err) {
      return [];
    }
  }

  async function render(table, checkpoints) {
    const d = table.dataset;
    const best = bestByStep(await evaluations(d.run));
    const body = table.tBodies[0];
    body.replaceChildren();
    for (const c of checkpoints) {
      const row = document.createElement("tr");
      row.dataset.step = c.step;
      const key = keyMetric(c.metrics, d.keyMetric);
      const keyCell = td(key ? key.value.toFixed(3) : "-", "checkpoint-key");
      if (key) keyCell.title = key.name;
      const job = best[c.step];
      const evalCell = job
        ? td(link(`${job.accuracy.toFixed(3)}`, job.url, "checkpoint-evaluation"))
        : td("-", "muted");
      if (job) evalCell.title = `accuracy on ${job.dataset_label}`;
      const actions = document.createElement("span");
      actions.className = "row-actions";
      if (d.downloadable) {
        const a = link("download", `/api/runs/${d.run}/checkpoints/${c.step}/hf.zip`, "checkpoint-download-row");
        a.setAttribute("download", "");
        actions.append(a);
      }
      if (d.canExport) actions.append(exportForm(table, c.step));
      if (d.canFork) actions.append(forkLink(c.step));
      actions.append(link("evaluate", `/evaluations/new/?run=${d.run}&step=${c.step}`, "checkpoint-evaluate"));
      row.append(td(String(c.step)), keyCell, td(humanBytes(c.size_bytes)),
                 td(window.RunTableFormat.formatWhen(c.created_at), "small"), evalCell,
                 td(actions));
      body.append(row);
    }
  }

  return {render, keyMetric, humanBytes, bestByStep};
})();
