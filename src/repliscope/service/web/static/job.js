// The job page: polls GET /api/v1/jobs/{id} (the HttpOnly cookie authenticates) until the job is final,
// then shows the links to its results. Written here, no library.
(function () {
  "use strict";
  var box = document.getElementById("job");
  if (!box) { return; }
  var id = box.getAttribute("data-job-id");
  var resultBase = box.getAttribute("data-result-base");  // the job kind's result page: /runs/, /benchmarks/, /diffs/
  var statusEl = document.getElementById("job-status");
  var bar = document.getElementById("job-progress");
  var text = document.getElementById("job-progress-text");
  var errorEl = document.getElementById("job-error");
  var results = document.getElementById("job-results");
  var logEl = document.getElementById("job-log");
  var FINAL = ["succeeded", "failed", "cancelled"];

  function show(job) {
    statusEl.textContent = job.status;
    statusEl.className = "status-" + job.status;
    var done = job.progress_done || 0;
    var total = job.progress_total;
    bar.max = total || 1;
    bar.value = done;
    text.textContent = done + " / " + (total == null ? "?" : total);
    if (job.error) { errorEl.textContent = job.error; errorEl.hidden = false; }
    var ids = job.result_ids || [];
    if (ids.length && !results.children.length) {
      ids.forEach(function (rid, i) {
        var a = document.createElement("a");
        if (i === 0) { a.id = "job-run-link"; }
        a.href = resultBase + encodeURIComponent(rid);
        a.textContent = "Open the result " + rid.slice(0, 12);
        results.appendChild(a);
        results.appendChild(document.createTextNode(" "));
      });
    }
  }

  function loadLog() {
    fetch("/api/v1/jobs/" + encodeURIComponent(id) + "/log", {credentials: "same-origin"})
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (t) { if (t !== null) { logEl.textContent = t; } })
      .catch(function () { /* the log is informative only */ });
  }

  function poll() {
    fetch("/api/v1/jobs/" + encodeURIComponent(id), {credentials: "same-origin", headers: {"Accept": "application/json"}})
      .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.json(); })
      .then(function (job) {
        show(job);
        loadLog();
        if (FINAL.indexOf(job.status) < 0) { setTimeout(poll, 1000); }
      })
      .catch(function () { setTimeout(poll, 3000); });
  }

  if (FINAL.indexOf(statusEl.textContent.trim()) < 0) { poll(); }
})();
