// Browsers on other origins: a frontend served from another port drives the plan flow with
// `fetch` and `EventSource` against an API that lists its origin in DSH_CORS_ORIGINS, and the
// same page on an origin the API does not list gets nothing. The pages are other-origin/*.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { startStack, launchBrowser, freePort, shot } from "./harness.mjs";

const pages = join(dirname(fileURLToPath(import.meta.url)), "other-origin");
const files = {
  "/": ["text/html; charset=utf-8", readFileSync(join(pages, "index.html"))],
  "/frontend.js": ["text/javascript; charset=utf-8", readFileSync(join(pages, "frontend.js"))],
};

/** A static server for the frontend on its own origin, `http://127.0.0.1:<port>`. */
async function serveFrontend() {
  const port = await freePort();
  const server = createServer((req, res) => {
    const file = files[new URL(req.url, "http://x").pathname];
    if (!file) return res.writeHead(404).end();
    res.writeHead(200, { "content-type": file[0] }).end(file[1]);
  });
  await new Promise((resolve) => server.listen(port, "127.0.0.1", resolve));
  return { origin: `http://127.0.0.1:${port}`, close: () => server.close() };
}

let allowed;
let other;
let stack;
let apiKey;
let browser;
let page;
const consoleErrors = [];

before(async () => {
  allowed = await serveFrontend();
  other = await serveFrontend();
  // Credentials on: the integrator's backend holds an API key, its frontend only tokens.
  stack = await startStack({ tokenDelayMs: 20, env: { DSH_CORS_ORIGINS: allowed.origin, DSH_AUTH: "keys" } });
  const created = execFileSync(stack.bin, ["keys", "create", "--tenant", "web-test"], {
    env: { ...process.env, REDIS_URL: stack.redisUrl, RUST_LOG: "warn" },
  }).toString();
  apiKey = created.trim().split("\n").pop();
  assert.match(apiKey, /^dsh_/);
  ({ browser, page } = await launchBrowser());
  page.on("console", (m) => m.type() === "error" && consoleErrors.push(m.text()));
});
after(async () => {
  await browser?.close();
  stack?.stop();
  allowed?.close();
  other?.close();
});

/** A request of the integrator's backend, with its API key. */
async function backend(method, path, body, on = stack, key = apiKey) {
  const auth = key ? { authorization: `Bearer ${key}` } : {};
  const res = await fetch(on.base + path, {
    method,
    headers: method === "GET" ? auth : { ...auth, "content-type": "application/json" },
    body: method === "GET" ? undefined : JSON.stringify(body ?? {}),
  });
  assert.ok(res.ok, `${method} ${path}: ${res.status}`);
  return res.json();
}

/** The backend creates the session its frontend will drive. */
async function backendCreatesSession() {
  return (await backend("POST", "/v1/sessions")).id;
}

/**
 * The integrator's backend mints a browser token for `sid` with these actions (its API key never
 * leaves the backend) and hands it to its frontend.
 */
async function mintToken(sid, scopes) {
  const minted = await backend("POST", `/v1/sessions/${sid}/tokens`, { scopes, subject: "browser-user" });
  assert.match(minted.expires_at, /Z$/);
  return minted.token;
}

function frontendUrl(origin, sid, token, on = stack) {
  const q = new URLSearchParams({ api: on.base, session: sid });
  if (token) q.set("token", token);
  return `${origin}/?${q}`;
}

test("a frontend on an allowed origin drives plan mode, the review and Approve over fetch and EventSource", async () => {
  const sid = await backendCreatesSession();
  const token = await mintToken(sid, ["read", "plan", "prompt", "answer"]);
  await page.goto(frontendUrl(allowed.origin, sid, token));
  const result = await page.evaluate(() => window.planFlow());
  assert.equal(result.sid, sid);
  // The approval is recorded as the token's subject's.
  const log = await backend("GET", `/v1/sessions/${sid}/log?limit=1000`);
  const answered = log.events.find((e) => e.type === "question/answered");
  assert.equal(answered.data.by, "token:browser-user");
  assert.equal(result.outcome, "committed");
  assert.match(result.plan, /fix the login bug/);
  assert.equal(result.answered, "answered");
  const { id: viewId, ...view } = result.view;
  assert.match(viewId, /^[0-9]+-0$/, "a view names the event that changed it");
  assert.deepEqual(view, { type: "plan/view", session: result.sid, agent: "main", data: { active: false } });
  assert.equal(result.result, "Plan approved. Starting work.");
  await shot(page, "cors-allowed-origin");
  assert.deepEqual(consoleErrors, [], "no CORS or other errors in the console");
});

test("a frontend on an allowed origin creates its own session on an open server (no keys)", async () => {
  const open = await startStack({ tokenDelayMs: 20, env: { DSH_CORS_ORIGINS: allowed.origin } });
  try {
    await page.goto(`${allowed.origin}/?${new URLSearchParams({ api: open.base })}`);
    const result = await page.evaluate(() => window.planFlow());
    assert.match(result.sid, /^[0-9a-f]{32}$/);
    assert.equal(result.result, "Plan approved. Starting work.");
  } finally {
    open.stop();
  }
});

test("a frontend without a token, or with one for another session, is refused on an allowed origin", async () => {
  const sid = await backendCreatesSession();
  const elsewhere = await mintToken(await backendCreatesSession(), ["read", "plan", "prompt", "answer"]);
  for (const token of [null, elsewhere]) {
    await page.goto(frontendUrl(allowed.origin, sid, token));
    const status = await page.evaluate(async ({ api, sid, token }) => {
      const headers = token ? { authorization: `Bearer ${token}` } : {};
      const res = await fetch(`${api}/v1/sessions/${sid}`, { headers });
      return [res.status, (await res.json()).code];
    }, { api: stack.base, sid, token });
    assert.deepEqual(status, token ? [404, "session-not-found"] : [401, "unauthorized"]);
  }
});

test("a frontend on an origin the API does not allow can neither read, write nor stream", async () => {
  const sid = await backendCreatesSession();
  const token = await mintToken(sid, ["read", "plan", "prompt", "answer"]);
  await page.goto(frontendUrl(other.origin, sid, token));
  const result = await page.evaluate(() => window.refused());
  assert.deepEqual(result, {
    read: "GET status: TypeError",
    create: "POST session: TypeError",
    plan: "PUT plan: TypeError",
    stream: "EventSource: error, closed",
  });
  // The PUT never reached a handler: its preflight was refused.
  const log = await backend("GET", `/v1/sessions/${sid}/log`);
  assert.deepEqual(log.events.map((e) => e.type), ["session/created"]);
  await shot(page, "cors-other-origin");
});
