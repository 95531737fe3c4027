(function () {
  "use strict";
  // Everything here is optional sugar: the page reads the same without scripts.
  document.documentElement.classList.add("js");
  var runs = Array.prototype.slice.call(document.querySelectorAll("details.run"));

  function setOpen(open) {
    runs.forEach(function (run) { run.open = open; });
  }

  document.querySelectorAll(".controls button").forEach(function (button) {
    button.addEventListener("click", function () {
      var action = button.getAttribute("data-action");
      if (action === "failing") {
        var on = document.body.classList.toggle("only-failing");
        button.setAttribute("aria-pressed", on ? "true" : "false");
      } else {
        setOpen(action === "expand");
      }
    });
  });

  // Opening a run from the index: expand it even when it starts collapsed.
  document.querySelectorAll(".index a[href^='#run-']").forEach(function (link) {
    link.addEventListener("click", function () {
      var target = document.getElementById(link.getAttribute("href").slice(1));
      if (target) { target.open = true; }
    });
  });

  // Pointing at a grader (its verdict or its column) highlights the calls it marked.
  function clear(run) {
    var timeline = run.querySelector(".tl");
    if (timeline) { timeline.classList.remove("hl"); }
    run.querySelectorAll(".on").forEach(function (el) { el.classList.remove("on"); });
  }

  function highlight(run, g) {
    clear(run);
    var timeline = run.querySelector(".tl");
    if (!timeline) { return; }
    timeline.classList.add("hl");
    run.querySelectorAll("[data-g='" + g + "']").forEach(function (el) { el.classList.add("on"); });
    run.querySelectorAll(".tl-row[data-marks]").forEach(function (row) {
      var marks = row.getAttribute("data-marks").split(" ");
      if (marks.indexOf(g) >= 0) { row.classList.add("on"); }
    });
  }

  runs.forEach(function (run) {
    run.querySelectorAll(".v[data-g], .gh[data-g]").forEach(function (el) {
      el.addEventListener("mouseenter", function () { highlight(run, el.getAttribute("data-g")); });
      el.addEventListener("mouseleave", function () { clear(run); });
    });
  });
  document.documentElement.setAttribute("data-report-ready", String(runs.length));
}());
