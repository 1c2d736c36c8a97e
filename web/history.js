// The plan history panel: an agent's plan revisions (number, status, when submitted, who
// decided and when, the feedback it was sent back with), one revision's plan as sanitized
// Markdown, and the unified diff from the revision before. Only host-confirmed state: the list
// is loaded once when a session opens, then kept current by the stream's `plan/revision`
// frames (each one fetches its revision for the fields a frame does not carry). No polling.
import { api } from "./api.js";
import { lang, t } from "./i18n.js";
import { renderMarkdown } from "./markdown.js";
import { who } from "./questions.js";

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

// A revision is decided once: a pending view never replaces a decided one, whatever order
// the responses and frames arrive in.
const settled = (r) => r && r.status !== "pending";

const when = new Intl.DateTimeFormat(lang, { dateStyle: "medium", timeStyle: "medium" });
function time(iso) {
  const node = el("time", null, when.format(new Date(iso)));
  node.dateTime = iso;
  return node;
}

/** The diff's lines, each a text node in a span classed by what it is. */
export function diffLines(diff) {
  const lines = diff.split("\n");
  if (lines.at(-1) === "") lines.pop();
  return lines.map((line) => {
    const kind = /^(---|\+\+\+) /.test(line)
      ? "meta"
      : line.startsWith("@@")
        ? "hunk"
        : line.startsWith("+")
          ? "add"
          : line.startsWith("-")
            ? "del"
            : line.startsWith("\\")
              ? "meta"
              : "ctx";
    return el("span", `diff-line ${kind}`, line);
  });
}

export class PlanHistory {
  /** `root` holds the panel's elements (see index.html); `agent` is the agent it follows. */
  constructor(root, agent) {
    this.root = root;
    this.agent = agent;
    this.list = root.querySelector("#history-list");
    this.detail = root.querySelector("#history-detail");
    this.error = root.querySelector("#history-error");
    this.reset(null);
  }

  /** Forgets everything and follows session `sid` (null: none). */
  reset(sid) {
    this.sid = sid;
    this.generation = (this.generation ?? 0) + 1; // late results for another session are dropped
    this.revisions = new Map(); // number -> revision, as the host last confirmed it
    this.diffs = new Map(); // number -> the diff from the revision before (immutable)
    this.selected = null; // a number the user chose; null follows the latest
    this.view = "plan"; // "plan" | "diff"
    this.error.hidden = true;
    this.render();
  }

  base() {
    return `/v1/sessions/${encodeURIComponent(this.sid)}/agents/${encodeURIComponent(this.agent)}/plans`;
  }

  /** Runs `request` for the current session; its result is passed on only if still current. */
  async current(request) {
    const generation = this.generation;
    try {
      const result = await request();
      if (generation !== this.generation) return undefined;
      this.error.hidden = true;
      return result;
    } catch (e) {
      if (generation === this.generation) this.fail(e);
      return undefined;
    }
  }

  fail(e) {
    this.error.textContent = e?.message ? `${t.historyError} ${e.message}` : t.historyError;
    this.error.hidden = false;
  }

  /** Loads every revision (all pages). */
  async load() {
    let cursor = null;
    do {
      const query = new URLSearchParams({ limit: "200" });
      if (cursor) query.set("cursor", cursor);
      const page = await this.current(() => api("GET", `${this.base()}?${query}`));
      if (!page) return;
      for (const r of page.revisions) this.upsert(r);
      cursor = page.has_more ? page.next_cursor : null;
    } while (cursor);
    this.render();
  }

  /** A `plan/revision` frame: applied at once, then its revision fetched for the rest. */
  async changed(frame) {
    if (!this.sid || typeof frame?.number !== "number") return;
    this.upsert(frame);
    this.render();
    this.root.querySelector("#history-status").textContent = `${t.revision(frame.number)}: ${t.status[frame.status] ?? frame.status}`;
    const r = await this.current(() => api("GET", `${this.base()}/${frame.number}`));
    if (!r) return;
    this.upsert(r);
    this.render();
  }

