// The console in a real browser: headless Chromium (the system's, driven by playwright-core)
// against a running `loghaul serve` with two tenants. Records reach the server over gRPC with
// `loghaul send`. Run by .ci/console-check, which starts the server and sets:
//   CONSOLE_URL, GRPC_ENDPOINT, KEY_A (tenant alpha), KEY_B (tenant beta), LOGHAUL_BIN,
//   CHROMIUM (default /usr/bin/chromium), SCREENSHOT_DIR.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { chromium } from "playwright-core";

const env = (name, fallback) => {
  const value = process.env[name] ?? fallback;
  if (value === undefined) throw new Error(`${name} must be set (see .ci/console-check)`);
  return value;
};
const CONSOLE_URL = env("CONSOLE_URL");
const GRPC_ENDPOINT = env("GRPC_ENDPOINT");
const KEY_A = env("KEY_A");
const KEY_B = env("KEY_B");
const LOGHAUL_BIN = env("LOGHAUL_BIN");
const SCREENSHOTS = env("SCREENSHOT_DIR", "target/console-screenshots");
// Generous: the machine running CI may be small and busy.
const WAIT = 20_000;

let browser;
const timings = {};

/** Sends JSON-lines records over gRPC as the key's tenant; returns loghaul send's summary. */
function send(key, records) {
  const input = records.map((r) => JSON.stringify(r)).join("\n") + "\n";
  return execFileSync(LOGHAUL_BIN, ["send", "--endpoint", GRPC_ENDPOINT, "--api-key", key], {
    input,
    encoding: "utf8",
    maxBuffer: 64 << 20,
  }).trim();
}

async function newPage() {
  // A fresh context per test: its own session storage, so logins do not leak between tests.
  const context = await browser.newContext({ viewport: { width: 1366, height: 820 } });
  const page = await context.newPage();
  page.setDefaultTimeout(WAIT);
  return page;
}

async function login(page, key, hash = "") {
  await page.goto(`${CONSOLE_URL}/${hash}`);
  await page.fill("#login-key", key);
  await page.press("#login-key", "Enter");
  await page.waitForSelector("#nav:not([hidden])");
}

async function shot(page, name) {
  await page.screenshot({ path: `${SCREENSHOTS}/${name}.png`, fullPage: false });
}

const rowMessages = (page, container) =>
  page.$$eval(`#${container} .rec .msg`, (cells) => cells.map((c) => c.firstChild.textContent));

const ALPHA = [
  { severity: "info", service: "checkout", message: "order 41 placed", attributes: { order: "41", region: "eu-west-1" } },
  { severity: "warn", service: "checkout", message: "card declined for order 42", attributes: { order: "42", region: "eu-west-1", card: "visa" }, trace_id: "4bf92f3577b34da6a3ce929d0e0e4736", span_id: "00f067aa0ba902b7" },
  { severity: "error", service: "checkout", message: "payment provider timeout after 3000 ms", attributes: { provider: "acme-pay", region: "us-east-1" } },
  { severity: "debug", service: "api", message: "GET /v1/cart 200 in 12 ms", attributes: { path: "/v1/cart", status: "200" } },
  { severity: "fatal", service: "ledger", message: "ledger replica lost quorum", attributes: { replica: "3" } },
  { severity: "trace", service: "api", message: "cache lookup cart:7 hit", attributes: {} },
];

// The last hour of a web service, minute by minute: a wave of info and debug, warnings every
// nine minutes and an incident of errors (and one fatal) 21 and 22 minutes ago; what the volume
// histogram draws.
const WEB = [];
const WEB_STARTED = Date.now();
for (let m = 55; m >= 3; m--) {
  const timestamp = new Date(WEB_STARTED - m * 60_000).toISOString();
  const add = (count, severity) => {
    for (let n = 0; n < count; n++) WEB.push({ timestamp, severity, service: "web", message: `web ${m} min ago ${severity} ${n}` });
  };
  const wave = 6 + Math.round(5 * Math.sin(m / 6));
  add(wave - Math.floor(wave / 4), "info");
  add(Math.floor(wave / 4), "debug");
  if (m % 9 === 0) add(4, "warn");
  if (m === 21 || m === 22) add(7, "error");
  if (m === 22) add(1, "fatal");
}
const webCount = (levels) => WEB.filter((r) => levels.includes(r.severity)).length;

