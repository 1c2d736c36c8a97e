// The reference client with credentials on, as an integrator embeds it: its backend holds an
// API key and hands the page a token for one session and one user. Plan reviews stay in the
// transcript with who decided them (also after a reload), answers name option ids, an expired
// token stops the client, and the layout holds on a 390 px phone.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { startKeyedStack, launchBrowser, shot, artifacts } from "./harness.mjs";

let stack;
before(async () => {
  stack = await startKeyedStack("web-review", { tokenDelayMs: 20 });
});
after(() => stack?.stop());
const backend = (...args) => stack.backend(...args);

/** A session and a token for `subject`, opened in `page` the way an integrator hands it over. */
async function openAs(page, subject, { ttl_seconds } = {}) {
  const sid = (await backend("POST", "/v1/sessions")).id;
  const scopes = ["read", "plan", "prompt", "answer"];
  const { token } = await backend("POST", `/v1/sessions/${sid}/tokens`, { scopes, subject, ...(ttl_seconds ? { ttl_seconds } : {}) });
  await page.goto(`${stack.base}/#token=${token}&session=${sid}`);
  return sid;
}

/** The bodies the page sends to answer questions, in order. */
function answers(page) {
  const bodies = [];
  page.on("request", (r) => r.url().endsWith("/answer") && bodies.push(JSON.parse(r.postData())));
  return bodies;
}

/** What the transcript shows for each question, as a reader sees it. */
const history = (page) =>
  page.$$eval(".question-item", (items) =>
    items.map((i) => ({
      decision: i.dataset.decision,
      shown: i.querySelector(".decision").textContent,
      feedback: i.querySelector(".item-feedback")?.textContent ?? null,
      plan: i.querySelector(".markdown").textContent,
      text: i.textContent,
    })),
  );

async function planReview(page, request) {
  await page.locator("#plan-chip").waitFor({ state: "visible" });
  await page.fill("#input", `/plan ${request}`);
  await page.click("#send");
  await page.locator("#review").waitFor({ state: "visible", timeout: 20000 });
}

test("plan reviews stay in the transcript with the decision, the feedback and who decided, also after a reload", async () => {
  const { browser, page } = await launchBrowser();
  try {
    const sent = answers(page);
    await openAs(page, "ann@example.com");
    await planReview(page, "fix the login bug");
    await page.fill("#review-text", "Also cover SSO logins.");
    await page.click("#review-keep");
    await page.locator("#review-plan blockquote", { hasText: "Also cover SSO logins." }).waitFor({ timeout: 20000 });
    await page.click("#review-approve");
    await page.locator(".msg.assistant", { hasText: "Plan approved. Starting work." }).waitFor({ timeout: 20000 });
    // Answers name the option by id, whatever the button says.
    assert.deepEqual(sent, [{ option: "keep_planning", text: "Also cover SSO logins." }, { option: "approve" }]);

    const expected = async () => {
      const items = await history(page);
      assert.equal(items.length, 2, JSON.stringify(items));
      const [first, second] = items;
      assert.equal(first.decision, "keep_planning");
      assert.equal(first.shown, "Keep planning · by ann@example.com");
      assert.equal(first.feedback, "Feedback: Also cover SSO logins.");
      assert.match(first.plan, /fix the login bug/);
      assert.equal(second.decision, "approved");
      assert.equal(second.shown, "Approved · by ann@example.com");
      assert.match(second.plan, /Also cover SSO logins\./, "the revised plan");
      for (const item of items) assert.doesNotMatch(item.text, /[{}]|"approved"|decided_by/, "no raw JSON");
      const notes = await page.locator(".msg.note").allTextContents();
      assert.ok(notes.every((n) => !n.includes("{")), `no raw JSON notes: ${notes}`);
    };
    await expected();
    await shot(page, "review-history");

    await page.reload();
    await page.locator(".msg.assistant", { hasText: "Plan approved. Starting work." }).waitFor({ timeout: 20000 });
    await expected();
    assert.equal(await page.locator("#review").isHidden(), true, "nothing left to decide");
    await shot(page, "review-history-reloaded");
  } finally {
    await browser.close();
  }
});

test("a dismissed review shows as dismissed by whoever closed it", async () => {
  const { browser, page } = await launchBrowser();
  try {
    await openAs(page, "bob");
    await planReview(page, "rename the crate");
    await page.click("#review-dismiss");
    await page.locator("#review").waitFor({ state: "hidden" });
    await page.locator("#composer").waitFor({ state: "visible" });
    await page.locator('.question-item[data-decision="dismissed"]').waitFor({ timeout: 20000 });
    const [item] = await history(page);
    assert.equal(item.shown, "Dismissed · by bob");
    assert.match(item.plan, /rename the crate/);
  } finally {
    await browser.close();
  }
});

test("a token that expires while the page is open shows a message and the client stops asking", async () => {
  const { browser, page } = await launchBrowser();
  try {
    const seen = [];
    page.on("request", (r) => r.url().includes("/v1/") && seen.push(r.url()));
    await openAs(page, "carol", { ttl_seconds: 3 }); // whole seconds: at least 2 s left
    await page.locator("#plan-chip").waitFor({ state: "visible" });
    // The server ends the stream once the token has expired; the reconnect is refused.
    const notice = page.locator("#notice");
    await notice.waitFor({ state: "visible", timeout: 15000 });
    assert.equal(await notice.textContent(), "Your access to this session has expired. Open it again from the page that sent you here.");
    assert.equal(await page.locator("#dock").isHidden(), true);
    const count = seen.length;
    await page.waitForTimeout(2500); // longer than two reconnect backoffs
    assert.deepEqual(seen.slice(count), [], "no request after the refusal");
    await shot(page, "token-expired");
  } finally {
    await browser.close();
  }
});

test("at 390 px: no horizontal scroll, the mode chip stays in view during a review, every action reachable", async () => {
  const { browser, page } = await launchBrowser("en-US", { width: 390, height: 844 });
  const inView = async (selector) => {
    const box = await page.locator(selector).boundingBox();
    assert.ok(box, `${selector} is rendered`);
    assert.ok(box.x >= 0 && box.y >= 0 && box.x + box.width <= 390 && box.y + box.height <= 844, `${selector} in view: ${JSON.stringify(box)}`);
  };
  const noOverflow = async () =>
    assert.ok(await page.evaluate(() => document.scrollingElement.scrollWidth <= 390), "no horizontal scroll");
  try {
    await openAs(page, "dana");
    await page.locator("#plan-chip").waitFor({ state: "visible" });
    await noOverflow();
    for (const s of ["#input", "#send", "#plan-chip", "#new-session"]) await inView(s);
    await shot(page, "mobile-390-composer");

    // A long plan: the card scrolls inside itself, the chip and the actions stay on screen.
    const long = Array.from({ length: 40 }, (_, i) => `step ${i} with a_very_long_identifier_that_does_not_wrap_${i}`).join(" ");
    await planReview(page, long);
    await page.screenshot({ path: join(artifacts, "mobile-390-review.png") });
    await noOverflow();
    for (const s of ["#plan-chip", "#review-approve", "#review-keep", "#review-dismiss", "#review-text"]) await inView(s);
    assert.equal(await page.locator("#plan-chip").textContent(), "Plan");

    await page.click("#review-approve");
    await page.locator(".msg.assistant", { hasText: "Plan approved. Starting work." }).waitFor({ timeout: 20000 });
    await noOverflow();
    await inView("#plan-chip");
    await page.screenshot({ path: join(artifacts, "mobile-390-approved.png") });
  } finally {
    await browser.close();
  }
});
