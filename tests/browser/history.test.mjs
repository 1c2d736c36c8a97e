// The plan history panel, with credentials on (a browser token, as an integrator hands it
// over): a keep-planning round then an approval, followed live from the stream; each revision
// with its status, who decided and the feedback; a revision's plan as sanitized Markdown and
// the diff from the one before; markup the model's plan carries is shown, never run.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { startKeyedStack, launchBrowser, shot } from "./harness.mjs";

let stack;
before(async () => {
  stack = await startKeyedStack("web-history", { tokenDelayMs: 20 });
});
after(() => stack?.stop());
const backend = (...args) => stack.backend(...args);

/** What the panel lists, as a reader sees it. */
const listed = (page) =>
  page.$$eval("#history-list .history-item", (items) =>
    items.map((i) => ({
      status: i.dataset.status,
      head: i.querySelector(".history-head").textContent,
      submitted: i.querySelector(".history-meta time")?.getAttribute("datetime") ?? null,
      decided: i.querySelector(".decided")?.textContent ?? null,
      feedback: i.querySelector(".history-feedback")?.textContent ?? null,
    })),
  );

/** Waits until the panel lists revisions with exactly these statuses, in order. */
const listing = (page, statuses) =>
  page.waitForFunction(
    (want) => [...document.querySelectorAll("#history-list .history-item")].map((i) => i.dataset.status).join() === want,
    statuses.join(),
    { timeout: 20000 },
  );

const INJECTED = `<img src=x onerror="window.__pwned='img'"> <script>window.__pwned='script'</script>`;