/** The histogram's bars: each bucket's count, bounds and counts by level, as drawn. */
const histogramBars = (page) =>
  page.$$eval("#volume-chart g.bucket", (groups) => groups.map((g) => ({
    count: Number(g.dataset.count),
    start: g.dataset.start,
    end: g.dataset.end,
    title: g.querySelector("title").textContent,
    levels: Object.fromEntries([...g.querySelectorAll("rect[data-level]")].map((r) => [r.dataset.level, Number(r.dataset.count)])),
  })));

const histogramTotal = (page, total) =>
  page.waitForFunction((n) => document.getElementById("volume").dataset.total === String(n), total);

before(async () => {
  mkdirSync(SCREENSHOTS, { recursive: true });
  browser = await chromium.launch({
    executablePath: env("CHROMIUM", "/usr/bin/chromium"),
    // Chromium's sandbox cannot start as root (CI containers); it adds nothing to a test of our
    // own page.
    args: process.getuid && process.getuid() === 0 ? ["--no-sandbox"] : [],
  });
  assert.match(send(KEY_A, ALPHA), /accepted 6 rejected 0/);
  const beta = Array.from({ length: 3 }, (_, n) => ({ severity: "info", service: "search", message: `beta indexing batch ${n}` }));
  assert.match(send(KEY_B, beta), /accepted 3 rejected 0/);
  const paged = Array.from({ length: 250 }, (_, n) => ({ severity: "info", service: "paged", message: `paged record ${String(n).padStart(3, "0")}` }));
  assert.match(send(KEY_A, paged), /accepted 250 rejected 0/);
  const volume = Array.from({ length: 10_000 }, (_, n) => ({
    severity: ["info", "warn", "error", "debug"][n % 4],
    service: "volume",
    message: `volume record ${n} with a message of ordinary length for a service log line`,
    attributes: { n: String(n), region: `r${n % 7}` },
  }));
  assert.match(send(KEY_A, volume), /accepted 10000 rejected 0/);
  assert.match(send(KEY_A, WEB), new RegExp(`accepted ${WEB.length} rejected 0`));
});

after(async () => {
  await browser?.close();
  if (Object.keys(timings).length) console.log("timings (ms):", JSON.stringify(timings));
});

test("a wrong key gets a clear message and no data", async () => {
  const page = await newPage();
  await page.goto(`${CONSOLE_URL}/`);
  await page.fill("#login-key", "not-a-real-key");
  await page.click("#login-form button[type=submit]");
  const error = page.locator("#login-error");
  await error.filter({ hasText: "refused" }).waitFor();
  assert.match(await error.textContent(), /refused this key: unknown API key/);
  assert.equal(await page.isHidden("#nav"), true);
  await shot(page, "login-wrong-key");
  await page.context().close();
});

