// Starts a real redis-server and a dsh-plan server on free loopback ports, and a headless
// Debian Chromium driven by playwright-core.
import { execFileSync, spawn } from "node:child_process";
import { createServer } from "node:net";
import { mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const artifacts = join(root, "test-artifacts", "browser");
mkdirSync(artifacts, { recursive: true });

export function freePort() {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

async function waitFor(url, tries = 300) {
  for (let i = 0; i < tries; i++) {
    try {
      const r = await fetch(url);
      if (r.ok) return;
    } catch {}
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${url} never became ready`);
}

/** redis-server + dsh-plan; `manifest` (YAML text) composes plugins; `env` adds settings. */
export async function startStack({ manifest, tokenDelayMs = 250, env: extra = {} } = {}) {
  const procs = [];
  const redisPort = await freePort();
  procs.push(spawn(process.env.REDIS_SERVER || "redis-server", ["--port", String(redisPort), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], { stdio: "ignore" }));
  const port = await freePort();
  const env = {
    ...process.env,
    REDIS_URL: `redis://127.0.0.1:${redisPort}`,
    DSH_BIND: `127.0.0.1:${port}`,
    DSH_FIXTURE_TOKEN_DELAY_MS: String(tokenDelayMs),
    RUST_LOG: "warn",
    ...extra,
  };
  if (manifest) {
    const path = join(tmpdir(), `dsh-browser-${port}.yaml`);
    writeFileSync(path, manifest);
    env.DSH_CONFIG = path;
  }
  await new Promise((r) => setTimeout(r, 100));
  const bin = process.env.DSH_PLAN_BIN || join(root, "target", "debug", "dsh-plan");
  const server = spawn(bin, [], { env, stdio: ["ignore", "inherit", "inherit"] });
  procs.push(server);
  const base = `http://127.0.0.1:${port}`;
  await waitFor(`${base}/readyz`);
  return { base, server, redisUrl: env.REDIS_URL, bin, stop: () => procs.forEach((p) => p.kill("SIGKILL")) };
}

/**
 * A stack with credentials on (`DSH_AUTH=keys`) and one API key for `tenant`, as an
 * integrator's backend holds it: `backend(method, path, body)` makes a request with it.
 */
export async function startKeyedStack(tenant, options = {}) {
  const stack = await startStack({ ...options, env: { ...options.env, DSH_AUTH: "keys" } });
  const created = execFileSync(stack.bin, ["keys", "create", "--tenant", tenant], {
    env: { ...process.env, REDIS_URL: stack.redisUrl, RUST_LOG: "warn" },
  }).toString();
  const apiKey = created.trim().split("\n").pop();
  const backend = async (method, path, body) => {
    const res = await fetch(stack.base + path, {
      method,
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
      body: method === "GET" ? undefined : JSON.stringify(body ?? {}),
    });
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status}`);
    return res.json();
  };
  return { ...stack, apiKey, backend };
}

/** Headless Chromium with one page; `viewport` defaults to a desktop window. */
export async function launchBrowser(locale = "en-US", viewport = { width: 1100, height: 800 }) {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
  });
  const context = await browser.newContext({ locale, viewport });
  return { browser, page: await context.newPage() };
}

export async function shot(page, name) {
  await page.screenshot({ path: join(artifacts, `${name}.png`), fullPage: true });
}