test("the history panel lists a keep-planning round and the approval, who decided, the plan sanitized and the diff, live", async () => {
  const { browser, page } = await launchBrowser();
  try {
    // Markup that got into the page would be run (or refused by the CSP): both are recorded.
    await page.addInitScript(() => {
      window.__violations = [];
      document.addEventListener("securitypolicyviolation", (e) => window.__violations.push(e.violatedDirective));
    });
    const planRequests = [];
    page.on("request", (r) => /\/agents\/main\/plans/.test(r.url()) && planRequests.push(r.url()));

    const sid = (await backend("POST", "/v1/sessions")).id;
    const { token } = await backend("POST", `/v1/sessions/${sid}/tokens`, { scopes: ["read", "plan", "prompt", "answer"], subject: "ann@example.com" });
    await page.goto(`${stack.base}/#token=${token}&session=${sid}`);

    await page.click("#history-toggle");
    await page.locator("#history").waitFor({ state: "visible" });
    assert.equal(await page.getAttribute("#history-toggle", "aria-expanded"), "true");
    await page.locator(".history-empty", { hasText: "No plan submitted yet." }).waitFor();

    // The panel is open while the review happens: every change arrives by the stream.
    await page.fill("#input", `/plan fix the login bug ${INJECTED}`);
    await page.click("#send");
    await page.locator("#review").waitFor({ state: "visible", timeout: 20000 });
    await listing(page, ["pending"]);
    await page.fill("#review-text", `Also cover SSO logins. ${INJECTED}`);
    await page.click("#review-keep");
    await listing(page, ["revising", "pending"]);
    await page.click("#review-approve");
    await listing(page, ["revising", "approved"]);
    await page.locator(".msg.assistant", { hasText: "Plan approved. Starting work." }).waitFor({ timeout: 20000 });

    const expected = async () => {
      // The decided times come with the revisions' fetch after each frame.
      await page.waitForFunction(() => document.querySelectorAll("#history-list .decided time").length === 2, null, { timeout: 20000 });
      const [first, second] = await listed(page);
      assert.equal(first.head, "Revision 1 Revising");
      assert.match(first.decided, /^Decided by ann@example\.com · \S/);
      assert.equal(first.feedback, `Feedback: Also cover SSO logins. ${INJECTED}`);
      assert.equal(second.head, "Revision 2 Approved");
      assert.match(second.decided, /^Decided by ann@example\.com · \S/);
      assert.equal(second.feedback, null, "no feedback shown for an approval");
      for (const r of [first, second]) assert.ok(r.submitted && !Number.isNaN(Date.parse(r.submitted)), JSON.stringify(r));
      assert.ok(Date.parse(first.submitted) <= Date.parse(second.submitted));
    };
    await expected();

    // The latest revision is shown; revision 1's plan as Markdown, its markup as text.
    assert.equal(await page.getAttribute('[data-revision="2"]', "aria-pressed"), "true");
    await page.click('[data-revision="1"]');
    assert.equal(await page.getAttribute('[data-revision="1"]', "aria-pressed"), "true");
    const plan = page.locator("#history-body .markdown");
    await plan.locator("h3", { hasText: /^Plan$/ }).waitFor();
    assert.match(await plan.locator("blockquote").textContent(), /fix the login bug <img src=x onerror="window.__pwned='img'"> <script>/);
    assert.deepEqual(await plan.locator("li").allTextContents(), ["Inspect the code involved.", "Make the change.", "Verify it with the tests."]);

    // Revision 2 against revision 1: what the model changed after the feedback.
    await page.click('[data-revision="2"]');
    await page.click('.history-tabs [data-view="diff"]');
    assert.equal(await page.locator('.history-tabs [data-view="diff"]').textContent(), "Changes since revision 1");
    assert.equal(await page.getAttribute('.history-tabs [data-view="diff"]', "aria-pressed"), "true");
    await page.locator("#history-body pre.diff").waitFor();
    const lines = (kind) => page.locator(`#history-body .diff-line.${kind}`).allTextContents();
    const added = await lines("add");
    const removed = await lines("del");
    assert.deepEqual(await lines("meta"), ["--- revision 1", "+++ revision 2"]);
    for (const l of ["+# Revised plan", "+Review feedback:", "+1. Address the feedback above.", "+2. Verify the change with the tests."]) assert.ok(added.includes(l), `${l} in ${JSON.stringify(added)}`);
    for (const l of ["-# Plan", "-Request:", "-1. Inspect the code involved.", "-2. Make the change.", "-3. Verify it with the tests."]) assert.ok(removed.includes(l), `${l} in ${JSON.stringify(removed)}`);
    assert.ok(added.includes(`+> Also cover SSO logins. ${INJECTED}`), "the feedback's markup as text in the diff");
    assert.ok((await lines("ctx")).includes(" ## Steps"), "unchanged lines as context");
    await shot(page, "history-diff");

    // Nothing the plans carried became markup, nothing ran, nothing was even tried.
    assert.equal(await page.locator("#history img, #history script, #conversation img, #conversation script").count(), 0);
    assert.equal(await page.evaluate(() => window.__pwned), undefined);
    assert.deepEqual(await page.evaluate(() => window.__violations), []);

    // Live, not polled: once quiet, no more requests for plans.
    const count = planRequests.length;
    await page.waitForTimeout(1500);
    assert.deepEqual(planRequests.slice(count), [], "no polling");

    // A reload shows the same history (the tab keeps its token).
    await page.reload();
    await page.click("#history-toggle");
    await listing(page, ["revising", "approved"]);
    await expected();
    await shot(page, "history-reloaded");

    // On a phone the panel covers the conversation; Close hands focus back to its button.
    await page.setViewportSize({ width: 390, height: 844 });
    assert.ok(await page.evaluate(() => document.scrollingElement.scrollWidth <= 390), "no horizontal scroll");
    const close = await page.locator("#history-close").boundingBox();
    assert.ok(close && close.x >= 0 && close.x + close.width <= 390 && close.y >= 0, `Close in view: ${JSON.stringify(close)}`);
    await shot(page, "history-mobile-390");
    await page.click("#history-close");
    await page.locator("#history").waitFor({ state: "hidden" });
    assert.equal(await page.getAttribute("#history-toggle", "aria-expanded"), "false");
    assert.equal(await page.evaluate(() => document.activeElement?.id), "history-toggle");
  } finally {
    await browser.close();
  }
});