test("search: log in, see the tenant's rows newest first with severity colours", async () => {
  const page = await newPage();
  await login(page, KEY_A, "#/search?service=checkout&service=api&service=ledger");
  await page.waitForSelector("#search-rows .rec");
  const messages = await rowMessages(page, "search-rows");
  assert.deepEqual(messages, ALPHA.map((r) => r.message).reverse(), "newest first, all of them");
  assert.match(await page.textContent("#who"), /tenant alpha/);
  const colours = await page.$$eval("#search-rows .rec .sev", (cells) =>
    Object.fromEntries(cells.map((c) => [c.textContent, getComputedStyle(c).backgroundColor])));
  assert.equal(colours.ERROR, "rgb(254, 226, 226)");
  assert.equal(colours.WARN, "rgb(254, 243, 199)");
  assert.equal(colours.FATAL, "rgb(127, 29, 29)");
  assert.equal(new Set(Object.values(colours)).size, 6, "each severity has its own colour");

  // Filters go into the URL, and the URL alone reproduces the view.
  await page.selectOption("#f-severity", "warn");
  await page.fill("#f-services", "checkout");
  await page.click("#f-submit");
  await page.waitForFunction(() => location.hash.includes("min_severity=warn"));
  assert.match(page.url(), /service=checkout/);
  await page.waitForFunction(() => document.querySelectorAll("#search-rows .rec").length === 2);
  const shared = page.url();
  await page.goto("about:blank");
  await page.goto(shared);
  await page.waitForFunction(() => document.querySelectorAll("#search-rows .rec").length === 2);
  assert.deepEqual(await rowMessages(page, "search-rows"), [ALPHA[2].message, ALPHA[1].message]);
  assert.equal(await page.inputValue("#f-services"), "checkout");
  assert.equal(await page.inputValue("#f-severity"), "warn");
  await page.goto(`${CONSOLE_URL}/#/search?since=1h&service=checkout&service=api&service=ledger`);
  await page.waitForFunction(() => document.querySelectorAll("#search-rows .rec").length === 6);
  await histogramTotal(page, 6);
  await shot(page, "search");
  // The tail follows with the same filters, without the time range.
  await page.click("#nav-tail");
  await page.waitForFunction(() => location.hash.startsWith("#/tail?"));
  assert.match(page.url(), /service=checkout&service=api&service=ledger/);
  assert.doesNotMatch(page.url(), /since=/);
  assert.equal(await page.inputValue("#f-services"), "checkout, api, ledger");
  await page.waitForSelector("#tail-scroller[data-following=true]");
  await page.context().close();
});

