// The evaluation job page: while the job is queued or running (data-poll), poll
// /api/evaluations/<id> every 2 s, move the progress bar, and reload the page once the job
// has finished (the server then renders its results and completions).
"use strict";
(function () {
  const card = document.getElementById("evaluation-job");
  if (!card || !card.dataset.poll) return;
  const POLL_MS = 2000;
  async function poll() {
    try {
      const response = await fetch(`/api/evaluations/${card.dataset.job}`, {credentials: "same-origin"});
      if (response.ok) {
        const job = await response.json();
        const bar = document.getElementById("job-progress");
        bar.max = Math.max(job.progress_total, 1);
        bar.value = job.progress_done;
        document.getElementById("job-progress-text").textContent =
          `${job.progress_done} / ${job.progress_total || "?"} prompts`;
        if (job.status !== card.dataset.status && (job.status === "succeeded" || job.status === "failed")) {
          window.location.reload();
          return;
        }
      }
    } catch (err) {
      // a network blip: try again at the next tick
    }
    setTimeout(poll, POLL_MS);
  }
  setTimeout(poll, POLL_MS);
})();
