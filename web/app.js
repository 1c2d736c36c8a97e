// The reference client: built only on the public REST API and SSE (EventSource, which resumes
// with Last-Event-ID by itself). It shows host-confirmed state only.
import { lang, t } from "./i18n.js";
import { fragmentHasToken, takeToken, withToken } from "./credential.js";
import { api, FINAL, refusal, whenFinal } from "./api.js";
import { renderMarkdown } from "./markdown.js";
import { Transcript } from "./transcript.js";
import { PlanHistory } from "./history.js";
import { forget, remember, renderSessionList } from "./sessions.js";
import { answerBody, isReview, optionLabel, optionOf, options } from "./questions.js";

const $ = (id) => document.getElementById(id);
const AGENT = "main";
takeToken();

// ---- state -----------------------------------------------------------------------------
const app = {
  status: null,
  commands: [],
  sid: null,
  source: null,
  running: false,
  stopped: null, // why the client gave up on this session (a final problem code), or null
  questions: new Map(), // open questions by id
  lastId: null, // the last event id the stream delivered
  lastSeq: 0, // its seq: a response describing an older state than this is stale
  retry: 500, // reconnect backoff after the server refused the stream
};
const transcript = new Transcript($("conversation"));
const planHistory = new PlanHistory($("history"), AGENT);
const seqOf = (id) => (id ? Number(String(id).split("-")[0]) || 0 : 0);
// Frames are read defensively: a recorded event carries its payload in `data`, a derived
// frame (`plan/view`, `assistant/delta`) may carry it at the top level or in `data` too.
const agentOf = (f) => f?.agent ?? f?.data?.agent;
const payloadOf = (f, field) => (f?.data && typeof f.data === "object" && field in f.data ? f.data : f);
// PlanModeControl: `confirmed` is the last host-confirmed view; `token` names the control's
// own request so a result for another session, or after unmounting, is ignored.
const plan = { confirmed: null, busy: false, token: 0 };

// ---- sessions --------------------------------------------------------------------------
const renderSessions = () => renderSessionList($("session-list"), app.sid, open);

async function createSession() {
  const s = await api("POST", "/v1/sessions");
  remember(s.id);
  await open(s.id);
}

function unmount() {
  app.source?.close();
  app.source = null;
  app.questions.clear();
  app.lastId = null;
  app.lastSeq = 0;
  app.retry = 500;
  app.running = false;
  app.stopped = null;
  plan.confirmed = null;
  plan.busy = false;
  plan.token++; // late results of the old session's requests are ignored
  transcript.clear();
  planHistory.reset(null);
  $("notice").hidden = true;
  $("dock").hidden = false;
  $("stop").hidden = true;
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
  if (historyAvailable()) {
    planHistory.reset(sid);
    planHistory.load();
  }
  renderHistory();
}

/**
 * The client gives up on the session: it does not exist (any more) or the credential is not
 * good for it. No stream, no retries; the user is told why and can pick or start another.
 */
function stop(code) {
  app.source?.close();
  app.source = null;
  app.stopped = code;
  if (app.sid && (code === "session-not-found" || code === "invalid-id" || code === "deleted")) {
    forget(app.sid);
    renderSessions();
  }
  app.questions.clear();
  plan.confirmed = null;
  planHistory.reset(null);
  renderPlan();
  renderDock();
  renderHistory();
  $("dock").hidden = true;
  $("notice").textContent = t.final[code] ?? t.final.unauthorized;
  $("notice").hidden = false;
}
whenFinal((code, path) => {
  // A refusal about another session (a late answer after switching) changes nothing here.
  const about = path.match(/^\/v1\/sessions\/([^/?]+)/)?.[1];
  if (about && decodeURIComponent(about) !== app.sid) return;
  stop(code);
});

