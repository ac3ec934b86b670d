// Sorting, filtering and expandable rows for the report's tables. `#q=TEXT` in the address
// fills the filters, `#open=ID` opens that row (`all`: every row).
(function () {
  "use strict";
  function items(table) {
    return Array.prototype.filter.call(table.tBodies[0].rows, function (r) {
      return r.classList.contains("item");
    });
  }
  function detailOf(row) {
    var next = row.nextElementSibling;
    return next && next.classList.contains("detail") ? next : null;
  }
  function setOpen(row, open) {
    var detail = detailOf(row);
    if (!detail) return;
    row.classList.toggle("open", open);
    row.setAttribute("aria-expanded", open ? "true" : "false");
    detail.hidden = !open || row.hidden;
  }
  function sortKey(row, column, numeric) {
    var cell = row.cells[column];
    if (!cell) return numeric ? 0 : "";
    var key = cell.hasAttribute("data-sort") ? cell.getAttribute("data-sort") : cell.textContent;
    return numeric ? parseFloat(key) || 0 : key.toLowerCase();
  }
  function setUp(wrap) {
    var table = wrap.querySelector("table");
    var box = wrap.querySelector("input.filter");
    var only = wrap.querySelector("select.only");
    var count = wrap.querySelector(".count");
    var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
    function filter() {
      var words = box.value.toLowerCase().trim();
      var column = only ? parseInt(only.getAttribute("data-column"), 10) : -1;
      var wanted = only ? only.value : "";
      var rows = items(table);
      var shown = 0;
      rows.forEach(function (row) {
        var ok = (!words || row.textContent.toLowerCase().indexOf(words) >= 0) &&
          (!wanted || (row.cells[column] && row.cells[column].textContent === wanted));
        row.hidden = !ok;
        setOpen(row, row.classList.contains("open"));
        if (ok) shown += 1;
      });
      count.textContent = "showing " + shown + " of " + rows.length;
    }
    function sortBy(column) {
      var head = heads[column];
      var numeric = head.getAttribute("data-type") === "num";
      var direction = head.getAttribute("aria-sort") === "ascending" ? -1 : 1;
      heads.forEach(function (h) { h.setAttribute("aria-sort", "none"); });
      head.setAttribute("aria-sort", direction > 0 ? "ascending" : "descending");
      var pairs = items(table).map(function (row) { return [row, detailOf(row)]; });
      pairs.sort(function (a, b) {
        var x = sortKey(a[0], column, numeric), y = sortKey(b[0], column, numeric);
        return x < y ? -direction : x > y ? direction : 0;
      });
      var body = table.tBodies[0];
      pairs.forEach(function (p) {
        body.appendChild(p[0]);
        if (p[1]) body.appendChild(p[1]);
      });
    }
    heads.forEach(function (head, column) {
      head.setAttribute("aria-sort", "none");
      head.tabIndex = 0;
      head.addEventListener("click", function () { sortBy(column); });
      head.addEventListener("keydown", function (e) {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortBy(column); }
      });
    });
    items(table).forEach(function (row) {
      if (!detailOf(row)) return;
      row.tabIndex = 0;
      row.setAttribute("aria-expanded", "false");
      function toggle() { setOpen(row, !row.classList.contains("open")); }
      row.addEventListener("click", toggle);
      row.addEventListener("keydown", function (e) {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); toggle(); }
      });
    });
    box.addEventListener("input", filter);
    if (only) only.addEventListener("change", filter);
    return { table: table, box: box, filter: filter };
  }
  var tables = Array.prototype.map.call(document.querySelectorAll("div.table"), setUp);
  var params = new URLSearchParams(location.hash.slice(1));
  tables.forEach(function (t) {
    if (params.has("q")) t.box.value = params.get("q");
    var open = params.get("open");
    if (open) {
      items(t.table).forEach(function (row) {
        if (open === "all" || row.getAttribute("data-id") === open) setOpen(row, true);
      });
    }
    t.filter();
  });
})();
