// The REST calls of the reference client, and the line between a refusal worth retrying and
// one that is final: a session that does not exist (or no longer does) and a credential that
// is missing or expired do not get better by asking again.
import { authorization } from "./credential.js";

/** Problem codes after which the client stops: retrying cannot succeed. */
export const FINAL = new Set(["session-not-found", "invalid-id", "token-expired", "unauthorized"]);

let onFinal = () => {};
/** `fn(code, path)` runs when a request is refused with one of the [`FINAL`] codes. */
export function whenFinal(fn) {
  onFinal = fn;
}

// Every write sends JSON, even without a body: the server refuses anything else (415), which is
// what keeps other sites' forms and no-cors requests out.
export async function api(method, path, body) {
  const headers = authorization();
  const write = method !== "GET";
  if (write) headers["content-type"] = "application/json";
  const res = await fetch(path, {
    method,
    headers,
    body: write ? JSON.stringify(body ?? {}) : undefined,
  });
  const data = await res.json().catch(() => null);
  if (!res.ok) {
    if (FINAL.has(data?.code)) onFinal(data.code, path);
    throw Object.assign(new Error(data?.detail || res.statusText), { problem: data });
  }
  return data;
}

/**
 * Why the events stream at `url` was refused: EventSource hides the status of a refused
 * stream, so ask the same route once with fetch. Its problem `code`, or null when the stream
 * opens now (the probe is then dropped at once) or the network failed (worth a retry).
 */
export async function refusal(url) {
  const abort = new AbortController();
  try {
    const res = await fetch(url, { signal: abort.signal, headers: { accept: "text/event-stream" } });
    if (res.ok) return null;
    const data = await res.json().catch(() => null);
    return data?.code ?? null;
  } catch {
    return null;
  } finally {
    abort.abort();
  }
}