// EventSource resumes by itself with Last-Event-ID after a dropped connection; after a refused
// one (a non-200) it stops for good. Then the client asks why: a final refusal (no such
// session, no valid credential) stops it, anything else (e.g. 503 while the store is down) is
// retried with backoff.
function connect(sid) {
  const query = withToken(new URLSearchParams());
  if (app.lastId) query.set("after", app.lastId);
  const qs = query.toString() ? `?${query}` : "";
  const url = `/v1/sessions/${encodeURIComponent(sid)}/events${qs}`;
  const source = new EventSource(url);
  app.source = source;
  const current = () => sid === app.sid && source === app.source;
  const on = (type, fn) =>
    source.addEventListener(type, (ev) => {
      if (!current()) return;
      if (ev.lastEventId && seqOf(ev.lastEventId) >= app.lastSeq) {
        app.lastId = ev.lastEventId;
        app.lastSeq = seqOf(ev.lastEventId);
      }
      app.retry = 500;
      fn(JSON.parse(ev.data));
    });
  source.onerror = async () => {
    if (source.readyState !== EventSource.CLOSED || !current()) return;
    const code = await refusal(url);
    if (!current()) return;
    if (FINAL.has(code)) return stop(code);
    setTimeout(() => current() && connect(sid), app.retry);
    app.retry = Math.min(app.retry * 2, 5000);
  };
  const mine = (fn) => (f) => agentOf(f) === AGENT && fn(f);
  on("user/message", (e) => transcript.message(e.data.source ? "note" : "user", e.data.text));
  on("assistant/delta", mine((d) => transcript.delta(payloadOf(d, "text"))));
  on("assistant/message", mine((e) => transcript.assistant(e.data)));
  on("tool/result", mine((e) => transcript.toolResult(e.data)));
  on("plan/mode", (e) => transcript.message("note", e.data.active ? t.modeOn : t.modeOff));
  on("plan/view", mine((f) => {
    const v = payloadOf(f, "active");
    plan.confirmed = { active: v.active, ...(v.pending === undefined || v.pending === null ? {} : { pending: v.pending }) };
    renderPlan();
  }));
  on("plan/revision", mine((f) => planHistory.changed(payloadOf(f, "number"))));
  on("turn/started", mine(() => setRunning(true)));
  on("turn/ended", mine((e) => {
    setRunning(false);
    // A question its turn left open (the turn was cancelled) can no longer be answered.
    for (const [id, q] of app.questions) if (q.turn === e.data.turn) app.questions.delete(id);
    renderDock();
  }));
  on("question/asked", mine((e) => {
    app.questions.set(e.data.id, { ...e.data, agent: e.agent });
    transcript.asked(e.data);
    renderDock();
  }));
  on("question/answered", mine((e) => {
    app.questions.delete(e.data.id);
    transcript.answered(e.data);
    renderDock();
  }));
  on("question/dismissed", mine((e) => {
    app.questions.delete(e.data.id);
    transcript.dismissed(e.data);
    renderDock();
  }));
  on("session/deleted", () => stop("deleted"));
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

// ---- plan history --------------------------------------------------------------------
const historyAvailable = () => !!app.status?.features?.plan_mode && !!app.sid && !app.stopped;
function renderHistory(open = !$("history").hidden) {
  const available = historyAvailable();
  const shown = available && open;
  $("history-toggle").hidden = !available;
  $("history-toggle").setAttribute("aria-expanded", String(shown));
  $("history").hidden = !shown;
  document.body.classList.toggle("with-history", shown);
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
  $("send").hidden = !!q;
  if (!q) return;
  const review = isReview(q);
  $("review-title").textContent = review ? t.reviewTitle : q.title;
  $("review-plan").innerHTML = renderMarkdown(q.detail); // sanitized: untrusted content
  // A review's Approve and Keep planning have their own buttons; every other option one each.
  const approve = review ? optionOf(q, "approve") : undefined;
  const keep = review ? optionOf(q, "keep_planning") : undefined;
  $("review-approve").hidden = !approve;
  $("review-keep").hidden = !keep;
  $("review-approve").onclick = () => answer(q, approve);
  $("review-keep").onclick = () => answer(q, keep);
  $("review-dismiss").onclick = () => dismiss(q);
  $("review-options").replaceChildren(
    ...options(q)
      .filter((o) => o.id !== approve?.id && o.id !== keep?.id)
      .map((o) => {
        const b = document.createElement("button");
        b.type = "button";
        b.textContent = optionLabel(q, o);
        b.dataset.option = o.id;
        b.onclick = () => answer(q, o);
        return b;
      }),
  );
  $("review-text").parentElement.hidden = !q.allow_text;
  $("review-feedback-label").textContent = review ? t.feedback : t.answerText;
}
/** Sends the answer naming `option` by id (with the typed text); the stream closes the card. */
async function answer(q, option) {
  const text = $("review-text").value.trim();
  await decide(`/v1/sessions/${app.sid}/questions/${q.id}/answer`, answerBody(q, option, text));
}
const dismiss = (q) => decide(`/v1/sessions/${app.sid}/questions/${q.id}/dismiss`);
async function decide(path, body) {
  const buttons = $("review").querySelectorAll("button");
  buttons.forEach((b) => (b.disabled = true));
  $("review-error").hidden = true;
  try {
    await api("POST", path, body);
    $("review-text").value = "";
  } catch {
    $("review-error").textContent = t.answerError;
    $("review-error").hidden = false;
  } finally {
    buttons.forEach((b) => (b.disabled = false));
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
  $("review-dismiss").textContent = t.dismiss;
  $("history-toggle").textContent = t.historyTitle;
  $("history-title").textContent = t.historyTitle;
  $("history-close").textContent = t.close;
  $("history-close").setAttribute("aria-label", t.closeHistory);
  $("history").querySelector(".history-tabs").setAttribute("aria-label", t.historyView);
  $("history").querySelector('[data-view="plan"]').textContent = t.planText;
}

async function start() {
  labels();
  $("new-session").onclick = () => createSession();
  $("plan-select").onchange = choosePlan;
  $("history-toggle").onclick = () => renderHistory($("history").hidden);
  $("history-close").onclick = () => {
    renderHistory(false);
    $("history-toggle").focus();
  };
  for (const b of $("history").querySelectorAll(".history-tabs button")) b.onclick = () => planHistory.show(b.dataset.view);
  $("composer").onsubmit = submit;
  $("input").oninput = renderSuggestions;
  $("input").onkeydown = (e) => {
    if (e.key === "Enter" && !e.shiftKey) submit(e);
  };
  $("stop").onclick = () => app.sid && api("POST", `/v1/sessions/${app.sid}/agents/${AGENT}/cancel`).catch(() => {});
  try {
    app.status = await api("GET", "/v1/status");
    app.commands = (await api("GET", "/v1/commands")).commands;
  } catch (e) {
    // A final refusal has already said so; anything else is a server that is not there yet.
    if (!app.stopped) $("notice").textContent = e.message || t.sendError;
    $("notice").hidden = false;
    return;
  }
  renderSessions();
  const fromHash = location.hash.slice(1);
  if (fromHash) await open(fromHash);
  // Another session named in the address bar, or a token handed to an already open client
  // (the fragment changed, no page load).
  window.addEventListener("hashchange", () => {
    const token = fragmentHasToken();
    if (token) takeToken();
    const sid = location.hash.slice(1);
    if (sid && (token || sid !== app.sid)) open(sid);
  });
}
start();
