// The reference client: built only on the public REST API and SSE (EventSource, which resumes
// with Last-Event-ID by itself). It shows host-confirmed state only.
import { renderMarkdown } from "./markdown.js";
import { lang, t } from "./i18n.js";
import { authorization, fragmentHasToken, takeToken, withToken } from "./credential.js";

const $ = (id) => document.getElementById(id);
const AGENT = "main";
const STORE = "dsh-plan.sessions";
takeToken();

// Every write sends JSON, even without a body: the server refuses anything else (415), which is
// what keeps other sites' forms and no-cors requests out.
async function api(method, path, body) {
  const headers = authorization();
  const write = method !== "GET";
  if (write) headers["content-type"] = "application/json";
  const res = await fetch(path, {
    method,
    headers,
    body: write ? JSON.stringify(body ?? {}) : undefined,
  });
  const data = await res.json().catch(() => null);
  if (!res.ok) throw Object.assign(new Error(data?.detail || res.statusText), { problem: data });
  return data;
}

// ---- state -----------------------------------------------------------------------------
const app = {
  status: null,
  commands: [],
  sid: null,
  source: null,
  running: false,
  questions: new Map(), // open questions by id
  bubbles: new Map(), // streaming assistant bubbles by turn/step
  finished: new Set(), // turn/step keys whose message is recorded (late deltas are dropped)
  lastId: null, // the last event id the stream delivered
  lastSeq: 0, // its seq: a response describing an older state than this is stale
  retry: 500, // reconnect backoff after the server refused the stream
};
const seqOf = (id) => (id ? Number(String(id).split("-")[0]) || 0 : 0);
// PlanModeControl: `confirmed` is the last host-confirmed view; `token` names the control's
// own request so a result for another session, or after unmounting, is ignored.
const plan = { confirmed: null, busy: false, token: 0 };

// ---- sessions --------------------------------------------------------------------------
const known = () => JSON.parse(localStorage.getItem(STORE) || "[]");
function remember(sid) {
  const list = known().filter((s) => s !== sid);
  list.unshift(sid);
  localStorage.setItem(STORE, JSON.stringify(list.slice(0, 50)));
}
function renderSessions() {
  const ul = $("session-list");
  ul.replaceChildren();
  const list = known();
  if (!list.length) {
    const li = document.createElement("li");
    li.textContent = t.noSessions;
    ul.append(li);
  }
  for (const sid of list) {
    const li = document.createElement("li");
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = sid.slice(0, 12) + "…";
    b.title = sid;
    b.setAttribute("aria-current", String(sid === app.sid));
    b.onclick = () => open(sid);
    li.append(b);
    ul.append(li);
  }
}

async function createSession() {
  const s = await api("POST", "/v1/sessions");
  remember(s.id);
  await open(s.id);
}

function unmount() {
  app.source?.close();
  app.source = null;
  app.questions.clear();
  app.bubbles.clear();
  app.finished.clear();
  app.lastId = null;
  app.lastSeq = 0;
  app.retry = 500;
  app.running = false;
  plan.confirmed = null;
  plan.busy = false;
  plan.token++; // late results of the old session's requests are ignored
  $("conversation").replaceChildren();
}

async function open(sid) {
  unmount();
  app.sid = sid;
  remember(sid);
  history.replaceState(null, "", `#${sid}`);
  renderSessions();
  renderPlan();
  renderDock();
  connect(sid);
}

// EventSource resumes by itself with Last-Event-ID after a dropped connection; after a refused
// one (a non-200, e.g. 503 while the store is down) it stops for good, so reconnect here.
function connect(sid) {
  const query = withToken(new URLSearchParams());
  if (app.lastId) query.set("after", app.lastId);
  const qs = query.toString() ? `?${query}` : "";
  const source = new EventSource(`/v1/sessions/${encodeURIComponent(sid)}/events${qs}`);
  app.source = source;
  const on = (type, fn) =>
    source.addEventListener(type, (ev) => {
      if (sid !== app.sid || source !== app.source) return;
      if (ev.lastEventId && seqOf(ev.lastEventId) >= app.lastSeq) {
        app.lastId = ev.lastEventId;
        app.lastSeq = seqOf(ev.lastEventId);
      }
      app.retry = 500;
      fn(JSON.parse(ev.data));
    });
  source.onerror = () => {
    if (source.readyState !== EventSource.CLOSED || sid !== app.sid || source !== app.source) return;
    setTimeout(() => sid === app.sid && source === app.source && connect(sid), app.retry);
    app.retry = Math.min(app.retry * 2, 5000);
  };
  on("user/message", (e) => addMessage(e.data.source ? "note" : "user", e.data.text));
  on("assistant/delta", (d) => streamDelta(d));
  on("assistant/message", (e) => finishAssistant(e));
  on("tool/result", (e) => toolNote(e));
  on("plan/mode", (e) => addMessage("note", e.data.active ? t.modeOn : t.modeOff));
  on("plan/view", (f) => {
    if (f.agent !== AGENT) return;
    const v = f.data;
    plan.confirmed = { active: v.active, ...(v.pending === undefined ? {} : { pending: v.pending }) };
    renderPlan();
  });
  on("turn/started", (e) => e.agent === AGENT && setRunning(true));
  on("turn/ended", (e) => e.agent === AGENT && setRunning(false));
  on("question/asked", (e) => {
    app.questions.set(e.data.id, { ...e.data, agent: e.agent });
    renderDock();
  });
  const close = (e) => {
    app.questions.delete(e.data.id);
    renderDock();
  };
  on("question/answered", close);
  on("question/dismissed", close);
  source.addEventListener("reset", () => {
    source.close();
    open(sid);
  });
}

