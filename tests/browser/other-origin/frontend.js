// A third-party frontend served from its own origin, driving dsh-plan only through `fetch` and
// `EventSource` against the API's origin, as an integrator's page would. The page's query
// names the API (`api`), and may hand it a session (`session`) and a browser token (`token`)
// from the integrator's backend: the token goes in `Authorization: Bearer` on every fetch and,
// because EventSource cannot set headers, in `?access_token=` on the event stream.
const params = new URLSearchParams(location.search);
const API = params.get("api");
const TOKEN = params.get("token");

function log(text) {
  const li = document.createElement("li");
  li.textContent = text;
  document.getElementById("log").append(li);
}

async function call(method, path, body) {
  const headers = TOKEN ? { authorization: `Bearer ${TOKEN}` } : {};
  const write = method !== "GET";
  if (write) headers["content-type"] = "application/json";
  const res = await fetch(API + path, { method, headers, body: write ? JSON.stringify(body ?? {}) : undefined });
  const data = await res.json();
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${data.code}: ${data.detail}`);
  log(`${method} ${path} → ${res.status}`);
  return data;
}

/**
 * The session's event stream. `mark()` is a point in it; `next(from, type, pred)` resolves with
 * the first matching event after that point, so a step never mistakes an earlier state for its
 * own outcome.
 */
function subscribe(sid) {
  const url = new URL(`${API}/v1/sessions/${encodeURIComponent(sid)}/events`);
  if (TOKEN) url.searchParams.set("access_token", TOKEN);
  const source = new EventSource(url);
  const seen = [];
  const waiters = new Set();
  const settle = (w) => {
    const hit = seen.find((e, i) => i >= w.from && e.type === w.type && w.pred(e.data));
    if (!hit) return;
    waiters.delete(w);
    w.resolve(hit.data);
  };
  for (const type of ["plan/view", "question/asked", "assistant/message", "turn/ended"]) {
    source.addEventListener(type, (ev) => {
      seen.push({ type, data: JSON.parse(ev.data) });
      waiters.forEach(settle);
    });
  }
  const opened = new Promise((resolve, reject) => {
    source.onopen = () => resolve();
    source.onerror = () => source.readyState === EventSource.CLOSED && reject(new Error("the event stream was refused"));
  });
  return {
    opened,
    close: () => source.close(),
    mark: () => seen.length,
    next(from, type, pred = () => true) {
      return new Promise((resolve) => {
        const w = { from, type, pred, resolve };
        waiters.add(w);
        settle(w);
      });
    },
  };
}

/** Plan mode on, a message, the plan review over the stream, Approve, and the outcome. */
async function planFlow() {
  let sid = params.get("session");
  if (!sid) sid = (await call("POST", "/v1/sessions")).id; // open mode: the page creates it
  const events = subscribe(sid);
  await events.opened;
  log("event stream open");
  let from = events.mark();
  const set = await call("PUT", `/v1/sessions/${sid}/agents/main/plan`, { active: true });
  await events.next(from, "plan/view", (v) => v.agent === "main" && v.data.active === true);
  from = events.mark();
  const { turn } = await call("POST", `/v1/sessions/${sid}/agents/main/messages`, { text: "fix the login bug" });
  const asked = await events.next(from, "question/asked", (e) => e.data.intent?.kind === "plan-review");
  const q = asked.data;
  log(`review asked: ${q.title}`);
  from = events.mark();
  const answered = await call("POST", `/v1/sessions/${sid}/questions/${q.id}/answer`, { option: q.options.find((o) => o.kind === "approve").id });
  const [view, done] = await Promise.all([
    events.next(from, "plan/view", (v) => v.agent === "main" && v.data.active === false && v.data.pending === undefined),
    events.next(from, "assistant/message", (e) => e.agent === "main" && e.data.text.startsWith("Plan approved")),
    events.next(from, "turn/ended", (e) => e.data.turn === turn),
  ]);
  events.close();
  log(`result: ${done.data.text}`);
  return { sid, outcome: set.outcome, plan: q.detail, answered: answered.state, view, result: done.data.text };
}

/** What a page on an origin the API does not allow gets: every attempt fails in the browser. */
async function refused() {
  const attempt = async (what, f) => {
    try {
      await f();
      return `${what}: succeeded`;
    } catch (e) {
      return `${what}: ${e.name}`;
    }
  };
  return {
    read: await attempt("GET status", () => call("GET", "/v1/status")),
    create: await attempt("POST session", () => call("POST", "/v1/sessions")),
    plan: await attempt("PUT plan", () => call("PUT", `/v1/sessions/${params.get("session")}/agents/main/plan`, { active: true })),
    stream: await new Promise((resolve) => {
      const url = new URL(`${API}/v1/sessions/${encodeURIComponent(params.get("session"))}/events`);
      if (TOKEN) url.searchParams.set("access_token", TOKEN);
      const source = new EventSource(url);
      source.onopen = () => resolve("EventSource: open");
      source.onerror = () => {
        resolve(`EventSource: error, ${source.readyState === EventSource.CLOSED ? "closed" : "retrying"}`);
        source.close();
      };
    }),
  };
}

window.planFlow = planFlow;
window.refused = refused;
