// The run page's detection threshold: the samples' thumbnails and their larger views draw detections with score
// at least the chosen value (the thumbnail URL's min_score, 0 to 1). Written here, no library.
(function () {
  "use strict";
  var input = document.getElementById("min-score");
  if (!input) { return; }
  var table = document.getElementById(input.getAttribute("data-samples-table"));
  if (!table) { return; }

  function withScore(url, score) {
    var u = new URL(url, window.location.href);
    u.searchParams.set("min_score", score);
    return u.pathname + u.search;
  }

  function apply() {
    var score = Number(input.value);
    if (input.value === "" || !(score >= 0 && score <= 1)) {
      input.setCustomValidity("a score from 0 to 1");
      input.reportValidity();
      return;
    }
    input.setCustomValidity("");
    var links = table.querySelectorAll("a.thumb-link");
    for (var i = 0; i < links.length; i++) {
      links[i].href = withScore(links[i].getAttribute("href"), score);
      var img = links[i].querySelector("img.thumb");
      if (img) { img.src = withScore(img.getAttribute("src"), score); }
    }
  }

  input.addEventListener("change", apply);
})();