/** Applies a plan view from a response, unless the stream already showed a newer state. */
function confirmFromResponse(view, lastEventId) {
  if (seqOf(lastEventId) <= app.lastSeq) return;
  plan.confirmed = view;
}

// ---- conversation ----------------------------------------------------------------------
function addMessage(kind, text) {
  const div = document.createElement("div");
  div.className = `msg ${kind}`;
  div.textContent = text;
  $("conversation").append(div);
  div.scrollIntoView({ block: "end" });
  return div;
}
function streamDelta(f) {
  if (f.agent !== AGENT) return;
  const d = f.data;
  const key = `${d.turn}/${d.step}`;
  if (app.finished.has(key)) return; // deltas are ephemeral and may trail the recorded message
  let b = app.bubbles.get(key);
  if (!b) {
    b = addMessage("assistant", "");
    b.dataset.streaming = "true";
    app.bubbles.set(key, b);
  }
  b.textContent += d.text;
}
function finishAssistant(e) {
  if (e.agent !== AGENT) return;
  const key = `${e.data.turn}/${e.data.step}`;
  const b = app.bubbles.get(key) || addMessage("assistant", "");
  app.bubbles.delete(key);
  app.finished.add(key);
  b.textContent = e.data.text;
  delete b.dataset.streaming;
  for (const call of e.data.tool_calls || []) {
    const span = document.createElement("span");
    span.className = "tool";
    span.textContent = `→ ${call.name}`;
    b.append(document.createElement("br"), span);
  }
}
function toolNote(e) {
  const r = e.data.result || {};
  addMessage("note", e.data.ok ? `${e.data.name}: ${JSON.stringify(r)}` : `${e.data.name}: ${r.reason || "failed"}`);
}
function setRunning(running) {
  app.running = running;
  $("stop").hidden = !running;
}

// ---- PlanModeControl -------------------------------------------------------------------
function renderPlan() {
  const control = $("plan-control");
  const enabled = !!app.status?.features?.plan_mode && !!app.sid && !!plan.confirmed;
  control.hidden = !enabled;
  if (!enabled) return;
  const v = plan.confirmed;
  const selected = v.pending ?? v.active; // presence matters: pending false is "Default, pending"
  const pending = v.pending !== undefined;
  const label = selected ? t.plan : t.default;
  const chip = $("plan-chip");
  chip.textContent = pending ? `${label} · ${t.pending}` : label;
  chip.dataset.mode = selected ? "plan" : "default";
  chip.dataset.pending = String(pending);
  const select = $("plan-select");
  select.value = selected ? "plan" : "default";
  select.disabled = plan.busy;
  $("plan-desc").textContent = pending ? t.descPending(label) : v.active ? t.descActive : t.descInactive;
}

async function choosePlan() {
  const select = $("plan-select");
  const target = select.value === "plan";
  const sid = app.sid;
  const token = ++plan.token;
  plan.busy = true;
  renderPlan(); // shows the confirmed value until the host answers: never optimistic
  $("plan-error").hidden = true;
  try {
    const r = await api("PUT", `/v1/sessions/${sid}/agents/${AGENT}/plan`, { active: target });
    if (token !== plan.token || sid !== app.sid) return;
    confirmFromResponse(r.plan, r.last_event_id);
  } catch {
    if (token !== plan.token || sid !== app.sid) return;
    $("plan-error").textContent = t.planError;
    $("plan-error").hidden = false;
  } finally {
    if (token === plan.token && sid === app.sid) {
      plan.busy = false;
      renderPlan();
    }
  }
}

