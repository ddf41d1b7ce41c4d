// The runs page's column chooser (service/web/run_columns.py): a tick shows or hides its column at once, the
// choice is kept in localStorage and written into the address (?cols=...) and the page's links, so a reload, a
// sort, the next page and a copied link show the same columns. A ?cols= in the address wins over the kept choice
// (it is shown, not kept). Without this script the chooser is a plain GET form. Written here, no library.
(function () {
  "use strict";
  var chooser = document.getElementById("columns-chooser");
  var table = document.getElementById("runs-table");
  if (!chooser || !table) { return; }
  var key = chooser.getAttribute("data-storage-key");
  var boxes = [].slice.call(chooser.querySelectorAll('input[type="checkbox"][name="cols"]'));
  var known = boxes.map(function (b) { return b.value; });
  var notice = document.getElementById("columns-notice");
  var summary = chooser.querySelector("summary");

  function stored() {
    try { return window.localStorage.getItem(key); } catch (e) { return null; }  // storage off: no memory
  }

  function keep(names) {
    try { window.localStorage.setItem(key, names.join(",")); } catch (e) { /* storage off: not kept */ }
  }

  function withCols(href, value) {
    var u = new URL(href, window.location.href);
    u.searchParams.set("cols", value);
    return u.pathname + u.search + u.hash;
  }

  function show(names) {
    var on = {};
    names.forEach(function (n) { on[n] = true; });
    boxes.forEach(function (b) { b.checked = !!on[b.value]; });
    var cells = document.querySelectorAll("#runs-table [data-col]");
    for (var i = 0; i < cells.length; i++) { cells[i].hidden = !on[cells[i].getAttribute("data-col")]; }
    summary.textContent = "Columns (" + names.length + " of " + known.length + " shown)";
  }

  function chosen() {
    return boxes.filter(function (b) { return b.checked; }).map(function (b) { return b.value; });
  }

  // every link and form of the page that leads back to this list keeps the columns
  function carry(value) {
    window.history.replaceState(null, "", withCols(window.location.href, value));
    var links = document.querySelectorAll('a[href^="/runs?"]:not(#columns-default)');
    for (var i = 0; i < links.length; i++) {
      links[i].setAttribute("href", withCols(links[i].getAttribute("href"), value));
    }
    var filters = document.querySelector('form.filters');
    if (filters) {
      var hidden = filters.querySelector('input[type="hidden"][name="cols"]');
      if (!hidden) {
        hidden = document.createElement("input");
        hidden.type = "hidden";
        hidden.name = "cols";
        filters.appendChild(hidden);
      }
      hidden.value = value;
    }
  }

  boxes.forEach(function (b) {
    b.addEventListener("change", function () {
      var names = chosen();
      show(names);
      keep(names);
      carry(names.join(","));
      notice.textContent = "Shown: " + (names.length ? names.join(", ") : "the run id only") + " (kept for your next visit).";
    });
  });

  var reset = document.getElementById("columns-default");
  if (reset) {
    reset.addEventListener("click", function () {
      try { window.localStorage.removeItem(key); } catch (e) { /* storage off */ }
    });
  }

  var params = new URLSearchParams(window.location.search);
  var saved = stored();
  if (!params.has("cols") && saved !== null) {
    var names = saved.split(",").filter(function (n) { return n !== ""; });
    var unknown = names.filter(function (n) { return known.indexOf(n) < 0; });
    names = names.filter(function (n) { return known.indexOf(n) >= 0; });
    show(names);
    carry(names.join(","));
    notice.textContent = "Your kept columns are shown" +
      (unknown.length ? "; no longer known, left out: " + unknown.join(", ") : "") + ".";
  }
})();