  upsert(r) {
    const known = this.revisions.get(r.number);
    if (settled(known) && !settled(r)) return;
    this.revisions.set(r.number, { ...known, ...r });
  }

  shown() {
    const n = this.selected ?? Math.max(0, ...this.revisions.keys());
    return this.revisions.get(n) ?? null;
  }

  select(n) {
    this.selected = n;
    this.render();
  }

  show(view) {
    this.view = view;
    this.render();
  }

  render() {
    const revisions = [...this.revisions.values()].sort((a, b) => a.number - b.number);
    const shown = this.shown();
    const focused = this.list.contains(document.activeElement) ? document.activeElement.dataset.revision : null;
    this.list.replaceChildren(...revisions.map((r) => this.item(r, r === shown)));
    if (!revisions.length) this.list.append(el("li", "history-empty", t.historyEmpty));
    if (focused) this.list.querySelector(`[data-revision="${focused}"]`)?.focus(); // re-rendered, not moved
    this.renderDetail(shown);
  }

  item(r, current) {
    const li = el("li", "history-item");
    li.dataset.status = r.status;
    const b = el("button", "history-pick");
    b.type = "button";
    b.dataset.revision = String(r.number);
    b.setAttribute("aria-pressed", String(current));
    b.onclick = () => this.select(r.number);
    const head = el("span", "history-head");
    head.append(el("strong", "history-number", t.revision(r.number)), " ", el("span", "badge", t.status[r.status] ?? r.status));
    b.append(head);
    if (r.submitted_at) {
      const line = el("span", "history-meta");
      line.append(`${t.submitted} `, time(r.submitted_at));
      b.append(line);
    }
    const name = who(r.decided_by);
    if (name || r.decided_at) {
      const line = el("span", "history-meta decided");
      line.append(name ? t.decidedBy(name) : t.decided);
      if (r.decided_at) line.append(" · ", time(r.decided_at));
      b.append(line);
    }
    if (r.feedback && r.status === "revising") {
      const quote = el("span", "history-feedback");
      quote.append(el("span", "feedback-label", `${t.feedbackGiven}: `), r.feedback);
      b.append(quote);
    }
    li.append(b);
    return li;
  }

  renderDetail(r) {
    this.detail.hidden = !r;
    if (!r) return;
    const tabs = this.detail.querySelector(".history-tabs");
    for (const b of tabs.querySelectorAll("button")) b.setAttribute("aria-pressed", String(b.dataset.view === this.view));
    tabs.querySelector('[data-view="diff"]').textContent = r.number > 1 ? t.changesSince(r.number - 1) : t.changesFirst;
    const body = this.detail.querySelector("#history-body");
    body.setAttribute("aria-label", this.view === "plan" ? t.revision(r.number) : t.changesSince(r.number - 1));
    if (this.view === "plan") {
      const md = el("div", "markdown");
      md.innerHTML = renderMarkdown(r.text ?? ""); // sanitized: untrusted content
      body.replaceChildren(md);
      return;
    }
    const diff = this.diffs.get(r.number);
    if (diff === undefined) {
      body.replaceChildren(el("p", "history-meta", t.loading));
      this.loadDiff(r.number);
      return;
    }
    const pre = el("pre", "diff");
    pre.append(...diffLines(diff));
    body.replaceChildren(diff ? pre : el("p", "history-meta", t.noChanges));
  }

  async loadDiff(n) {
    if (this.loadingDiff === `${this.generation}/${n}`) return;
    this.loadingDiff = `${this.generation}/${n}`;
    const d = await this.current(() => api("GET", `${this.base()}/${n}/diff`));
    this.loadingDiff = null;
    if (!d) return;
    this.diffs.set(n, d.diff);
    this.render();
  }
}
