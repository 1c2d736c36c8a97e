// The reference client in headless Chromium: the seed 002 flows, end to end against a real
// server on Redis. Screenshots of each state go to test-artifacts/browser/.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { startStack, launchBrowser, shot, artifacts } from "./harness.mjs";

let stack;
let browser;
let page;

before(async () => {
  stack = await startStack();
  ({ browser, page } = await launchBrowser());
});
after(async () => {
  await browser?.close();
  stack?.stop();
});

const chip = () => page.locator("#plan-chip");
async function newSession() {
  await page.goto(stack.base + "/");
  await page.click("#new-session");
  await page.waitForFunction(() => location.hash.length > 1);
  await chip().waitFor({ state: "visible" });
}
async function send(text) {
  await page.fill("#input", text);
  await page.click("#send");
}
async function expectChip(text) {
  await page.waitForFunction((want) => document.getElementById("plan-chip").textContent === want, text, { timeout: 15000 });
}

// The plan PUT answers this problem until the test unroutes it.
async function refusePlanPut(status, code) {
  const body = JSON.stringify({ type: `urn:dsh-plan:problem:${code}`, title: "Refused", status, detail: code, code });
  await page.route("**/agents/main/plan", (route) =>
    route.request().method() === "PUT" ? route.fulfill({ status, contentType: "application/problem+json", body }) : route.continue(),
  );
}

test("flow 1: a choice made while generating stays pending through Stop and commits at the next prompt", async () => {
  await newSession();
  await expectChip("Default");
  await page.selectOption("#plan-select", "plan");
  await expectChip("Plan");
  assert.equal(await page.locator("#plan-desc").textContent(), "Plan mode is on.");
  await shot(page, "flow1-plan-selected");

  await send("refactor the session store");
  await page.locator("#stop").waitFor({ state: "visible" });
  // The control stays usable while the turn generates.
  assert.equal(await page.locator("#plan-select").isDisabled(), false);
  await page.selectOption("#plan-select", "default");
  await expectChip("Default · pending");
  assert.match(await page.locator("#plan-desc").textContent(), /Switching to Default at the next step/);
  await shot(page, "flow1-default-pending");

  await page.click("#stop");
  await page.locator("#stop").waitFor({ state: "hidden" });
  await expectChip("Default · pending");
  await shot(page, "flow1-stopped-still-pending");

  await send("go ahead");
  await expectChip("Default");
  await page.locator(".msg.assistant", { hasText: "Done: go ahead" }).waitFor();
  assert.equal(await page.locator("#plan-desc").textContent(), "Plan mode is off.");
  await shot(page, "flow1-default-committed");
});

test("flow 2: /plan, Keep planning with feedback, a revised plan, Approve, plan mode off", async () => {
  await newSession();
  await page.fill("#input", "/pl");
  await page.locator("#suggestions li", { hasText: "/plan" }).click();
  assert.equal(await page.inputValue("#input"), "/plan ");
  await page.fill("#input", "/plan fix the login bug <img src=x onerror=window.hacked=1> [x](javascript:alert(1))");
  await page.click("#send");

  const card = page.locator("#review");
  await card.waitFor({ state: "visible", timeout: 20000 });
  assert.equal(await page.locator("#composer").isHidden(), true, "the card replaces the input bar");
  assert.equal(await page.locator("#review-title").textContent(), "Review the plan");
  await page.locator("#review-plan blockquote", { hasText: "fix the login bug" }).waitFor();
  // Untrusted Markdown: no raw HTML, no script URLs.
  assert.equal(await page.locator("#review-plan img").count(), 0);
  assert.equal(await page.locator("#review-plan a").count(), 0);
  assert.equal(await page.evaluate(() => window.hacked), undefined);
  await expectChip("Plan");
  assert.equal(await chip().isVisible(), true, "the mode stays in view during the review");
  await shot(page, "flow2-review");

  await page.fill("#review-text", "Also cover SSO logins.");
  await page.click("#review-keep");
  await page.locator("#review-plan blockquote", { hasText: "Also cover SSO logins." }).waitFor({ timeout: 20000 });
  await shot(page, "flow2-revised");

  await page.click("#review-approve");
  await card.waitFor({ state: "hidden" });
  await expectChip("Default");
  await page.locator(".msg.assistant", { hasText: "Plan approved. Starting work." }).waitFor({ timeout: 20000 });
  await shot(page, "flow2-approved");
});

test("flow 3: a failing plan request shows an error and keeps the confirmed state", async () => {
  await newSession();
  await expectChip("Default");
  await refusePlanPut(500, "internal");
  await page.selectOption("#plan-select", "plan");
  await page.locator("#plan-error").waitFor({ state: "visible" });
  assert.equal(await page.locator("#plan-error").textContent(), "Could not change the mode. Try again.");
  await expectChip("Default");
  assert.equal(await page.inputValue("#plan-select"), "default");
  assert.equal(await page.locator("#plan-select").isDisabled(), false, "re-enabled after the failure");
  await shot(page, "flow3-error");
  await page.unroute("**/agents/main/plan");
  await page.selectOption("#plan-select", "plan");
  await expectChip("Plan");
  assert.equal(await page.locator("#plan-error").isHidden(), true);
});