test("search: the volume histogram draws the search's records by level; a bar narrows the range", async () => {
  const page = await newPage();
  await login(page, KEY_A, "#/search?since=1h&service=web");
  await histogramTotal(page, WEB.length);
  const bars = await histogramBars(page);
  assert.equal(await page.getAttribute("#volume", "data-bucket"), "1m");
  assert.ok(bars.length === 60 || bars.length === 61, `${bars.length} one-minute bars over the hour`);
  assert.equal(bars.reduce((sum, bar) => sum + bar.count, 0), WEB.length, "the bars add up to what was pushed");
  const byLevel = {};
  for (const bar of bars) {
    assert.equal(Object.values(bar.levels).reduce((a, b) => a + b, 0), bar.count, "a bar's levels add up to it");
    for (const [level, count] of Object.entries(bar.levels)) byLevel[level] = (byLevel[level] || 0) + count;
  }
  assert.deepEqual(byLevel, {
    info: webCount(["info"]), debug: webCount(["debug"]), warn: webCount(["warn"]),
    error: webCount(["error"]), fatal: webCount(["fatal"]),
  });
  const incident = bars.find((bar) => bar.levels.fatal);
  assert.equal(incident.levels.error, 7);
  assert.match(incident.title, /UTC · \d+ records \(fatal 1, error 7, /);
  assert.match(incident.title, /Click to search this range/);
  // Axis labels, the level colours of the severity badges, and the legend.
  const labels = await page.$$eval("#volume-chart text", (texts) => texts.map((t) => t.textContent));
  assert.ok(labels.includes("records") && labels.includes("time (UTC)"), labels.join("|"));
  assert.ok(labels.some((text) => /^\d\d:\d\d$/.test(text)), "time ticks");
  assert.equal(await page.$eval("#volume-chart rect.lv-error", (r) => getComputedStyle(r).fill), "rgb(220, 38, 38)");
  assert.match(await page.textContent("#volume-title"), /Records per minute, by level/);
  assert.match(await page.textContent("#volume-legend"), /fatal.*error.*warn.*info.*debug/);
  assert.equal(await page.isHidden("#volume-note"), true);
  // Hovering a bar reads it out.
  await page.hover(`#volume-chart g.bucket[data-start="${incident.start}"]`);
  assert.match(await page.textContent("#volume-readout"), /fatal 1, error 7/);
  await shot(page, "search-volume");

  // Redrawn on every search: the minimum severity narrows it, to the number.
  await page.selectOption("#f-severity", "warn");
  await page.click("#f-submit");
  await histogramTotal(page, webCount(["warn", "error", "fatal"]));
  // Text and attribute filters are not the rollup's: the histogram says it counts without them.
  await page.selectOption("#f-severity", "");
  await page.fill("#f-contains", "min ago info 0");
  await page.click("#f-submit");
  await page.locator("#volume-note:not([hidden])").waitFor();
  assert.match(await page.textContent("#volume-note"), /Not filtered by message text/);
  await histogramTotal(page, WEB.length);
  assert.equal(await page.getAttribute("#volume", "data-partial"), "true");

  // A click on a bar searches its minute: the rows and the new histogram are that bar's.
  await page.fill("#f-contains", "");
  await page.click("#f-submit");
  await page.locator("#volume-note").waitFor({ state: "hidden" });
  await histogramTotal(page, WEB.length);
  await page.click(`#volume-chart g.bucket[data-start="${incident.start}"]`);
  await page.waitForFunction(() => location.hash.includes("from="));
  const hash = decodeURIComponent(new URL(page.url()).hash);
  assert.ok(hash.includes(`from=${incident.start}`) && hash.includes(`to=${incident.end}`), hash);
  assert.doesNotMatch(hash, /since=/);
  assert.match(hash, /service=web/);
  await histogramTotal(page, incident.count);
  await page.waitForFunction((n) => document.querySelectorAll("#search-rows .rec").length === n, incident.count);
  await page.context().close();
});

test("search: open a row's attributes with the mouse and the keyboard", async () => {
  const page = await newPage();
  await login(page, KEY_A, "#/search?service=checkout&attr=order%3D42");
  const row = page.locator("#search-rows .rec", { hasText: "card declined for order 42" });
  await row.waitFor();
  assert.equal(await page.locator("#search-rows .rec").count(), 1, "the attribute filter selects one");
  await row.click();
  const detail = row.locator(".detail");
  await detail.waitFor();
  const text = await detail.textContent();
  for (const expected of ["Attributes (3)", "card", "visa", "order", "42", "region", "eu-west-1",
    "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "received_at"]) {
    assert.ok(text.includes(expected), `${expected} in ${text}`);
  }
  assert.equal(await row.getAttribute("aria-expanded"), "true");
  await shot(page, "search-row-open");
  // Keyboard: the row has focus; Enter closes it, Space opens it again.
  await page.keyboard.press("Enter");
  assert.equal(await row.getAttribute("aria-expanded"), "false");
  await page.keyboard.press(" ");
  assert.equal(await row.getAttribute("aria-expanded"), "true");

  // Tab reaches the histogram, then the rows, from the form; arrows move between bars and rows.
  await page.goto(`${CONSOLE_URL}/#/search?service=checkout`);
  await page.waitForFunction(() => document.querySelectorAll("#search-rows .rec").length === 3);
  await histogramTotal(page, 3);
  await page.focus("#f-submit");
  await page.keyboard.press("Tab");
  assert.equal(await page.evaluate(() => document.activeElement.id), "volume-chart");
  await page.keyboard.press("End");
  assert.match(await page.textContent("#volume-readout"), /UTC · \d+ records? \(/);
  await page.keyboard.press("Tab");
  assert.equal(await page.evaluate(() => document.activeElement.classList.contains("rec")), true);
  await page.keyboard.press("ArrowDown");
  assert.equal(await page.evaluate(() => document.activeElement.querySelector(".msg").firstChild.textContent), ALPHA[1].message);
  await page.keyboard.press("Enter");
  await page.locator("#search-rows .rec[aria-expanded=true] .detail").waitFor();
  await page.context().close();
});

test("search: load older pages by cursor", async () => {
  const page = await newPage();
  await login(page, KEY_A, "#/search?service=paged");
  await page.waitForFunction(() => document.querySelectorAll("#search-rows .rec").length === 100);
  await page.click("#load-older");
  await page.waitForFunction(() => document.querySelectorAll("#search-rows .rec").length === 200);
  await page.click("#load-older");
  await page.waitForFunction(() => document.querySelectorAll("#search-rows .rec").length === 250);
  await page.waitForSelector("#load-older", { state: "hidden" });
  const messages = await rowMessages(page, "search-rows");
  const expected = Array.from({ length: 250 }, (_, n) => `paged record ${String(249 - n).padStart(3, "0")}`);
  assert.deepEqual(messages, expected, "every record once, newest first");
  assert.match(await page.textContent("#search-status"), /250 records, all shown/);
  await page.context().close();
});

test("search: an invalid filter shows the server's reason", async () => {
  const page = await newPage();
  await login(page, KEY_A, "#/search");
  await page.selectOption("#f-range", "custom");
  await page.fill("#f-from", "2026-11-29T12:00:00");
  await page.fill("#f-to", "2026-11-29T11:00:00");
  await page.click("#f-submit");
  const error = page.locator("#search-error");
  await error.filter({ hasText: "bad time range" }).waitFor();
  assert.match(await error.textContent(), /from \(2026-11-29T12:00:00\+00:00\) must be before to/);
  await shot(page, "search-invalid-filter");
  await page.goto(`${CONSOLE_URL}/#/search?min_severity=99`);
  await error.filter({ hasText: "outside OpenTelemetry's 0..=24" }).waitFor();
  await page.goto(`${CONSOLE_URL}/#/tail?min_severity=99`);
  await page.locator("#tail-error").filter({ hasText: "outside OpenTelemetry's 0..=24" }).waitFor();
  await page.context().close();
});

test("live tail: a record pushed over gRPC appears; pause, resume and auto-scroll", async () => {
  const page = await newPage();
  await login(page, KEY_A, "#/tail");
  await page.waitForSelector("#tail-scroller[data-following=true]");
  const marker = `tail record ${Date.now()}`;
  const pushed = Date.now();
  send(KEY_A, [{ severity: "error", service: "checkout", message: marker, attributes: { via: "grpc" } }]);
  await page.locator("#tail-rows .rec", { hasText: marker }).waitFor();
  timings.tail_delivery = Date.now() - pushed;

  // Paused, a new record does not show; resumed, the tail continues after the last row shown.
  await page.click("#tail-toggle");
  await page.locator("#tail-status", { hasText: "Paused" }).waitFor();
  const whilePaused = `while paused ${Date.now()}`;
  send(KEY_A, [{ severity: "info", service: "checkout", message: whilePaused }]);
  await page.waitForTimeout(1500);
  assert.equal(await page.locator("#tail-rows .rec", { hasText: whilePaused }).count(), 0);
  await page.click("#tail-toggle");
  await page.locator("#tail-rows .rec", { hasText: whilePaused }).waitFor();
  assert.deepEqual((await rowMessages(page, "tail-rows")).slice(-2), [marker, whilePaused]);

  // Auto-scroll keeps the newest row in sight...
  const services = ["checkout", "api", "payments", "search"];
  const levels = ["info", "info", "debug", "warn", "info", "error"];
  send(KEY_A, Array.from({ length: 120 }, (_, n) => ({
    severity: levels[n % levels.length], service: services[n % services.length],
    message: `burst one ${n}: request ${1000 + n} handled`, attributes: { request: String(1000 + n) },
  })));
  await page.locator("#tail-rows .rec", { hasText: "burst one 119:" }).waitFor();
  await page.waitForFunction(() => {
    const s = document.getElementById("tail-scroller");
    return s.scrollHeight - s.scrollTop - s.clientHeight < 24;
  });
  await shot(page, "tail");
  // ...until the reader scrolls up: then the view stays put and offers a jump.
  await page.$eval("#tail-scroller", (s) => { s.scrollTop = 0; s.dispatchEvent(new Event("scroll")); });
  send(KEY_A, Array.from({ length: 30 }, (_, n) => ({ service: "checkout", message: `burst two ${n}` })));
  await page.locator("#tail-rows .rec", { hasText: "burst two 29" }).waitFor({ state: "attached" });
  assert.equal(await page.$eval("#tail-scroller", (s) => s.scrollTop), 0);
  const jump = page.locator("#tail-jump");
  await jump.waitFor();
  assert.match(await jump.textContent(), /30 new/);
  await jump.click();
  await page.waitForFunction(() => {
    const s = document.getElementById("tail-scroller");
    return s.scrollHeight - s.scrollTop - s.clientHeight < 24;
  });
  await page.context().close();
});

test("health: charts draw from the service's metrics, readiness and backend shown", async () => {
  const page = await newPage();
  await login(page, KEY_A, "#/health");
  // Traffic while the page samples, so the rates have something to show.
  for (let round = 0; round < 6; round++) {
    send(KEY_A, Array.from({ length: 400 * (round + 1) }, (_, n) => ({ service: "health", message: `health ${round}-${n}` })));
    await page.waitForTimeout(1000);
  }
  await page.waitForFunction(() => Number(document.getElementById("chart-records").dataset.points) >= 4);
  for (const id of ["chart-records", "chart-queues", "chart-pressure", "chart-buffer", "chart-flush", "chart-batch"]) {
    const lines = await page.locator(`#${id} svg polyline`).count();
    assert.ok(lines >= 1, `${id} has a line`);
  }
  const points = await page.$eval("#chart-records svg polyline.s1", (p) => p.getAttribute("points").trim().split(/\s+/).length);
  assert.ok(points >= 2, `the committed line has ${points} points`);
  const peak = await page.textContent("#chart-records .max");
  assert.doesNotMatch(peak, /max 0\/s/, "some records per second were drawn");
  assert.equal(await page.textContent("#h-ready"), "Yes");
  assert.equal(await page.textContent("#h-backend"), "SQLite");
  assert.ok(await page.locator("#h-shards tr").count() >= 1);
  await page.locator("#chart-queues line.cap").waitFor({ state: "attached" });
  await shot(page, "health");
  await page.context().close();
});

test("tenancy: another tenant's key sees nothing of the first tenant", async () => {
  const page = await newPage();
  await login(page, KEY_B, "#/search?all=1");
  await page.waitForSelector("#search-rows .rec");
  const messages = await rowMessages(page, "search-rows");
  assert.deepEqual(messages, ["beta indexing batch 2", "beta indexing batch 1", "beta indexing batch 0"]);
  assert.match(await page.textContent("#who"), /tenant beta/);
  await histogramTotal(page, 3);
  await shot(page, "search-other-tenant");
  await page.goto(`${CONSOLE_URL}/#/search?all=1&service=checkout`);
  await page.locator("#search-rows .empty").waitFor();
  // The tail too: alpha's record never shows, beta's record pushed after it does.
  await page.goto(`${CONSOLE_URL}/#/tail`);
  await page.waitForSelector("#tail-scroller[data-following=true]");
  const secret = `alpha only ${Date.now()}`;
  send(KEY_A, [{ service: "checkout", message: secret }]);
  send(KEY_B, [{ service: "search", message: "beta after alpha" }]);
  await page.locator("#tail-rows .rec", { hasText: "beta after alpha" }).waitFor();
  await page.waitForTimeout(500);
  assert.equal(await page.locator("#tail-rows .rec", { hasText: secret }).count(), 0);
  await page.context().close();
});

test("10,000 rows in the table stay responsive", async () => {
  const page = await newPage();
  await login(page, KEY_A, "#/search?service=volume&size=1000");
  await page.waitForFunction(() => document.querySelectorAll("#search-rows .rec").length === 1000);
  let slowest = 0;
  for (let n = 2; n <= 10; n++) {
    const started = Date.now();
    await page.click("#load-older");
    await page.waitForFunction((count) => document.querySelectorAll("#search-rows .rec").length === count, n * 1000);
    slowest = Math.max(slowest, Date.now() - started);
  }
  timings.slowest_page_of_1000 = slowest;
  // Interaction with all 10,000 rows in the page: jump to the last row and open it.
  const started = Date.now();
  await page.focus("#search-rows .rec");
  await page.keyboard.press("End");
  await page.keyboard.press("Enter");
  await page.locator("#search-rows .rec:last-child .detail").waitFor();
  timings.end_and_open_with_10000_rows = Date.now() - started;
  assert.match(await page.textContent("#search-rows .rec:last-child .detail"), /volume record 0 /);
  const scrollStarted = Date.now();
  await page.evaluate(() => new Promise((done) => {
    window.scrollTo(0, 0);
    requestAnimationFrame(() => requestAnimationFrame(done));
  }));
  timings.scroll_to_top_with_10000_rows = Date.now() - scrollStarted;
  // Generous bounds for a loaded 2-core machine; the figures are printed for the record.
  assert.ok(slowest < 5000, `a page of 1,000 took ${slowest} ms`);
  assert.ok(timings.end_and_open_with_10000_rows < 3000, JSON.stringify(timings));
  await page.context().close();
});
