// zkcron's dashboard: refreshes the page's tables, sorts and filters them, and sends the
// operator's changes with the admin token (kept in this tab's sessionStorage only). The pages
// work without it: the server renders every table and filters with ?q=.
"use strict";
(function () {
  const REFRESH_MS = 5000;
  const sorted = {}; // table id -> [column index, ascending]

  function cellText(row, i) {
    const cell = row.cells[i];
    return cell ? (cell.dataset.sort || cell.textContent.trim()) : "";
  }

  function sortTable(table, column, ascending) {
    const body = table.tBodies[0];
    if (!body) return;
    const rows = Array.from(body.rows);
    rows.sort((a, b) => {
      const x = cellText(a, column), y = cellText(b, column);
      const order = x.localeCompare(y, undefined, { numeric: true });
      return ascending ? order : -order;
    });
    rows.forEach((row) => body.appendChild(row));
    table.querySelectorAll("thead th").forEach((th, i) => {
      if (i === column) th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
      else th.removeAttribute("aria-sort");
    });
    sorted[table.id] = [column, ascending];
  }

  function makeSortable(table) {
    table.querySelectorAll("thead th").forEach((th, i) => {
      if (th.querySelector("button")) return;
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = th.textContent;
      button.title = "Sort by " + th.textContent;
      th.textContent = "";
      th.appendChild(button);
      button.addEventListener("click", () => {
        const [column, ascending] = sorted[table.id] || [-1, false];
        sortTable(table, i, column === i ? !ascending : true);
      });
    });
    const again = sorted[table.id];
    if (again) sortTable(table, again[0], again[1]);
  }

  function applyFilter() {
    const input = document.getElementById("filter");
    if (!input) return;
    const words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
    document.querySelectorAll("table[data-filterable] tbody tr").forEach((row) => {
      const text = row.textContent.toLowerCase();
      row.hidden = !words.every((w) => text.includes(w));
    });
  }

  function enhance() {
    document.querySelectorAll("table[id]").forEach(makeSortable);
    applyFilter();
  }

  // Replaces the refreshable part of the page with the server's current one.
  async function refresh() {
    // Only a page with a refreshable part (not a run's page, which streams its output).
    if (document.hidden || !document.getElementById("live")) return;
    try {
      const response = await fetch(location.pathname + location.search, { headers: { Accept: "text/html" } });
      if (!response.ok) return;
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = page.getElementById("live");
      const live = document.getElementById("live");
      if (fresh && live) {
        live.replaceWith(fresh);
        enhance();
        const stamp = document.getElementById("refreshed");
        if (stamp) stamp.textContent = "updated " + new Date().toLocaleTimeString();
      }
    } catch (e) {
      // The node is restarting or unreachable: the next refresh tries again.
    }
  }

  function token() {
    let t = sessionStorage.getItem("zkcron-admin-token");
    if (!t) {
      const input = document.getElementById("token");
      t = input ? input.value.trim() : "";
      if (t) sessionStorage.setItem("zkcron-admin-token", t);
    }
    return t;
  }

  async function act(form, submitter) {
    const out = document.getElementById("action-result");
    const body = {};
    const reason = form.querySelector("[name=reason]");
    if (submitter.value === "pause" && reason && reason.value.trim()) body.reason = reason.value.trim();
    if (submitter.value === "backfill") {
      // An empty bound is left out, so that the API says which one is missing.
      for (const key of ["from", "to"]) {
        const value = form.querySelector("[name=" + key + "]").value.trim();
        if (value) body[key] = value;
      }
    }
    const t = token();
    if (!t) {
      out.textContent = "Enter the admin token first.";
      document.getElementById("token").focus();
      return;
    }
    const response = await fetch(form.dataset.api + "/" + submitter.value, {
      method: "POST",
      headers: { "Content-Type": "application/json", Authorization: "Bearer " + t },
      body: JSON.stringify(body),
    });
    const answer = await response.json().catch(() => ({ error: "no JSON answer" }));
    if (response.status === 401) sessionStorage.removeItem("zkcron-admin-token");
    out.textContent = response.ok
      ? answer.message + (answer.note ? " (" + answer.note + ")" : "")
      : "Refused (" + response.status + "): " + answer.error;
    out.className = response.ok ? "ok" : "bad";
    refresh();
  }

  // A run's page: reads the run's output with the token and writes it as text (never as
  // markup), streaming it while the run goes on (?follow=1).
  async function showOutput(form) {
    const state = document.getElementById("output-state");
    const pre = document.getElementById("output");
    const t = token();
    if (!t) {
      state.textContent = "Enter the token first.";
      document.getElementById("token").focus();
      return;
    }
    pre.textContent = "";
    // A second click stops the first stream: one stream writes into the page.
    if (showOutput.running) showOutput.running.abort();
    const running = new AbortController();
    showOutput.running = running;
    const response = await fetch(form.dataset.api + "&follow=1", {
      headers: { Authorization: "Bearer " + t },
      signal: running.signal,
    });
    if (!response.ok) {
      const answer = await response.json().catch(() => ({ error: "no JSON answer" }));
      if (response.status === 401) sessionStorage.removeItem("zkcron-admin-token");
      state.textContent = "Refused (" + response.status + "): " + answer.error;
      state.className = "bad";
      return;
    }
    const stored = response.headers.get("x-zkcron-run") === "stored";
    state.textContent = stored
      ? "The node that ran it cannot be asked: the last lines stored with its failure."
      : "Running: the output streams in.";
    state.className = "muted";
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let partial = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      partial += decoder.decode(value, { stream: true });
      const lines = partial.split("\n");
      partial = lines.pop();
      for (const line of lines) record(line, pre, state);
    }
  }

  // One record of a kept output (`<ms> <kind> <text>`), shown as text.
  function record(line, pre, state) {
    // [\s\S]: a line may hold a carriage return (progress bars) or U+2028.
    const m = /^(-?\d+) (\w)(?: ([\s\S]*))?$/.exec(line);
    if (!m) return;
    const at = new Date(Number(m[1])).toISOString();
    const text = m[3] || "";
    const add = (cls, t) => {
      const span = document.createElement("span");
      span.className = cls;
      span.textContent = t + "\n";
      pre.appendChild(span);
    };
    if (m[2] === "o") add("out", text);
    else if (m[2] === "e") add("err", text);
    else if (m[2] === "a" && text !== "1") add("mark", "--- attempt " + text + " ---");
    else if (m[2] === "c") add("mark", "…[" + text.replace(" ", " lines, ") + " bytes cut here: past [log] output_limit]");
    else if (m[2] === "x") {
      state.textContent = state.textContent.startsWith("The node that ran it") ? state.textContent + " " + text : "Ended at " + at + ": " + text;
      state.className = "ok";
    }
    else if (m[2] === "i") { state.textContent = "Incomplete: the node stopped before the run ended."; state.className = "bad"; }
  }

  document.addEventListener("DOMContentLoaded", () => {
    const outputForm = document.getElementById("output-form");
    if (outputForm) {
      outputForm.hidden = false;
      outputForm.addEventListener("submit", (event) => {
        event.preventDefault();
        showOutput(outputForm);
      });
      if (sessionStorage.getItem("zkcron-admin-token")) showOutput(outputForm);
    }
    enhance();
    const input = document.getElementById("filter");
    if (input) input.addEventListener("input", applyFilter);
    const forget = document.getElementById("forget-token");
    if (forget) forget.addEventListener("click", () => {
      sessionStorage.removeItem("zkcron-admin-token");
      document.getElementById("token").value = "";
    });
    document.querySelectorAll("form.actions").forEach((form) => {
      form.hidden = false;
      form.addEventListener("submit", (event) => {
        event.preventDefault();
        act(form, event.submitter);
      });
    });
    setInterval(refresh, REFRESH_MS);
  });
})();
