// The job page: while the job runs, reloads the page's own HTML every 1.5 s (the HttpOnly cookie authenticates)
// and swaps in its state (status, progress, rate, results) and its log table; once the job is final, its actions
// too (the Cancel button disabled), then stops. The server renders everything (escaped); nothing here builds
// markup from data. Written here, no library.
(function () {
  "use strict";
  var box = document.getElementById("job");
  if (!box || box.getAttribute("data-final") === "yes") { return; }
  var id = box.getAttribute("data-job-id");
  var page = "/jobs/" + encodeURIComponent(id);

  function swap(fresh, elementId) {
    var mine = document.getElementById(elementId);
    var theirs = fresh.getElementById(elementId);
    if (mine && theirs) { mine.innerHTML = theirs.innerHTML; }
  }

  function poll() {
    fetch(page, {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.text(); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html");
        var next = fresh.getElementById("job");
        if (!next) { throw new Error("not the job page (signed out?)"); }
        swap(fresh, "job-state");
        swap(fresh, "job-log-box");
        if (next.getAttribute("data-final") === "yes") {
          swap(fresh, "job-actions");
          box.setAttribute("data-final", "yes");
          return;
        }
        setTimeout(poll, 1500);
      })
      .catch(function () { setTimeout(poll, 3000); });
  }

  setTimeout(poll, 1000);
})();