test("the Chinese UI labels the control and its pending state", async () => {
  const zh = await launchBrowser("zh-CN");
  try {
    const p = zh.page;
    await p.goto(stack.base + "/");
    await p.click("#new-session");
    await p.waitForFunction(() => document.getElementById("plan-chip").textContent === "默认");
    assert.equal(await p.locator("#send").textContent(), "发送");
    await p.selectOption("#plan-select", "plan");
    await p.waitForFunction(() => document.getElementById("plan-chip").textContent === "计划");
    await p.fill("#input", "你好");
    await p.click("#send");
    await p.locator("#stop").waitFor({ state: "visible" });
    await p.selectOption("#plan-select", "default");
    await p.waitForFunction(() => document.getElementById("plan-chip").textContent === "默认 · 待生效");
    await p.screenshot({ path: "../../test-artifacts/browser/zh-pending.png" });
    await p.click("#stop");
  } finally {
    await zh.browser.close();
  }
});

test("a late response never overwrites a newer state the stream already confirmed", async () => {
  await newSession();
  await expectChip("Default");
  const sid = await page.evaluate(() => location.hash.slice(1));
  let release;
  const held = new Promise((r) => (release = r));
  await page.route("**/agents/main/plan", async (route) => {
    if (route.request().method() !== "PUT") return route.continue();
    const response = await route.fetch(); // committed on the host now
    await held; // ...but the answer reaches the page late
    await route.fulfill({ response });
  });
  await page.selectOption("#plan-select", "plan");
  await expectChip("Plan"); // the stream confirms the commit
  // Another client switches back while our response is still in flight.
  await fetch(`${stack.base}/v1/sessions/${sid}/agents/main/plan`, { method: "PUT", headers: { "content-type": "application/json" }, body: JSON.stringify({ active: false }) });
  await expectChip("Default");
  release();
  await page.waitForFunction(() => !document.getElementById("plan-select").disabled);
  assert.equal(await chip().textContent(), "Default", "the stale response is ignored");
  await page.unroute("**/agents/main/plan");
});

test("the client reconnects after the event stream is refused once", async () => {
  let refused = 0;
  await page.route("**/events*", (route) => {
    if (refused++ === 0) return route.fulfill({ status: 503, contentType: "application/problem+json", body: "{}" });
    return route.continue();
  });
  await newSession();
  await expectChip("Default");
  assert.ok(refused >= 2, "a second stream was opened");
  await page.unroute("**/events*");
});

