// Swagger UI at /docs renders and calls the API under its Content-Security-Policy.
import { test } from "node:test";
import assert from "node:assert/strict";
import { startStack, launchBrowser, shot } from "./harness.mjs";

test("Swagger UI renders every operation and calls the API with no CSP violation", async () => {
  const stack = await startStack();
  const { browser, page } = await launchBrowser();
  try {
    const problems = [];
    page.on("pageerror", (e) => problems.push(`page error: ${e}`));
    await page.exposeFunction("reportViolation", (v) => problems.push(`CSP violation: ${v}`));
    await page.addInitScript(() =>
      document.addEventListener("securitypolicyviolation", (e) => window.reportViolation(`${e.violatedDirective} ${e.blockedURI}`)),
    );
    const response = await page.goto(`${stack.base}/docs/`);
    assert.match(response.headers()["content-security-policy"], /frame-ancestors 'none'/);
    await page.locator(".opblock").first().waitFor({ timeout: 15000 });
    assert.ok((await page.locator(".opblock").count()) >= 20, "the operations are listed");

    // "Try it out" on a body-less write: the spec makes Swagger UI send it as JSON (not 415).
    const created = await fetch(`${stack.base}/v1/sessions`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
    const sid = (await created.json()).id;
    const op = page.locator("#operations-turns-cancelTurn");
    await op.locator(".opblock-summary").click();
    await op.locator("button.try-out__btn").click();
    await op.locator("input[placeholder=sid]").fill(sid);
    await op.locator("input[placeholder=aid]").fill("main");
    await op.locator("button.execute").click();
    const status = op.locator(".live-responses-table tbody .response-col_status");
    await status.first().waitFor({ timeout: 10000 });
    assert.equal((await status.first().textContent()).trim(), "200");
    await shot(page, "docs");
    assert.deepEqual(problems, []);
  } finally {
    await browser.close();
    stack.stop();
  }
});