// ---- composer --------------------------------------------------------------------------
async function submit(ev) {
  ev.preventDefault();
  const input = $("input");
  const text = input.value.trim();
  if (!text || !app.sid) return;
  const sid = app.sid;
  $("composer-error").hidden = true;
  $("send").disabled = true;
  try {
    if (text.startsWith("/")) {
      const r = await api("POST", `/v1/sessions/${sid}/agents/${AGENT}/commands`, { input: text });
      if (sid === app.sid && r.plan) {
        confirmFromResponse(r.plan, r.last_event_id);
        renderPlan();
      }
    } else {
      await api("POST", `/v1/sessions/${sid}/agents/${AGENT}/messages`, { text });
    }
    if (sid === app.sid) input.value = "";
  } catch (e) {
    if (sid === app.sid) {
      $("composer-error").textContent = e.message || t.sendError;
      $("composer-error").hidden = false;
    }
  } finally {
    $("send").disabled = false;
    renderSuggestions();
  }
}

function renderSuggestions() {
  const ul = $("suggestions");
  const value = $("input").value;
  const matches = value.startsWith("/") && !value.includes(" ")
    ? app.commands.filter((c) => `/${c.name}`.startsWith(value))
    : [];
  ul.replaceChildren(
    ...matches.map((c, i) => {
      const li = document.createElement("li");
      li.setAttribute("role", "option");
      li.setAttribute("aria-selected", String(i === 0));
      li.dataset.name = c.name;
      li.append(c.usage);
      const d = document.createElement("span");
      d.className = "desc";
      d.textContent = c.description;
      li.append(d);
      li.onclick = () => {
        $("input").value = `/${c.name} `;
        $("input").focus();
        renderSuggestions();
      };
      return li;
    }),
  );
  ul.hidden = matches.length === 0;
}

// ---- questions: the plan-review card, or a generic option list -------------------------
function openQuestion() {
  for (const q of app.questions.values()) if (q.agent === AGENT) return q;
  return null;
}
function renderDock() {
  const q = openQuestion();
  $("review").hidden = !q;
  $("composer").hidden = !!q;
  if (!q) return;
  const review = q.intent?.kind === "plan-review";
  $("review-title").textContent = review ? t.reviewTitle : q.title;
  $("review-plan").innerHTML = renderMarkdown(q.detail); // sanitized: untrusted content
  const options = $("review-options");
  options.replaceChildren();
  $("review-approve").hidden = !review;
  $("review-keep").hidden = !review;
  if (!review) {
    for (const label of q.options) {
      const b = document.createElement("button");
      b.type = "button";
      b.textContent = label;
      b.onclick = () => answer(q, label);
      options.append(b);
    }
  }
  $("review-text").parentElement.hidden = !q.allow_text;
  $("review-feedback-label").textContent = review ? t.feedback : t.answerText;
  $("review-approve").onclick = () => answer(q, q.intent?.approve);
  const keep = q.options.find((o) => o !== q.intent?.approve);
  $("review-keep").onclick = () => answer(q, keep);
}
async function answer(q, label) {
  const text = $("review-text").value.trim();
  const body = {};
  if (label) body.label = label;
  if (text && q.allow_text && label !== q.intent?.approve) body.text = text;
  $("review-error").hidden = true;
  try {
    await api("POST", `/v1/sessions/${app.sid}/questions/${q.id}/answer`, body);
    $("review-text").value = "";
  } catch {
    $("review-error").textContent = t.answerError;
    $("review-error").hidden = false;
  }
}

// ---- start -----------------------------------------------------------------------------
function labels() {
  document.documentElement.lang = lang;
  $("new-session").textContent = t.newSession;
  $("sessions-title").textContent = t.sessions;
  $("send").textContent = t.send;
  $("stop").textContent = t.stop;
  $("input").placeholder = t.placeholder;
  $("plan-select").setAttribute("aria-label", t.modeLabel);
  $("plan-select").options[0].textContent = t.default;
  $("plan-select").options[1].textContent = t.plan;
  $("review-approve").textContent = t.approve;
  $("review-keep").textContent = t.keepPlanning;
}

async function start() {
  labels();
  $("new-session").onclick = () => createSession();
  $("plan-select").onchange = choosePlan;
  $("composer").onsubmit = submit;
  $("input").oninput = renderSuggestions;
  $("input").onkeydown = (e) => {
    if (e.key === "Enter" && !e.shiftKey) submit(e);
  };
  $("stop").onclick = () => app.sid && api("POST", `/v1/sessions/${app.sid}/agents/${AGENT}/cancel`).catch(() => {});
  app.status = await api("GET", "/v1/status");
  app.commands = (await api("GET", "/v1/commands")).commands;
  renderSessions();
  const fromHash = location.hash.slice(1);
  if (fromHash) await open(fromHash);
  // A token handed to an already open client (the fragment changed, no page load).
  window.addEventListener("hashchange", () => {
    if (!fragmentHasToken()) return;
    takeToken();
    const sid = location.hash.slice(1);
    if (sid) open(sid);
  });
}
start();
