// Starts the real dsh-plan binary on a free loopback port, on the embedded log or on a
// redis-server of its own, for the SDK's flow test.
import { spawn } from "node:child_process";
import { createServer } from "node:net";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

function freePort() {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

async function ready(url) {
  for (let i = 0; i < 400; i++) {
    try {
      if ((await fetch(url)).ok) return;
    } catch {}
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${url} never became ready`);
}

/** `store`: "memory" (the embedded default) or "redis" (a redis-server on a free port). */
export async function startServer(store) {
  const procs = [];
  const env = { ...process.env, RUST_LOG: "warn", DSH_FIXTURE_TOKEN_DELAY_MS: "1" };
  delete env.REDIS_URL;
  if (store === "redis") {
    const redisPort = await freePort();
    procs.push(spawn(process.env.REDIS_SERVER || "redis-server", ["--port", String(redisPort), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], { stdio: "ignore" }));
    env.REDIS_URL = `redis://127.0.0.1:${redisPort}`;
    await new Promise((r) => setTimeout(r, 100));
  }
  const port = await freePort();
  env.DSH_BIND = `127.0.0.1:${port}`;
  const bin = process.env.DSH_PLAN_BIN || join(root, "target", "debug", "dsh-plan");
  procs.push(spawn(bin, [], { env, stdio: ["ignore", "inherit", "inherit"] }));
  const base = `http://127.0.0.1:${port}`;
  await ready(`${base}/readyz`);
  return { base, stop: () => procs.forEach((p) => p.kill("SIGKILL")) };
}
