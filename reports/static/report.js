// The load portrait's page script: inflate the embedded Plotly bundle, draw every chart in the
// page's colours, redraw when the reader switches light/dark, and copy pipeline.yaml on request.
// It runs under the page's Content-Security-Policy (this script and Plotly by hash, nothing fetched).
(function () {
  "use strict";

  var figures = JSON.parse(document.getElementById("lp-figures").textContent);
  var config = { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"] };

  function cssVar(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }

  // The figure's own layout with the page's colours for text, grids and backgrounds.
  function themed(layout) {
    var out = JSON.parse(JSON.stringify(layout));
    delete out.height;
    out.autosize = true;
    var fg = cssVar("--fg"), grid = cssVar("--grid"), muted = cssVar("--muted");
    out.paper_bgcolor = "rgba(0,0,0,0)";
    out.plot_bgcolor = "rgba(0,0,0,0)";
    out.font = { family: "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", size: 12, color: fg };
    out.hoverlabel = { bgcolor: cssVar("--card"), bordercolor: muted, font: { color: fg } };
    out.legend = Object.assign({ bgcolor: "rgba(0,0,0,0)" }, out.legend || {});
    out.xaxis = out.xaxis || {};
    out.yaxis = out.yaxis || {};
    Object.keys(out).forEach(function (key) {
      if (/^[xy]axis\d*$/.test(key)) {
        Object.assign(out[key], { gridcolor: grid, linecolor: muted, zerolinecolor: grid, tickcolor: muted });
      }
    });
    (out.annotations || []).forEach(function (a) { a.font = Object.assign({ color: fg }, a.font || {}); });
    return out;
  }

  function charts() {
    return Array.prototype.slice.call(document.querySelectorAll("[data-figure]"));
  }

  function draw() {
    return Promise.all(charts().map(function (el) {
      var fig = figures[el.getAttribute("data-figure")];
      el.textContent = "";
      // The container holds the height and Plotly fills it: a chart never spills out of its box
      // when the page reflows (a scrollbar appearing, a narrower window).
      el.style.height = (fig.layout.height || 320) + "px";
      return window.Plotly.newPlot(el, fig.data, themed(fig.layout), config);
    })).then(function () {
      document.documentElement.setAttribute("data-charts", "ready");
    });
  }

  function redraw() {
    charts().forEach(function (el) {
      var fig = figures[el.getAttribute("data-figure")];
      window.Plotly.react(el, fig.data, themed(fig.layout), config);
    });
  }

  // Plotly travels gzip-compressed (half the file size); the browser inflates it, then it runs
  // as an inline script whose hash the page's CSP lists.
  function loadPlotly() {
    var packed = document.getElementById("lp-plotly").textContent.trim();
    var binary = atob(packed);
    var bytes = new Uint8Array(binary.length);
    for (var i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Response(stream).text().then(function (source) {
      var script = document.createElement("script");
      script.textContent = source;
      document.head.appendChild(script);
      if (!window.Plotly) throw new Error("Plotly did not load");
    });
  }

  function fail(error) {
    charts().forEach(function (el) {
      el.textContent = "";
      var p = document.createElement("p");
      p.className = "chart-status";
      p.textContent = "This chart could not be drawn here (" + error.message + "); the tables and readings " +
        "hold the same figures. Open the file in a current Chrome, Edge, Firefox or Safari.";
      el.appendChild(p);
    });
    document.documentElement.setAttribute("data-charts", "failed");
  }

  function copy(button) {
    var target = document.getElementById(button.getAttribute("data-copy"));
    var status = button.parentNode.querySelector(".copy-status");
    var text = target.textContent;
    var done = function (message) { if (status) status.textContent = message; };
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(text).then(function () { done("Copied."); }, function () { select(target, done); });
    } else {
      select(target, done);
    }
  }

  function select(target, done) {
    var range = document.createRange();
    range.selectNodeContents(target);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    done("Selected: press Ctrl+C (Cmd+C) to copy.");
  }

  Array.prototype.forEach.call(document.querySelectorAll("button[data-copy]"), function (button) {
    button.addEventListener("click", function () { copy(button); });
  });

  if (charts().length) {
    loadPlotly().then(draw).then(function () {
      if (window.matchMedia) {
        window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", redraw);
      }
    }).catch(fail);
  } else {
    document.documentElement.setAttribute("data-charts", "ready");
  }
})();
