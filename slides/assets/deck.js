// Starts reveal.js and draws each deck figure (plotly JSON embedded by build.py) when its slide
// is first shown: plotly sizes a figure from its container, which is hidden on other slides.
// window.deckStatus tells a person (or a browser test) how many figures exist and are drawn.
(function () {
  "use strict";
  var status = { figures: document.querySelectorAll(".plotly-slot").length, drawn: 0, errors: [] };
  window.deckStatus = status;

  function draw(slot) {
    if (slot.dataset.drawn) { return Promise.resolve(); }
    slot.dataset.drawn = "pending";
    var spec = JSON.parse(document.getElementById(slot.dataset.fig).textContent);
    var config = { responsive: true, displaylogo: false, scrollZoom: false };
    return Plotly.newPlot(slot, { data: spec.data, layout: spec.layout, frames: spec.frames, config: config })
      .then(function () { slot.dataset.drawn = "done"; status.drawn += 1; })
      .catch(function (err) { slot.dataset.drawn = "failed"; status.errors.push(spec.name + ": " + err); throw err; });
  }

  function drawIn(root) {
    var slots = root ? root.querySelectorAll(".plotly-slot") : [];
    return Promise.all(Array.prototype.map.call(slots, draw)).then(function () {
      Array.prototype.forEach.call(slots, function (s) { Plotly.Plots.resize(s); });
    });
  }

  Reveal.initialize({
    hash: true,
    width: 1280,
    height: 720,
    margin: 0.04,
    slideNumber: "c/t",
    transition: "none",
    controls: true,
    progress: true,
    center: false,
    plugins: [RevealNotes, RevealHighlight]
  });
  Reveal.on("ready", function (event) {
    drawIn(Reveal.isPrintView() ? document : event.currentSlide);
  });
  Reveal.on("slidechanged", function (event) { drawIn(event.currentSlide); });
  Reveal.on("resize", function () { drawIn(Reveal.getCurrentSlide()); });
})();
