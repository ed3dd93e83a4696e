// medbench leaderboard site: sorting, filters, the recomputed average, rank intervals on demand, UI links.
// SPDX-License-Identifier: Apache-2.0 (see LICENSE beside it). No library; reads only the page it runs in.
(function () {
  "use strict";

  // Links into the Dagster and MLflow UIs: to where `medbench ui` serves them (ui.js), whatever the build assumed.
  var ui = window.MEDBENCH_UI || {};
  document.querySelectorAll("a.ui[data-ui][data-path]").forEach(function (a) {
    var base = ui[a.getAttribute("data-ui")];
    if (base) a.setAttribute("href", base + a.getAttribute("data-path"));
  });

  var table = document.getElementById("overview");
  var form = document.getElementById("filters");
  if (!table || !form) return;
  var AVG = "__average__";
  var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
  var taskHeads = heads.filter(function (th) { return th.hasAttribute("data-task"); });
  var body = table.tBodies[0];
  var rows = Array.prototype.slice.call(body.rows);
  var note = document.getElementById("average-note");
  var rankTasks = (table.getAttribute("data-average-rank-tasks") || "").split("|").filter(Boolean);
  var sortState = null; // {col, dir}

  function cellOf(row, task) {
    return row.querySelector('td[data-task="' + CSS.escape(task) + '"]');
  }
  function checked(name) {
    var out = {};
    form.querySelectorAll('input[name="' + name + '"]').forEach(function (i) { if (i.checked) out[i.value] = true; });
    return out;
  }
  function anyOf(values, allowed) {
    return values.some(function (v) { return allowed[v]; });
  }
  function taskShown(th, f) {
    return !!f.modality[th.getAttribute("data-modality")] &&
      anyOf(th.getAttribute("data-languages").split(" "), f.language) &&
      !!f.licence[th.getAttribute("data-licence")] &&
      anyOf(th.getAttribute("data-families").split("|"), f.family);
  }
  function fmt(v) { return v === null ? "-" : v.toFixed(4); }
  function sameSet(a, b) {
    return a.length === b.length && a.slice().sort().join("\u0000") === b.slice().sort().join("\u0000");
  }

  function apply() {
    var f = { modality: checked("modality"), language: checked("language"), licence: checked("licence"), family: checked("family"), kind: checked("kind") };
    var shownTasks = [];
    var shown = {};
    taskHeads.forEach(function (th) {
      var on = taskShown(th, f);
      th.hidden = !on;
      var t = th.getAttribute("data-task");
      shown[t] = on;
      if (on) shownTasks.push(t);
    });
    table.querySelectorAll("td[data-task]").forEach(function (td) { td.hidden = !shown[td.getAttribute("data-task")]; });
    rows.forEach(function (r) { r.hidden = !f.kind[r.getAttribute("data-kind")]; });
    var shownRows = rows.filter(function (r) { return !r.hidden; });
    // The tasks every shown model can read; each shown model's mean over them ('-' when one has no figure).
    var common = shownTasks.filter(function (t) {
      return shownRows.every(function (r) { var c = cellOf(r, t); return c && c.getAttribute("data-na") !== "1"; });
    });
    var ranked = sameSet(common, rankTasks);
    shownRows.forEach(function (r) {
      var vals = common.map(function (t) { var v = cellOf(r, t).getAttribute("data-value"); return v === "" ? null : parseFloat(v); });
      var avg = (vals.length && vals.every(function (v) { return v !== null; }))
        ? vals.reduce(function (a, b) { return a + b; }, 0) / vals.length : null;
      var td = r.querySelector("td.avg");
      td.setAttribute("data-value", avg === null ? "" : String(avg));
      td.querySelector(".v").textContent = fmt(avg);
      var rk = td.querySelector(".avg-rank");
      rk.textContent = ranked ? rk.getAttribute("data-rank") : "";
    });
    note.textContent = "average: the mean over the " + common.length + " task(s) every shown model reads (" +
      (common.length ? common.join(", ") : "none") + "), recomputed in this page for the filter now set" +
      (shownTasks.length > common.length ? "; " + (shownTasks.length - common.length) + " shown task(s) some shown model cannot read are left out of it" : "") +
      (ranked ? "" : "; the average's rank interval is the saved leaderboard's, over other tasks, so it is not shown") + ".";
    if (sortState) sortBy(sortState.col, sortState.dir);
  }

  function keyOf(row, col) {
    if (col === "model") return row.getAttribute("data-model");
    var td = col === AVG ? row.querySelector("td.avg") : cellOf(row, col);
    var v = td ? td.getAttribute("data-value") : "";
    return v === "" ? null : parseFloat(v);
  }
  function sortBy(col, dir) {
    sortState = { col: col, dir: dir };
    var sorted = rows.slice().sort(function (a, b) {
      var x = keyOf(a, col), y = keyOf(b, col);
      if (x === null && y === null) return 0;
      if (x === null) return 1; // no figure: last, whichever the direction
      if (y === null) return -1;
      var c = typeof x === "string" ? x.localeCompare(y) : x - y;
      return dir === "ascending" ? c : -c;
    });
    sorted.forEach(function (r) { body.appendChild(r); });
    heads.forEach(function (th) {
      th.setAttribute("aria-sort", th.getAttribute("data-col") === col ? dir : "none");
    });
  }

  table.tHead.addEventListener("click", function (e) {
    var b = e.target.closest("button.sort");
    if (!b) return;
    var col = b.getAttribute("data-col");
    var th = b.closest("th");
    // Figures sort best first on the first click; names A to Z.
    var first = col === "model" ? "ascending" : "descending";
    var now = th.getAttribute("aria-sort");
    sortBy(col, now === first ? (first === "ascending" ? "descending" : "ascending") : first);
  });
  form.addEventListener("change", function (e) {
    if (e.target.id === "show-ranks") {
      table.classList.toggle("show-ranks", e.target.checked);
      return;
    }
    apply();
  });
  document.getElementById("show-all").addEventListener("click", function () {
    form.querySelectorAll("input[type=checkbox][name]").forEach(function (i) { i.checked = true; });
    apply();
  });
  apply();
})();
