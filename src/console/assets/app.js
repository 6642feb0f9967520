// loghaul console: search, live tail and pipeline health, over the JSON API on the same origin.
// Plain JavaScript, no build step and no dependencies. Every record field reaches the page
// through textContent, never as HTML.
"use strict";

(() => {
  const KEY_STORAGE = "loghaul.key";
  const TAIL_MAX_ROWS = 5000; // the tail keeps this many rows and drops the oldest
  const HEALTH_EVERY_MS = 2000;
  const HEALTH_KEEP_MS = 5 * 60 * 1000; // the charts show the last five minutes
  const TAIL_RETRY_MS = 2000;
  const FILTER_KEYS = ["since", "from", "to", "service", "min_severity", "contains", "attr"];
  const SEVERITIES = [
    [21, "FATAL", "fatal"], [17, "ERROR", "error"], [13, "WARN", "warn"],
    [9, "INFO", "info"], [5, "DEBUG", "debug"], [1, "TRACE", "trace"],
  ];

  const $ = (id) => document.getElementById(id);
  const el = (tag, className, text) => {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  };

  const state = {
    key: sessionStorage.getItem(KEY_STORAGE),
    tenant: null,
    open: false,
    view: null,
    search: { params: null, cursor: "", loading: false, generation: 0, volume: null },
    tail: { controller: null, paused: false, cursor: "", stick: true, unseen: 0, retry: null, count: 0 },
    health: { timer: null, samples: [] },
  };

  // ---- API ---------------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  function headers() {
    return state.key ? { "x-api-key": state.key } : {};
  }

  // A 401 anywhere but the login check means the key stopped working (revoked, reloaded away):
  // back to the login form with the server's reason.
  async function api(path, params, { loginCheck = false } = {}) {
    const url = params && [...params].length ? `${path}?${params}` : path;
    let response;
    try {
      response = await fetch(url, { headers: headers(), cache: "no-store" });
    } catch (err) {
      throw new ApiError(0, "Cannot reach the server: " + err.message);
    }
    let body = null;
    try { body = await response.json(); } catch (_) { /* not JSON */ }
    if (!response.ok) {
      const reason = body && body.error ? body.error : `HTTP ${response.status}`;
      if (response.status === 401 && !loginCheck) loggedOut(reason);
      throw new ApiError(response.status, reason);
    }
    return body;
  }

  // ---- Session -----------------------------------------------------------------------------

  async function checkSession(key) {
    const saved = state.key;
    state.key = key;
    try {
      const session = await api("/api/v1/session", null, { loginCheck: true });
      state.tenant = session.tenant;
      state.open = session.open;
      if (key) sessionStorage.setItem(KEY_STORAGE, key);
      return null;
    } catch (err) {
      state.key = saved;
      return err;
    }
  }

  function loggedOut(reason) {
    stopTail();
    stopHealth();
    state.key = null;
    state.tenant = null;
    sessionStorage.removeItem(KEY_STORAGE);
    $("login-error").textContent = reason ? `The server refused the key: ${reason}.` : "";
    showLogin();
  }

  function showLogin() {
    for (const id of ["view-search", "view-tail", "view-health", "filters", "nav", "logout", "keys-help"]) {
      $(id).hidden = true;
    }
    $("who").textContent = "";
    $("view-login").hidden = false;
    $("login-key").focus();
  }

  $("login-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const key = $("login-key").value.trim();
    if (!key) return;
    $("login-error").textContent = "";
    const err = await checkSession(key);
    if (err) {
      sessionStorage.removeItem(KEY_STORAGE);
      $("login-error").textContent = err.status === 401
        ? `The server refused this key: ${err.message}. Check it and try again.`
        : err.message;
      $("login-key").select();
      return;
    }
    $("login-key").value = "";
    enter();
  });

  $("logout").addEventListener("click", () => {
    loggedOut(null);
    $("login-error").textContent = "";
  });

  function enter() {
    $("view-login").hidden = true;
    $("nav").hidden = false;
    $("logout").hidden = state.open;
    $("who").textContent = state.open
      ? "open service (no API keys): tenant default"
      : `tenant ${state.tenant}`;
    route();
  }

  // ---- Routing: #/view?filters -------------------------------------------------------------

  function parseHash() {
    const hash = location.hash.replace(/^#\/?/, "");
    const [view, query] = hash.split("?");
    const known = ["search", "tail", "health"];
    return { view: known.includes(view) ? view : "search", params: new URLSearchParams(query || "") };
  }

  function route() {
    if (!state.tenant) return;
    const { view, params } = parseHash();
    const bounded = ["since", "from", "to", "all"].some((key) => params.has(key));
    if (view === "search" && !bounded) params.set("since", "1h");
    const changed = view !== state.view;
    if (changed) leave(state.view);
    state.view = view;
    for (const name of ["search", "tail", "health"]) {
      $(`view-${name}`).hidden = name !== view;
      const link = $(`nav-${name}`);
      if (name === view) link.setAttribute("aria-current", "page"); else link.removeAttribute("aria-current");
    }
    $("filters").hidden = view === "health";
    $("keys-help").hidden = view === "health";
    $("range-field").hidden = view !== "search";
    $("size-field").hidden = view !== "search";
    $("f-submit").textContent = view === "tail" ? "Follow" : "Search";
    // The range pickers live in the search view only; the tail always starts from now.
    showRange(view === "search" && $("f-range").value === "custom");
    formFromParams(params);
    // Switching views keeps the filters (the tail has no time range: it starts from now).
    const filters = new URLSearchParams(params);
    $("nav-search").href = `#/search?${filters}`;
    for (const key of ["since", "from", "to", "all", "size"]) filters.delete(key);
    $("nav-tail").href = `#/tail?${filters}`;
    document.title = `loghaul · ${view}`;
    if (view === "search") runSearch(params);
    if (view === "tail") startTail(params, true);
    if (view === "health") startHealth();
    if (changed) $(`${view}-title`).focus();
  }

  function leave(view) {
    if (view === "tail") stopTail();
    if (view === "health") stopHealth();
  }

  window.addEventListener("hashchange", route);

  // ---- Filter form <-> URL -----------------------------------------------------------------

  function toLocalInput(iso) {
    // datetime-local takes "YYYY-MM-DDTHH:MM:SS"; the console works in UTC throughout.
    const date = new Date(iso);
    return isNaN(date) ? "" : date.toISOString().slice(0, 19);
  }

  function showRange(custom) {
    $("from-field").hidden = !custom;
    $("to-field").hidden = !custom;
  }

  function formFromParams(params) {
    const since = params.get("since");
    const custom = params.has("from") || params.has("to");
    $("f-range").value = custom ? "custom" : (since !== null ? since : (params.has("all") ? "" : "1h"));
    if ($("f-range").selectedIndex < 0) $("f-range").value = "1h";
    $("f-from").value = params.has("from") ? toLocalInput(params.get("from")) : "";
    $("f-to").value = params.has("to") ? toLocalInput(params.get("to")) : "";
    showRange(state.view === "search" && $("f-range").value === "custom");
    $("f-services").value = params.getAll("service").join(", ");
    $("f-severity").value = params.get("min_severity") || "";
    if ($("f-severity").selectedIndex < 0) $("f-severity").value = "";
    $("f-contains").value = params.get("contains") || "";
    $("f-size").value = params.get("size") || "100";
    if ($("f-size").selectedIndex < 0) $("f-size").value = "100";
    const attrs = $("f-attrs");
    attrs.replaceChildren();
    for (const pair of params.getAll("attr")) {
      const at = pair.indexOf("=");
      addAttr(at < 0 ? pair : pair.slice(0, at), at < 0 ? "" : pair.slice(at + 1));
    }
  }

  function paramsFromForm() {
    const params = new URLSearchParams();
    const range = $("f-range").value;
    if (state.view === "search") {
      if (range === "custom") {
        // The inputs hold UTC wall-clock times.
        if ($("f-from").value) params.set("from", new Date($("f-from").value + "Z").toISOString());
        if ($("f-to").value) params.set("to", new Date($("f-to").value + "Z").toISOString());
      } else if (range) {
        params.set("since", range);
      } else {
        params.set("all", "1");
      }
    }
    for (const service of $("f-services").value.split(",").map((s) => s.trim()).filter(Boolean)) {
      params.append("service", service);
    }
    if ($("f-severity").value) params.set("min_severity", $("f-severity").value);
    if ($("f-contains").value) params.set("contains", $("f-contains").value);
    for (const row of $("f-attrs").children) {
      const [key, value] = row.querySelectorAll("input");
      if (key.value) params.append("attr", `${key.value}=${value.value}`);
    }
    if (state.view === "search" && $("f-size").value !== "100") params.set("size", $("f-size").value);
    return params;
  }

  let attrCount = 0;
  function addAttr(key, value) {
    const n = ++attrCount;
    const row = el("span", "attr");
    const keyInput = el("input");
    keyInput.placeholder = "key";
    keyInput.value = key || "";
    keyInput.setAttribute("aria-label", `Attribute ${n} key`);
    const valueInput = el("input");
    valueInput.placeholder = "value";
    valueInput.value = value || "";
    valueInput.setAttribute("aria-label", `Attribute ${n} value`);
    const remove = el("button", "quiet", "×");
    remove.type = "button";
    remove.setAttribute("aria-label", `Remove attribute ${n}`);
    remove.addEventListener("click", () => { row.remove(); $("f-add-attr").focus(); });
    row.append(keyInput, el("span", null, "="), valueInput, remove);
    $("f-attrs").append(row);
    return keyInput;
  }

  $("f-add-attr").addEventListener("click", () => addAttr("", "").focus());
  $("f-range").addEventListener("change", () => showRange($("f-range").value === "custom"));
  $("filters").addEventListener("submit", (event) => {
    event.preventDefault();
    const target = `#/${state.view}?${paramsFromForm()}`;
    // The same URL again (a refresh of the search, a tail restarted) does not fire hashchange.
    if (location.hash === target) route(); else location.hash = target;
  });

  // The API parameters of a view's URL: filters only, `since` resolved once so that every page
  // of one search shares the same lower bound.
  function apiParams(params) {
    const out = new URLSearchParams();
    for (const [key, value] of params) {
      if (FILTER_KEYS.includes(key)) out.append(key, value);
    }
    return out;
  }

  // ---- Rows ----------------------------------------------------------------------------------

  function severityOf(number) {
    for (const [floor, name, cls] of SEVERITIES) {
      if (number >= floor) return [name, cls];
    }
    return ["-", "unset"];
  }

  function displayTime(iso) {
    // "2026-11-29T10:00:00.000500Z" → "2026-11-29 10:00:00.000500"
    return iso ? iso.replace("T", " ").replace("Z", "") : "";
  }

  // One record's row. Built from elements and text nodes only; the attributes are rendered when
  // the row is opened, so 10,000 closed rows cost five small elements each.
  function buildRow(record) {
    const [name, cls] = severityOf(record.severity);
    const row = el("div", `row rec sev-${cls}`);
    row.setAttribute("role", "row");
    row.tabIndex = -1;
    row.setAttribute("aria-expanded", "false");
    row._record = record;
    const time = el("span", "t", displayTime(record.ts));
    time.setAttribute("role", "cell");
    time.title = record.ts;
    const sev = el("span", "sev", name);
    sev.setAttribute("role", "cell");
    sev.title = `severity ${record.severity}`;
    const svc = el("span", "svc", record.service);
    svc.setAttribute("role", "cell");
    const msg = el("span", "msg", record.message);
    msg.setAttribute("role", "cell");
    const keys = Object.keys(record.attributes || {});
    if (keys.length) {
      const preview = keys.slice(0, 4).map((k) => `${k}=${record.attributes[k]}`).join(" ");
      msg.append(el("span", "attrs-preview", keys.length > 4 ? `${preview} …` : preview));
    }
    row.append(time, sev, svc, msg);
    return row;
  }

  function buildDetail(record) {
    const box = el("div", "detail");
    box.setAttribute("role", "cell");
    const list = el("dl");
    const add = (term, value) => { list.append(el("dt", null, term), el("dd", null, value)); };
    const keys = Object.keys(record.attributes || {}).sort();
    list.append(el("div", "section", keys.length ? `Attributes (${keys.length})` : "No attributes"));
    for (const key of keys) add(key, record.attributes[key]);
    list.append(el("div", "section", "Record"));
    add("message", record.message);
    add("timestamp", record.ts);
    add("received_at", record.received_at || "");
    add("severity", `${record.severity} (${severityOf(record.severity)[0]})`);
    add("service", record.service);
    add("trace_id", record.trace_id || "—");
    add("span_id", record.span_id || "—");
    add("cursor", record.cursor);
    box.append(list);
    // Selecting text in the details must not close the row.
    box.addEventListener("click", (event) => event.stopPropagation());
    return box;
  }

  function toggle(row) {
    const open = row.getAttribute("aria-expanded") === "true";
    if (open) {
      row.querySelector(".detail").remove();
      row.setAttribute("aria-expanded", "false");
    } else {
      row.append(buildDetail(row._record));
      row.setAttribute("aria-expanded", "true");
    }
  }

  function appendRows(container, records) {
    const fragment = document.createDocumentFragment();
    for (const record of records) fragment.append(buildRow(record));
    container.append(fragment);
    ensureRovingStop(container);
  }

  // One row of each table is in the tab order (roving tabindex); arrows move between rows.
  function ensureRovingStop(container) {
    if (container.querySelector('.rec[tabindex="0"]')) return;
    const first = container.querySelector(".rec");
    if (first) first.tabIndex = 0;
  }

  function focusRow(container, row) {
    if (!row) return;
    const current = container.querySelector('.rec[tabindex="0"]');
    if (current) current.tabIndex = -1;
    row.tabIndex = 0;
    row.focus();
  }

  function wireRows(container) {
    container.addEventListener("click", (event) => {
      const row = event.target.closest(".rec");
      if (!row) return;
      focusRow(container, row);
      toggle(row);
    });
    container.addEventListener("keydown", (event) => {
      const row = event.target.closest(".rec");
      if (!row || event.target !== row) return;
      const moves = {
        ArrowDown: () => row.nextElementSibling, j: () => row.nextElementSibling,
        ArrowUp: () => row.previousElementSibling, k: () => row.previousElementSibling,
        Home: () => container.firstElementChild, End: () => container.lastElementChild,
      };
      if (event.key === "Enter" || event.key === " ") {
        event.preventDefault();
        toggle(row);
      } else if (moves[event.key]) {
        event.preventDefault();
        focusRow(container, moves[event.key]());
      }
    });
  }

  wireRows($("search-rows"));
  wireRows($("tail-rows"));

  // ---- Search ----------------------------------------------------------------------------------

  async function runSearch(params) {
    const search = state.search;
    const query = apiParams(params);
    if (query.has("since")) {
      const since = query.get("since");
      query.delete("since");
      const from = resolveSince(since);
      if (from) query.set("from", from); else query.set("since", since); // let the server explain
    }
    const volumeQuery = new URLSearchParams(query);
    query.set("page_size", params.get("size") || "100");
    // A new search replaces one still in flight; the older answer is dropped when it arrives.
    search.generation += 1;
    search.loading = false;
    search.params = query;
    search.cursor = "";
    $("search-rows").replaceChildren();
    $("search-error").textContent = "";
    $("load-older").hidden = true;
    const generation = search.generation;
    $("volume").setAttribute("aria-busy", "true");
    // The histogram is read after the first page, not beside it: a search then holds one of the
    // tenant's read slots at a time (--max-concurrent-reads-per-tenant), and a filter the page
    // refused is not refused twice.
    if (await loadPage(true)) await loadVolume(volumeQuery, generation);
    else if (generation === search.generation) showVolume(null);
  }

  function resolveSince(text) {
    const match = /^(\d+)(s|m|h|d)$/.exec(text);
    if (!match) return null;
    const unit = { s: 1e3, m: 60e3, h: 3600e3, d: 86400e3 }[match[2]];
    return new Date(Date.now() - Number(match[1]) * unit).toISOString();
  }

  // One page of the search; true when it arrived and is shown.
  async function loadPage(first) {
    const search = state.search;
    if (search.loading) return false; // "Load older" pressed twice
    const generation = search.generation;
    search.loading = true;
    $("search-status").textContent = "Searching…";
    const query = new URLSearchParams(search.params);
    if (search.cursor) query.set("cursor", search.cursor);
    const started = performance.now();
    try {
      const page = await api("/api/v1/logs", query);
      if (generation !== search.generation) return false;
      if (first && page.records.length === 0) {
        $("search-rows").replaceChildren(el("div", "empty", "No records match these filters."));
      } else {
        appendRows($("search-rows"), page.records);
      }
      search.cursor = page.next_cursor;
      const shown = $("search-rows").querySelectorAll(".rec").length;
      const took = Math.round(performance.now() - started);
      // A search without a start is bounded by the server; say so rather than let "all" mislead.
      const bounded = page.default_from ? `; searched from ${page.default_from} on (the server's default range: pick a range to go further back)` : "";
      $("search-status").textContent =
        `${shown} record${shown === 1 ? "" : "s"}${page.next_cursor ? ", more older" : ", all shown"} (${took} ms)${bounded}`;
      $("load-older").hidden = !page.next_cursor;
      return true;
    } catch (err) {
      if (generation !== search.generation) return false;
      $("search-status").textContent = "";
      if (err.status !== 401) $("search-error").textContent = err.message;
      return false;
    } finally {
      if (generation === search.generation) search.loading = false;
    }
  }

  $("load-older").addEventListener("click", () => loadPage(false));

  // ---- Volume histogram ----------------------------------------------------------------------
  //
  // Records per time bucket and level over the search's range, from the server's per-minute
  // volume rollup (/api/v1/volume). Drawn in the SVG's own pixels, redrawn when the window
  // resizes, so that its text is never stretched.

  // Stacked bottom to top: the most severe on the baseline, where bars compare best.
  const VOLUME_LEVELS = ["fatal", "error", "warn", "info", "debug", "trace", "unknown"];
  const LEVEL_LABELS = { unknown: "no severity" };
  const VOLUME_HEIGHT = 150;
  const VOLUME_MARGIN = { left: 58, right: 12, top: 10, bottom: 36 };
  const NOT_APPLIED = { contains: "message text", attr: "attributes" };

  async function loadVolume(query, generation) {
    const search = state.search;
    try {
      const volume = await api("/api/v1/volume", query);
      if (generation !== search.generation) return;
      showVolume(volume);
    } catch (err) {
      if (generation !== search.generation) return;
      showVolume(null);
      if (err.status !== 401) {
        $("volume").hidden = false;
        $("volume-error").textContent = `No histogram: ${err.message}`;
      }
    }
  }

  function showVolume(volume) {
    const figure = $("volume");
    state.search.volume = volume;
    figure.removeAttribute("aria-busy");
    $("volume-error").textContent = "";
    figure.hidden = !volume;
    if (!volume) {
      $("volume-chart").replaceChildren();
      delete figure.dataset.total;
      return;
    }
    const words = bucketWords(volume.bucket_seconds);
    $("volume-title").textContent = `Records per ${words}, by level`;
    const present = VOLUME_LEVELS.filter((level) => volume.buckets.some((b) => b.counts[level]));
    $("volume-legend").replaceChildren(...present.flatMap((level) =>
      [el("i", `lv-${level}`), document.createTextNode(`${LEVEL_LABELS[level] || level} `)]));
    const note = $("volume-note");
    note.hidden = !volume.not_applied.length;
    if (volume.not_applied.length) {
      const skipped = volume.not_applied.map((name) => NOT_APPLIED[name] || name).join(" and ");
      note.replaceChildren(el("strong", null, `Not filtered by ${skipped}: `),
        document.createTextNode("the histogram counts every record of these services and severities in the range; the per-minute volume rollup it is read from keeps no message or attributes."));
    }
    figure.dataset.total = String(volume.total);
    figure.dataset.bucket = volume.bucket;
    figure.dataset.buckets = String(volume.buckets.length);
    figure.dataset.partial = String(volume.not_applied.length > 0);
    drawVolume();
  }

  function bucketWords(seconds) {
    for (const [size, unit] of [[86400, "day"], [3600, "hour"], [60, "minute"]]) {
      if (seconds % size === 0) {
        const n = seconds / size;
        return n === 1 ? unit : `${n} ${unit}s`;
      }
    }
    return `${seconds} seconds`;
  }

  // 1, 2 or 5 times a power of ten, at least `value`.
  function niceCeiling(value) {
    if (value <= 1) return 1;
    const power = 10 ** Math.floor(Math.log10(value));
    return [1, 2, 5, 10].map((step) => step * power).find((top) => top >= value);
  }

  const utc = (iso) => new Date(iso).toISOString();

  function spanText(startIso, endIso) {
    const start = utc(startIso);
    const end = utc(endIso);
    if (start.slice(11, 19) === "00:00:00" && end.slice(11, 19) === "00:00:00") {
      return `${start.slice(0, 10)} – ${end.slice(0, 10)}`;
    }
    const sameDay = start.slice(0, 10) === end.slice(0, 10);
    return `${start.slice(0, 10)} ${start.slice(11, 16)}–${sameDay ? "" : end.slice(0, 10) + " "}${end.slice(11, 16)}`;
  }

  function bucketText(bucket) {
    const levels = VOLUME_LEVELS.filter((level) => bucket.counts[level])
      .map((level) => `${LEVEL_LABELS[level] || level} ${number(bucket.counts[level])}`);
    const total = `${number(bucket.total)} record${bucket.total === 1 ? "" : "s"}`;
    return `${spanText(bucket.start, bucket.end)} UTC · ${total}${levels.length ? ` (${levels.join(", ")})` : ""}`;
  }

  function summaryText(volume) {
    return `${number(volume.total)} record${volume.total === 1 ? "" : "s"} from ${spanText(volume.from, volume.to)} UTC`;
  }

  function tickLabel(ms, bucketSeconds, spanMs) {
    const iso = new Date(ms).toISOString();
    if (bucketSeconds >= 86400) return iso.slice(0, 10);
    if (spanMs > 86400e3) return `${iso.slice(5, 10)} ${iso.slice(11, 16)}`;
    return iso.slice(11, 16);
  }

  function svgNode(tag, attributes, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [name, value] of Object.entries(attributes || {})) node.setAttribute(name, String(value));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function drawVolume() {
    const volume = state.search.volume;
    const svg = $("volume-chart");
    if (!volume) return;
    const width = Math.max(320, Math.round(svg.getBoundingClientRect().width) || 800);
    const height = VOLUME_HEIGHT;
    const m = VOLUME_MARGIN;
    const plotWidth = width - m.left - m.right;
    const plotHeight = height - m.top - m.bottom;
    const bottom = m.top + plotHeight;
    svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
    const buckets = volume.buckets;
    const top = niceCeiling(Math.max(0, ...buckets.map((b) => b.total)));
    const y = (count) => bottom - (count / top) * plotHeight;
    const band = plotWidth / Math.max(1, buckets.length);
    const gap = band >= 6 ? Math.max(1, band * 0.15) : 0;
    const nodes = [];

    // The count axis: 0, the middle when it is a whole number, the top.
    const ticks = top % 2 === 0 ? [0, top / 2, top] : [0, top];
    for (const tick of ticks) {
      nodes.push(svgNode("line", { class: "grid", x1: m.left, x2: width - m.right, y1: y(tick), y2: y(tick) }));
      nodes.push(svgNode("text", { x: m.left - 6, y: y(tick) + 4, "text-anchor": "end" }, number(tick)));
    }
    const middle = m.top + plotHeight / 2;
    nodes.push(svgNode("text", { class: "axis-title", x: 12, y: middle, "text-anchor": "middle",
      transform: `rotate(-90 12 ${middle})` }, "records"));

    // The time axis: a label every k buckets, on multiples of k so that labels fall on round times.
    const bucketMs = volume.bucket_seconds * 1000;
    const spanMs = new Date(volume.to) - new Date(volume.from);
    const every = [1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 24, 30, 60, 120].find((k) => k * band >= 78) || 120;
    nodes.push(svgNode("line", { class: "axis-line", x1: m.left, x2: width - m.right, y1: bottom, y2: bottom }));
    buckets.forEach((bucket, i) => {
      const startMs = new Date(bucket.start).getTime();
      if (Math.round(startMs / bucketMs) % every !== 0) return;
      const x = m.left + i * band;
      if (x > width - m.right - 24) return;
      nodes.push(svgNode("line", { class: "axis-line", x1: x, x2: x, y1: bottom, y2: bottom + 4 }));
      nodes.push(svgNode("text", { x, y: bottom + 16, "text-anchor": "middle" }, tickLabel(startMs, volume.bucket_seconds, spanMs)));
    });
    nodes.push(svgNode("text", { class: "axis-title", x: width - m.right, y: height - 3, "text-anchor": "end" }, "time (UTC)"));

    // The bars: one group per bucket, empty ones too (a click there still narrows the range).
    buckets.forEach((bucket, i) => {
      const x = m.left + i * band;
      const group = svgNode("g", { class: "bucket", "data-index": i, "data-start": bucket.start,
        "data-end": bucket.end, "data-count": bucket.total });
      group.append(svgNode("rect", { class: "hit", x, y: m.top, width: band, height: plotHeight }));
      let below = 0;
      for (const level of VOLUME_LEVELS) {
        const count = bucket.counts[level] || 0;
        if (!count) continue;
        // At least a pixel: a level with a few records among many still shows.
        const segment = Math.max(1, y(below) - y(below + count));
        group.append(svgNode("rect", { class: `lv-${level}`, "data-level": level, "data-count": count,
          x: x + gap / 2, y: y(below) - segment, width: Math.max(1, band - gap), height: segment }));
        below += count;
      }
      group.append(svgNode("title", null, `${bucketText(bucket)}\nClick to search this range`));
      nodes.push(group);
    });
    if (!volume.total) {
      nodes.push(svgNode("text", { class: "empty-text", x: m.left + plotWidth / 2, y: middle, "text-anchor": "middle" },
        "No records in this range"));
    }
    svg.replaceChildren(...nodes);
    svg.setAttribute("aria-label", `Records per ${bucketWords(volume.bucket_seconds)} by level: ${summaryText(volume)}`);
    $("volume-readout").textContent = summaryText(volume);
  }

  function currentBucket() {
    return $("volume-chart").querySelector(".bucket.current");
  }

  function pointAt(group) {
    const previous = currentBucket();
    if (previous) previous.classList.remove("current");
    if (!group) {
      if (state.search.volume) $("volume-readout").textContent = summaryText(state.search.volume);
      return;
    }
    group.classList.add("current");
    $("volume-readout").textContent = bucketText(state.search.volume.buckets[Number(group.dataset.index)]);
  }

  // A bar's time range becomes the search's; the other filters stay.
  function narrowTo(group) {
    const { params } = parseHash();
    for (const key of ["since", "from", "to", "all"]) params.delete(key);
    params.set("from", group.dataset.start);
    params.set("to", group.dataset.end);
    location.hash = `#/search?${params}`;
  }

  const chart = $("volume-chart");
  chart.addEventListener("click", (event) => {
    const group = event.target.closest(".bucket");
    if (group) narrowTo(group);
  });
  chart.addEventListener("mouseover", (event) => pointAt(event.target.closest(".bucket")));
  chart.addEventListener("mouseleave", () => pointAt(null));
  chart.addEventListener("blur", () => pointAt(null));
  chart.addEventListener("keydown", (event) => {
    const filled = [...chart.querySelectorAll(".bucket")].filter((g) => g.dataset.count !== "0");
    if (!filled.length) return;
    const at = filled.indexOf(currentBucket());
    const moves = {
      ArrowLeft: () => filled[Math.max(0, at < 0 ? filled.length - 1 : at - 1)],
      ArrowRight: () => filled[at < 0 ? 0 : Math.min(filled.length - 1, at + 1)],
      Home: () => filled[0],
      End: () => filled[filled.length - 1],
    };
    if (moves[event.key]) {
      event.preventDefault();
      pointAt(moves[event.key]());
    } else if ((event.key === "Enter" || event.key === " ") && currentBucket()) {
      event.preventDefault();
      narrowTo(currentBucket());
    }
  });

  let resizing = false;
  window.addEventListener("resize", () => {
    if (resizing || state.view !== "search" || !state.search.volume) return;
    resizing = true;
    requestAnimationFrame(() => { resizing = false; drawVolume(); });
  });

  // ---- Live tail ---------------------------------------------------------------------------------
  //
  // The tail is Server-Sent Events read through fetch rather than EventSource, because
  // EventSource cannot send the x-api-key header and the key must not travel in a URL.

  function startTail(params, fresh) {
    const tail = state.tail;
    stopTail();
    if (fresh) {
      tail.cursor = "";
      tail.paused = false;
      tail.params = apiParams(params);
      for (const key of ["since", "from", "to"]) tail.params.delete(key);
      $("tail-rows").replaceChildren();
      tail.count = 0;
      tail.stick = true;
      tail.unseen = 0;
      $("tail-jump").hidden = true;
    }
    $("tail-error").textContent = "";
    $("tail-toggle").textContent = "Pause";
    $("tail-status").textContent = "Connecting…";
    const controller = new AbortController();
    tail.controller = controller;
    follow(controller).catch((err) => {
      if (controller.signal.aborted) return;
      $("tail-status").textContent = "Disconnected";
      $("tail-error").textContent = err.message;
    });
  }

  async function follow(controller) {
    const tail = state.tail;
    const query = new URLSearchParams(tail.params);
    if (tail.cursor) query.set("cursor", tail.cursor);
    let response;
    try {
      response = await fetch(`/api/v1/tail?${query}`, {
        headers: { ...headers(), accept: "text/event-stream" },
        signal: controller.signal,
        cache: "no-store",
      });
    } catch (err) {
      if (!controller.signal.aborted) retryTail(controller, "Cannot reach the server");
      return;
    }
    if (!response.ok) {
      let reason = `HTTP ${response.status}`;
      try { reason = (await response.json()).error || reason; } catch (_) { /* not JSON */ }
      if (response.status === 401) { loggedOut(reason); return; }
      $("tail-status").textContent = "Stopped";
      $("tail-error").textContent = reason;
      // A refused filter will be refused again; anything else may pass later.
      if (response.status !== 400) retryTail(controller, reason);
      return;
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    let failure = null;
    for (;;) {
      let chunk;
      try {
        chunk = await reader.read();
      } catch (_) {
        break;
      }
      if (chunk.done) break;
      buffer += decoder.decode(chunk.value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const event = parseEvent(block);
        if (!event) continue;
        if (event.type === "open") {
          $("tail-status").textContent = `Following (tenant ${JSON.parse(event.data).tenant})`;
          $("tail-scroller").dataset.following = "true";
        } else if (event.type === "records") {
          addTailRecords(JSON.parse(event.data));
        } else if (event.type === "error") {
          failure = JSON.parse(event.data).error;
        }
      }
    }
    $("tail-scroller").dataset.following = "false";
    if (controller.signal.aborted) return;
    retryTail(controller, failure || "The server closed the stream");
  }

  function parseEvent(block) {
    let type = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (!line || line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "event") type = value;
      if (field === "data") data.push(value);
    }
    return data.length ? { type, data: data.join("\n") } : null;
  }

  // Reconnects after the last record shown, so nothing is lost or repeated.
  function retryTail(controller, reason) {
    const tail = state.tail;
    if (tail.controller !== controller || tail.paused) return;
    $("tail-status").textContent = `Reconnecting: ${reason}`;
    tail.retry = setTimeout(() => {
      if (tail.controller === controller && !tail.paused) startTail(null, false);
    }, TAIL_RETRY_MS);
  }

  function stopTail() {
    const tail = state.tail;
    clearTimeout(tail.retry);
    if (tail.controller) {
      const controller = tail.controller;
      tail.controller = null;
      controller.abort();
    }
  }

  function addTailRecords(records) {
    if (!records.length) return;
    const tail = state.tail;
    const rows = $("tail-rows");
    const scroller = $("tail-scroller");
    appendRows(rows, records);
    tail.cursor = records[records.length - 1].cursor;
    tail.count += records.length;
    let excess = rows.childElementCount - TAIL_MAX_ROWS;
    while (excess-- > 0) rows.firstElementChild.remove();
    ensureRovingStop(rows);
    if (tail.stick) {
      scroller.scrollTop = scroller.scrollHeight;
    } else {
      tail.unseen += records.length;
      $("tail-jump").textContent = `${tail.unseen} new — jump to latest`;
      $("tail-jump").hidden = false;
    }
  }

  // Auto-scroll follows only while the reader is at the bottom; scrolling up stops it.
  $("tail-scroller").addEventListener("scroll", () => {
    const scroller = $("tail-scroller");
    const atBottom = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 24;
    state.tail.stick = atBottom;
    if (atBottom) {
      state.tail.unseen = 0;
      $("tail-jump").hidden = true;
    }
  });

  $("tail-jump").addEventListener("click", () => {
    const scroller = $("tail-scroller");
    state.tail.stick = true;
    scroller.scrollTop = scroller.scrollHeight;
    $("tail-jump").hidden = true;
    state.tail.unseen = 0;
  });

  $("tail-toggle").addEventListener("click", () => {
    const tail = state.tail;
    if (tail.paused) {
      tail.paused = false;
      startTail(null, false);
    } else {
      tail.paused = true;
      stopTail();
      $("tail-scroller").dataset.following = "false";
      $("tail-toggle").textContent = "Resume";
      $("tail-status").textContent = `Paused after ${tail.count} records; resuming continues after the last one shown`;
    }
  });

  $("tail-clear").addEventListener("click", () => {
    $("tail-rows").replaceChildren();
    state.tail.count = 0;
  });

  // ---- Health --------------------------------------------------------------------------------

  function startHealth() {
    stopHealth();
    state.health.samples = [];
    $("health-error").textContent = "";
    const tick = async () => {
      try {
        const sample = await api("/api/v1/health");
        sample.at = Date.now();
        const samples = state.health.samples;
        samples.push(sample);
        while (samples.length && sample.at - samples[0].at > HEALTH_KEEP_MS) samples.shift();
        $("health-error").textContent = "";
        drawHealth(samples);
      } catch (err) {
        if (err.status !== 401) $("health-error").textContent = err.message;
      }
    };
    tick();
    state.health.timer = setInterval(tick, HEALTH_EVERY_MS);
  }

  function stopHealth() {
    clearInterval(state.health.timer);
    state.health.timer = null;
  }

  const number = (value, digits = 0) =>
    value === null || value === undefined || isNaN(value) ? "–" : Number(value).toLocaleString("en", { maximumFractionDigits: digits });

  function bytes(value) {
    const units = ["B", "KiB", "MiB", "GiB"];
    let unit = 0;
    while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit++; }
    return `${number(value, unit ? 1 : 0)} ${units[unit]}`;
  }

  // The q-quantile of the observations between two cumulative bucket lists.
  function quantile(before, after, q) {
    const deltas = after.map(([bound, count], i) => [bound, count - (before[i] ? before[i][1] : 0)]);
    const total = deltas.length ? deltas[deltas.length - 1][1] : 0;
    if (total <= 0) return null;
    for (const [bound, count] of deltas) {
      if (count >= q * total) return bound === "+Inf" ? null : bound;
    }
    return null;
  }

  function drawHealth(samples) {
    const last = samples[samples.length - 1];
    const ready = $("h-ready");
    ready.textContent = last.ready ? "Yes" : (last.draining ? "No: shutting down" : "No: store unreachable");
    ready.className = last.ready ? "good" : "bad";
    $("h-backend").textContent = `${last.backend === "postgres" ? "PostgreSQL" : "SQLite"}${last.store_up ? "" : " (down)"}`;
    $("h-backend").className = last.store_up ? "good" : "bad";
    $("h-streams").textContent = number(last.gauges.active_streams);
    $("h-tails").textContent = number(last.gauges.tail_subscribers);
    $("h-buffered").textContent = `${bytes(last.gauges.buffered_bytes)} of ${bytes(last.gauges.buffered_bytes_limit)}`;
    $("h-rejected").textContent = number(last.counters.rejected);
    // Sealing rewrites past hours into compressed columnar form (PostgreSQL with citus_columnar);
    // its runs measure both tiers, so without it there is nothing to show but that it is off.
    const sealing = last.sealing;
    const disk = $("h-disk");
    if (!sealing.enabled) {
      disk.textContent = "sealing off";
      disk.className = "";
    } else {
      const lag = sealing.lag_seconds > 0 ? `, ${number(sealing.lag_seconds / 60, 0)} min behind` : "";
      disk.textContent = `${bytes(sealing.heap_bytes)} · ${bytes(sealing.columnar_bytes)}${lag}`;
      disk.className = sealing.lag_seconds > 0 || sealing.failures > 0 ? "bad" : "good";
    }
    const shards = $("h-shards");
    shards.replaceChildren(...last.shards.map((shard) => {
      const row = el("tr");
      const fill = shard.capacity ? Math.round((100 * shard.depth) / shard.capacity) : 0;
      row.append(el("td", null, `shard ${shard.shard}`), el("td", null, number(shard.depth)),
        el("td", null, number(shard.capacity)), el("td", null, `${fill} %`));
      return row;
    }));

    // Rates and per-interval means need two samples.
    const points = [];
    for (let i = 1; i < samples.length; i++) {
      const a = samples[i - 1];
      const b = samples[i];
      const seconds = Math.max((b.time_ms - a.time_ms) / 1000, 0.001);
      const rate = (name) => Math.max(0, (b.counters[name] - a.counters[name]) / seconds);
      const mean = (name, scale) => {
        const count = b.histograms[name].count - a.histograms[name].count;
        return count > 0 ? ((b.histograms[name].sum - a.histograms[name].sum) / count) * scale : null;
      };
      const p99 = quantile(a.histograms.flush_seconds.buckets, b.histograms.flush_seconds.buckets, 0.99);
      points.push({
        t: b.at,
        received: rate("received"),
        committed: rate("committed"),
        rejected: rate("rejected"),
        timeouts: rate("backpressure_timeouts"),
        limited: rate("rate_limited"),
        batch: mean("batch_rows", 1),
        flush: mean("flush_seconds", 1000),
        flushP99: p99 === null ? null : p99 * 1000,
      });
    }
    const levels = samples.map((s) => ({ t: s.at, s }));
    // Until five minutes have been sampled, the charts span what has been.
    const window = [Math.max(last.at - HEALTH_KEEP_MS, samples[0].at), last.at];
    // Received is drawn dashed over committed: when the two agree, both stay visible.
    drawChart("chart-records", window, [
      { cls: "s1", values: points.map((p) => [p.t, p.committed]) },
      { cls: "s0 dash", values: points.map((p) => [p.t, p.received]) },
    ], { format: (v) => `${number(v)}/s` });
    const capacity = Math.max(0, ...last.shards.map((s) => s.capacity));
    const shardClasses = ["s0", "s1", "s2", "s3"];
    drawChart("chart-queues", window, last.shards.map((shard, i) => ({
      cls: shardClasses[i % shardClasses.length],
      values: levels.map(({ t, s }) => {
        const found = s.shards.find((x) => x.shard === shard.shard);
        return [t, found ? found.depth : null];
      }),
    })), { cap: capacity, format: (v) => `${number(v)} chunks` });
    drawChart("chart-pressure", window, [
      { cls: "s0", values: points.map((p) => [p.t, p.rejected]) },
      { cls: "s2", values: points.map((p) => [p.t, p.timeouts]) },
      { cls: "s3", values: points.map((p) => [p.t, p.limited]) },
    ], { format: (v) => `${number(v, 1)}/s` });
    drawChart("chart-buffer", window, [
      { cls: "s1", values: levels.map(({ t, s }) => [t, s.gauges.buffered_bytes]) },
    ], { cap: last.gauges.buffered_bytes_limit, format: bytes });
    drawChart("chart-batch", window, [
      { cls: "s0", values: points.map((p) => [p.t, p.batch]) },
    ], { format: (v) => `${number(v)} rows` });
    drawChart("chart-flush", window, [
      { cls: "s0", values: points.map((p) => [p.t, p.flush]) },
      { cls: "s2", values: points.map((p) => [p.t, p.flushP99]) },
    ], { format: (v) => `${number(v, 1)} ms` });
    $("health-status").textContent =
      `sampled every ${HEALTH_EVERY_MS / 1000} s, ${samples.length} samples; last at ${new Date(last.time_ms).toISOString().slice(11, 19)} UTC`;
  }

  const SVG = "http://www.w3.org/2000/svg";

  // A small time-series chart: one polyline per series over the time window, y from 0 to the
  // largest value (or the capacity line, when given and visible). Gaps (null) split a line.
  function drawChart(id, [start, end], series, { cap, format }) {
    const figure = $(id);
    const svg = figure.querySelector("svg");
    const values = series.flatMap((s) => s.values.map(([, v]) => v)).filter((v) => v !== null && isFinite(v));
    const top = Math.max(1e-9, ...values, cap || 0) * 1.1;
    const x = (t) => ((t - start) / Math.max(1, end - start)) * 300;
    const y = (v) => 100 - (v / top) * 100;
    const nodes = [];
    if (cap) {
      const line = document.createElementNS(SVG, "line");
      line.setAttribute("class", "cap");
      line.setAttribute("x1", "0");
      line.setAttribute("x2", "300");
      line.setAttribute("y1", String(y(cap)));
      line.setAttribute("y2", String(y(cap)));
      nodes.push(line);
    }
    for (const { cls, values: points } of series) {
      let run = [];
      const flush = () => {
        if (run.length) {
          const line = document.createElementNS(SVG, "polyline");
          line.setAttribute("class", cls);
          // A single point is drawn as a short flat segment so that it shows.
          if (run.length === 1) run.push([run[0][0] + 0.5, run[0][1]]);
          line.setAttribute("points", run.map(([px, py]) => `${px.toFixed(1)},${py.toFixed(2)}`).join(" "));
          nodes.push(line);
        }
        run = [];
      };
      for (const [t, v] of points) {
        if (v === null || !isFinite(v)) { flush(); continue; }
        run.push([x(t), y(v)]);
      }
      flush();
    }
    svg.replaceChildren(...nodes);
    const latest = series.map((s) => {
      const found = [...s.values].reverse().find(([, v]) => v !== null && isFinite(v));
      return found ? format(found[1]) : "–";
    });
    const minutes = Math.round((end - start) / 60000);
    const span = minutes >= 1 ? `last ${minutes} min` : `last ${Math.round((end - start) / 1000)} s`;
    figure.querySelector(".max").textContent = `max ${format(top / 1.1)} · ${span}`;
    figure.querySelector(".now").textContent = `now ${latest.join(" / ")}`;
    figure.dataset.points = String(Math.max(0, ...series.map((s) => s.values.filter(([, v]) => v !== null).length)));
  }

  // ---- Start ---------------------------------------------------------------------------------

  (async () => {
    const err = await checkSession(state.key);
    if (!err) { enter(); return; }
    if (err.status === 401) {
      const hadKey = Boolean(state.key);
      loggedOut(hadKey ? err.message : null);
    } else {
      showLogin();
      $("login-error").textContent = err.message;
    }
  })();
})();
