// The "New job" page (templates/new.html): the upload form refuses a manifest above the server's limit before
// sending it (data-max-bytes), and the wizard offers only the runtimes, claims, datasets and variants that fit
// the chosen manifest (the fits are the page's JSON block #wizard-fits). Without this script both forms still
// work: the server checks everything again. Served from /static (the pages' CSP runs no inline script).
(function () {
  "use strict";
  var upload = document.getElementById("manifest-upload");
  upload.addEventListener("submit", function (event) {
    var limit = Number(upload.dataset.maxBytes || 0);
    var file = document.getElementById("upload-file").files[0];
    var size = file ? file.size : new Blob([document.getElementById("upload-text").value]).size;
    var note = document.getElementById("upload-size-error");
    if (limit && size > limit) {
      event.preventDefault();
      note.textContent = (file ? file.name : "the pasted text") + " is " + size.toLocaleString("en-US") +
        " bytes; this server takes manifests of at most " + limit.toLocaleString("en-US") + " bytes";
      note.hidden = false;
    } else { note.hidden = true; }
  });
}());
(function () {
  "use strict";
  var fits = JSON.parse(document.getElementById("wizard-fits").textContent);
  var manifest = document.getElementById("wizard-manifest");
  var task = document.getElementById("wizard-task");
  var claim = document.getElementById("wizard-claim");
  var dataset = document.getElementById("wizard-dataset");
  var kind = document.getElementById("wizard-kind");
  function setText(id, text) { document.getElementById(id).textContent = text; }
  function offer(select, why) {
    var first = null;
    Array.prototype.forEach.call(select.options, function (o) {
      var out = o.value !== "" && why(o) !== null;
      o.disabled = out; o.hidden = out;
      if (!out && first === null && o.value !== "") { first = o; }
    });
    var current = select.options[select.selectedIndex];
    if (current && current.disabled && first) { select.value = first.value; }
  }
  function misfitText(entries) {
    return entries.filter(function (e) { return e[1]; });
  }
  function apply() {
    Array.prototype.forEach.call(manifest.options, function (o) {
      var out = task.value !== "" && o.dataset.task !== task.value;
      o.hidden = out; o.disabled = out;
    });
    var chosen = manifest.options[manifest.selectedIndex];
    if (chosen && chosen.disabled) {
      var open = Array.prototype.find.call(manifest.options, function (o) { return !o.disabled; });
      if (open) { manifest.value = open.value; chosen = open; }
    }
    var fit = chosen ? fits[chosen.value] : null;
    if (!fit) { return; }
    var rt = function (o) { return fit.runtimes[o.value] || null; };
    offer(document.getElementById("wizard-runtime"), rt);
    offer(document.getElementById("wizard-runtime-b"), rt);
    var bad = misfitText(Object.entries(fit.runtimes).sort());
    setText("wizard-runtime-why", bad.length ? "Not offered for " + chosen.value + " (" + chosen.dataset.format +
      " source): " + bad.map(function (e) { return e[0] + " " + e[1]; }).join("; ") + "." :
      "Every runtime runs " + chosen.dataset.format + " sources.");
    var keep = claim.value;
    claim.length = 1;
    fit.claims.forEach(function (c) { claim.add(new Option(c[1], c[0], false, c[0] === keep)); });
    offer(dataset, function (o) {
      if (fit.datasets[o.value]) { return fit.datasets[o.value]; }
      if (claim.value && o.dataset.declared !== claim.value) { return "not declared as " + claim.value; }
      return null;
    });
    var badData = misfitText(Object.entries(fit.datasets).sort());
    setText("wizard-dataset-why", (badData.length ? "Not offered for " + chosen.value + ": " +
      badData.map(function (e) { return e[0] + " (" + e[1] + ")"; }).join("; ") + "." :
      "Every registered dataset carries what " + chosen.dataset.task + " scores.") +
      (claim.value ? " Only datasets declared as " + claim.value + " judge that claim." : ""));
    document.querySelectorAll("#wizard-variants .variant").forEach(function (div) {
      var out = fit.variants.indexOf(div.dataset.variant) < 0;
      div.hidden = out;
      var box = div.querySelector("input");
      box.disabled = out; if (out) { box.checked = false; }
    });
    setText("wizard-variants-why", "The variants registered for " + chosen.dataset.task + "; none ticked runs every one.");
    document.querySelectorAll(".wizard-kind").forEach(function (el) { el.hidden = el.dataset.kind !== kind.value; });
  }
  [manifest, task, claim, kind].forEach(function (el) { el.addEventListener("change", apply); });
  apply();
}());
