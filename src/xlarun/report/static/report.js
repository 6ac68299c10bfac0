// xlarun report: sortable and filterable tables, the "only changed steps" switch, fit-to-width graphs.
// Plain DOM code, no libraries, nothing loaded from the network.
"use strict";

function cellKey(row, column) {
  const cell = row.cells[column];
  if (!cell) return "";
  const raw = (cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent).trim();
  const number = Number(raw);
  return raw !== "" && !Number.isNaN(number) ? number : raw.toLowerCase();
}

function compareKeys(a, b) {
  if (typeof a === typeof b) return a < b ? -1 : a > b ? 1 : 0;
  if (a === "") return 1; // blanks last
  if (b === "") return -1;
  return typeof a === "number" ? -1 : 1;
}

function sortTable(table, column, header) {
  const ascending = header.getAttribute("aria-sort") !== "ascending";
  for (const other of header.parentNode.cells) other.removeAttribute("aria-sort");
  header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  const body = table.tBodies[0];
  const rows = Array.from(body.rows);
  rows.sort((x, y) => {
    const order = compareKeys(cellKey(x, column), cellKey(y, column));
    return ascending ? order : -order;
  });
  for (const row of rows) body.appendChild(row);
}

function filterTable(input) {
  const table = document.getElementById(input.dataset.filterTable);
  if (!table) return;
  const words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
  let shown = 0;
  const rows = table.tBodies[0].rows;
  for (const row of rows) {
    const text = row.textContent.toLowerCase();
    const match = words.every((word) => text.includes(word));
    row.classList.toggle("filtered-out", !match);
    if (match) shown += 1;
  }
  const counter = document.getElementById(input.dataset.filterCount);
  if (counter) counter.textContent = words.length ? `${shown} of ${rows.length} shown` : `${rows.length}`;
}

document.addEventListener("DOMContentLoaded", () => {
  for (const table of document.querySelectorAll("table.sortable")) {
    if (!table.tHead) continue;
    Array.from(table.tHead.rows[0].cells).forEach((header, column) => {
      header.tabIndex = 0;
      header.title = "sort by this column";
      header.addEventListener("click", () => sortTable(table, column, header));
      header.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          sortTable(table, column, header);
        }
      });
    });
  }
  for (const input of document.querySelectorAll("input[data-filter-table]")) {
    input.addEventListener("input", () => filterTable(input));
  }
  const onlyChanged = document.getElementById("only-changed");
  if (onlyChanged) {
    onlyChanged.addEventListener("change", () => {
      document.body.classList.toggle("only-changed", onlyChanged.checked);
    });
  }
  for (const button of document.querySelectorAll("button.fit")) {
    button.addEventListener("click", () => {
      const block = button.closest("figure");
      const fitted = block.classList.toggle("fitted");
      button.textContent = fitted ? "actual size" : "fit to width";
    });
  }
  // opening a link to a diff opens its <details>
  const openTarget = () => {
    const target = location.hash && document.getElementById(decodeURIComponent(location.hash.slice(1)));
    if (target && target.tagName === "DETAILS") target.open = true;
  };
  window.addEventListener("hashchange", openTarget);
  openTarget();
});
