// Flow 4: without plan mode composed, the control is absent.
import { test } from "node:test";
import assert from "node:assert/strict";
import { startStack, launchBrowser, shot } from "./harness.mjs";

test("flow 4: without plan mode composed the plan control is absent", async () => {
  const stack = await startStack({ manifest: "plugins:\n  - id: commands\n  - id: questions\n" });
  const { browser, page } = await launchBrowser();
  try {
    await page.goto(stack.base + "/");
    await page.click("#new-session");
    await page.waitForFunction(() => location.hash.length > 1);
    await page.fill("#input", "hello");
    await page.click("#send");
    await page.locator(".msg.assistant", { hasText: "Done: hello" }).waitFor({ timeout: 15000 });
    assert.equal(await page.locator("#plan-control").isHidden(), true);
    await page.fill("#input", "/");
    assert.equal(await page.locator("#suggestions").isHidden(), true, "no /plan to suggest");
    await shot(page, "flow4-no-plan-mode");
  } finally {
    await browser.close();
    stack.stop();
  }
});
