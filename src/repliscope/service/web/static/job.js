// The job page: while the job runs, reloads the page's own HTML every 1.5 s (the HttpOnly cookie authenticates)
// and swaps in its state (status, progress, rate, results) and its log table; once the job is final, its actions
// too (the Cancel button disabled), then stops. The server renders everything (escaped); nothing here builds
// markup from data (the fresh page is parsed by DOMParser, which runs no script). Written here, no library.
(function () {
  "use strict";
  var box = document.getElementById("job");
  if (!box || box.getAttribute("data-final") === "yes") { return; }
  var id = box.getAttribute("data-job-id");
  var page = "/jobs/" + encodeURIComponent(id);

  // The element ``elementId`` takes the fresh page's content; an element with an id and no child element (the
  // status, the progress text, the Cancel button) that is in both stays the same element with the fresh text and
  // attributes, so what holds it (a screen reader's focus, a test's reference) keeps it.
  function swap(fresh, elementId) {
    var box = document.getElementById(elementId);
    var theirs = fresh.getElementById(elementId);
    if (!box || !theirs) { return; }
    var next = document.importNode(theirs, true);
    Array.prototype.forEach.call(next.querySelectorAll("[id]"), function (el) {
      var mine = document.getElementById(el.id);
      if (!mine || mine.tagName !== el.tagName || el.children.length || mine.children.length) { return; }
      Array.prototype.slice.call(mine.attributes).forEach(function (a) {
        if (!el.hasAttribute(a.name)) { mine.removeAttribute(a.name); }
      });
      Array.prototype.forEach.call(el.attributes, function (a) { mine.setAttribute(a.name, a.value); });
      mine.textContent = el.textContent;
      el.replaceWith(mine);
    });
    box.replaceChildren.apply(box, Array.prototype.slice.call(next.childNodes));
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