test("a token in the URL fragment leaves the address bar and goes with every request; none without one", async () => {
  const created = await fetch(`${stack.base}/v1/sessions`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
  const sid = (await created.json()).id;
  const fresh = await launchBrowser();
  const seen = [];
  const watch = (p) => p.on("request", (r) => r.url().includes("/v1/") && seen.push({ url: new URL(r.url()), auth: r.headers().authorization }));
  const chipIs = (p, text) => p.waitForFunction((want) => document.getElementById("plan-chip").textContent === want, text);
  const streams = () => seen.filter((r) => r.url.pathname.endsWith("/events"));
  const calls = () => seen.filter((r) => !r.url.pathname.endsWith("/events"));
  try {
    const plain = fresh.page;
    watch(plain);
    await plain.goto(`${stack.base}/#${sid}`);
    await chipIs(plain, "Default");
    assert.ok(seen.length >= 3 && seen.every((r) => r.auth === undefined && !r.url.searchParams.has("access_token")), "open mode sends no credential");

    // The integrator opens the client in a new tab with a token for the session.
    seen.length = 0;
    const token = "header.payload.signature";
    const tab = await plain.context().newPage();
    watch(tab);
    await tab.goto(`${stack.base}/#token=${token}&session=${sid}`);
    await chipIs(tab, "Default");
    assert.equal(await tab.evaluate(() => location.hash), `#${sid}`, "the token left the address bar");
    await tab.selectOption("#plan-select", "plan");
    await chipIs(tab, "Plan");
    assert.ok(calls().some((r) => r.url.pathname.endsWith("/plan")), "the PUT was seen");
    assert.ok(calls().every((r) => r.auth === `Bearer ${token}`), JSON.stringify(calls()));
    assert.ok(streams().length >= 1 && streams().every((r) => r.url.searchParams.get("access_token") === token && r.auth === undefined));

    seen.length = 0;
    await tab.reload(); // the tab keeps the token; the URL does not show it
    await chipIs(tab, "Plan");
    assert.ok(!(await tab.evaluate(() => location.href)).includes(token));
    assert.ok(seen.length >= 3 && seen.every((r) => r.auth === `Bearer ${token}` || r.url.searchParams.get("access_token") === token));

    // A token handed to a client that is already open (only the fragment changes).
    seen.length = 0;
    await plain.goto(`${stack.base}/#token=second.token.x&session=${sid}`);
    await plain.waitForFunction((want) => location.hash === want, `#${sid}`);
    await chipIs(plain, "Plan");
    await plain.selectOption("#plan-select", "default");
    await chipIs(plain, "Default");
    assert.ok(calls().length >= 1 && calls().every((r) => r.auth === "Bearer second.token.x"), JSON.stringify(calls()));
    assert.ok(streams().length >= 1 && streams().every((r) => r.url.searchParams.get("access_token") === "second.token.x"));
  } finally {
    await fresh.browser.close();
  }
});

test("a review cut short by Stop stays in the transcript as unavailable and the card closes", async () => {
  await newSession();
  await send("/plan tidy the README");
  await page.locator("#review").waitFor({ state: "visible", timeout: 20000 });
  await page.click("#stop"); // in the bar beside the chip, reachable during the review
  await page.locator("#review").waitFor({ state: "hidden" });
  await page.locator('.question-item[data-decision="unavailable"]').waitFor();
  assert.equal(await page.locator(".question-item .decision").textContent(), "Review unavailable");
  assert.match(await page.locator(".question-item .markdown").textContent(), /tidy the README/);
  assert.equal(await page.locator("#composer").isVisible(), true);
});

/** Every request the page makes to the API from now on. */
function watchApi(p = page) {
  const seen = [];
  const log = (r) => r.url().includes("/v1/") && seen.push(`${r.method()} ${new URL(r.url()).pathname}`);
  p.on("request", log);
  return { seen, stop: () => p.off("request", log) };
}
/** The notice says `text`, and the page then stays quiet for longer than two reconnect backoffs. */
async function stoppedWith(text, watch) {
  await page.locator("#notice").waitFor({ state: "visible", timeout: 15000 });
  assert.equal(await page.locator("#notice").textContent(), text);
  const count = watch.seen.length;
  await page.waitForTimeout(2500);
  assert.deepEqual(watch.seen.slice(count), [], "no request after the refusal");
  watch.stop();
}

test("an unknown session shows a message, is forgotten, and the client stops asking", async () => {
  const sid = "0123456789abcdef0123456789abcdef";
  await page.goto(stack.base + "/");
  await page.evaluate((sid) => localStorage.setItem("dsh-plan.sessions", JSON.stringify([sid])), sid);
  const watch = watchApi();
  await page.goto(`${stack.base}/#${sid}`);
  await stoppedWith("This session does not exist or has expired. Start a new session.", watch);
  const streams = watch.seen.filter((r) => r.endsWith("/events"));
  assert.ok(streams.length <= 2, `the stream and one probe, no loop: ${streams}`);
  assert.equal(await page.locator("#dock").isHidden(), true);
  assert.equal(await page.locator(`#session-list button[title="${sid}"]`).count(), 0, "no longer offered");
  await shot(page, "unknown-session");
  // Starting a new session clears the message.
  await page.click("#new-session");
  await chip().waitFor({ state: "visible" });
  assert.equal(await page.locator("#notice").isHidden(), true);
});

test("a write refused with session-not-found stops the client too", async () => {
  await newSession();
  await expectChip("Default");
  await refusePlanPut(404, "session-not-found");
  const watch = watchApi();
  await page.selectOption("#plan-select", "plan");
  await stoppedWith("This session does not exist or has expired. Start a new session.", watch);
  await page.unroute("**/agents/main/plan");
});

test("a session deleted elsewhere says so and the client stops asking", async () => {
  await newSession();
  await expectChip("Default");
  const sid = await page.evaluate(() => location.hash.slice(1));
  const watch = watchApi();
  const res = await fetch(`${stack.base}/v1/sessions/${sid}`, { method: "DELETE" });
  assert.ok(res.ok, `DELETE: ${res.status}`);
  await stoppedWith("This session was deleted.", watch);
});

test("the Chinese UI shows the review in Chinese and answers by option id", async () => {
  const zh = await launchBrowser("zh-CN");
  try {
    const p = zh.page;
    const sent = [];
    p.on("request", (r) => r.url().endsWith("/answer") && sent.push(JSON.parse(r.postData())));
    await p.goto(stack.base + "/");
    await p.click("#new-session");
    await p.waitForFunction(() => document.getElementById("plan-chip").textContent === "默认");
    await p.fill("#input", "/plan 修复登录问题");
    await p.click("#send");
    await p.locator("#review").waitFor({ state: "visible", timeout: 20000 });
    assert.equal(await p.locator("#review-approve").textContent(), "批准");
    assert.equal(await p.locator("#review-keep").textContent(), "继续规划");
    await p.click("#review-approve");
    await p.locator('.question-item[data-decision="approved"]').waitFor({ timeout: 20000 });
    assert.deepEqual(sent, [{ option: "approve" }]);
    assert.equal(await p.locator(".question-item .decision").textContent(), "已批准");
    await p.screenshot({ path: join(artifacts, "zh-review-approved.png") });
  } finally {
    await zh.browser.close();
  }
});
