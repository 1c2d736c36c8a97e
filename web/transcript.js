// The conversation as a transcript: messages, streamed assistant text, and one readable item
// per question — for a plan review its plan (sanitized Markdown), the decision, the feedback
// and who decided. Everything here is rebuilt from the event stream, so a reload (which
// replays the log) shows the same history.
import { renderMarkdown } from "./markdown.js";
import { t } from "./i18n.js";
import { decisionOf, decisionOfResult, isReview, optionLabel, options, who } from "./questions.js";

const EXIT_TOOL = "exit_plan_mode";

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

export class Transcript {
  constructor(root) {
    this.root = root;
    this.clear();
  }

  clear() {
    this.root.replaceChildren();
    this.bubbles = new Map(); // streaming assistant bubbles by turn/step
    this.finished = new Set(); // turn/step keys whose message is recorded (late deltas are dropped)
    this.items = new Map(); // question items by question id
    this.awaiting = new Map(); // turn/call id -> the question item its tool result will close
    this.calls = new Map(); // turn/call id -> the call's arguments, for a review never asked
  }

  add(node) {
    this.root.append(node);
    node.scrollIntoView({ block: "end" });
    return node;
  }

  message(kind, text) {
    return this.add(el("div", `msg ${kind}`, text));
  }

  delta(d) {
    const key = `${d.turn}/${d.step}`;
    if (this.finished.has(key)) return; // deltas are ephemeral and may trail the recorded message
    let b = this.bubbles.get(key);
    if (!b) {
      b = this.message("assistant", "");
      b.dataset.streaming = "true";
      this.bubbles.set(key, b);
    }
    b.textContent += d.text ?? "";
  }

  assistant(m) {
    const key = `${m.turn}/${m.step}`;
    const b = this.bubbles.get(key) || this.message("assistant", "");
    this.bubbles.delete(key);
    this.finished.add(key);
    b.textContent = m.text;
    delete b.dataset.streaming;
    b.scrollIntoView({ block: "end" }); // it grew since it was added
    for (const call of m.tool_calls || []) {
      this.calls.set(`${m.turn}/${call.id}`, call.arguments);
      b.append(document.createElement("br"), el("span", "tool", `→ ${call.name}`));
    }
  }

  /** A question was asked: its item shows what was asked until a decision arrives. */
  asked(q) {
    this.awaiting.set(`${q.turn}/${q.call_id}`, q.id);
    return this.item(q);
  }

  item(q) {
    const review = isReview(q);
    const node = el("article", "msg question-item");
    node.dataset.question = q.id;
    node.dataset.kind = review ? "plan-review" : "question";
    node.append(el("h3", "item-title", review ? t.planForReview : q.title));
    const body = el("div", "markdown");
    body.innerHTML = renderMarkdown(q.detail); // sanitized: untrusted content
    node.append(body);
    if (!review) node.append(el("p", "item-options", options(q).map((o) => o.label).join(" · ")));
    node.append(el("p", "decision"));
    const item = { q, node, decision: "open", choice: null, by: null, feedback: null };
    this.items.set(q.id, item);
    this.render(item);
    this.add(node);
    return item;
  }

  answered(a) {
    const item = this.items.get(a.id);
    if (!item) return;
    item.decision = decisionOf(item.q, a);
    item.choice = options(item.q).find((o) => o.id === a.option) ?? null;
    item.feedback = a.text ?? null;
    item.by = a.by ?? null;
    this.render(item);
  }

  dismissed(d) {
    const item = this.items.get(d.id);
    if (!item) return;
    item.decision = "dismissed";
    item.by = d.by ?? null;
    this.render(item);
  }

  /**
   * A tool result. For `exit_plan_mode` it is the decision the model got, so it completes
   * (or, for a review that could not be asked, makes) the review's item; other tools get a note.
   */
  toolResult(r) {
    const result = r.result || {};
    if (r.name !== EXIT_TOOL) {
      this.message("note", r.ok ? `${r.name}: ${JSON.stringify(result)}` : `${r.name}: ${result.reason || "failed"}`);
      return;
    }
    const key = `${r.turn}/${r.call_id}`;
    const qid = this.awaiting.get(key);
    this.awaiting.delete(key);
    const decision = decisionOfResult(r.ok, result);
    if (!decision) {
      this.message("note", t.reviewNotOpened(result.reason || "failed"));
      return;
    }
    // No question was asked (e.g. questions are not composed): the plan is in the call.
    const item =
      this.items.get(qid) ??
      this.item({ id: `call:${key}`, intent: { kind: "plan-review" }, detail: planOf(this.calls.get(key)) });
    item.decision = decision;
    item.by = result.decided_by ?? item.by;
    // The model gets the chosen label as feedback when no text was sent: not worth repeating.
    if (!item.feedback && typeof result.feedback === "string" && result.feedback !== item.choice?.label) {
      item.feedback = result.feedback;
    }
    this.render(item);
  }

  render(item) {
    const line = item.node.querySelector(".decision");
    item.node.dataset.decision = item.decision;
    const label = item.decision === "answered" && item.choice ? optionLabel(item.q, item.choice) : t.decision[item.decision];
    line.replaceChildren(el("strong", "decision-label", label));
    const name = who(item.by);
    if (name) line.append(" · ", el("span", "decided-by", t.by(name)));
    item.node.querySelector(".item-feedback")?.remove();
    if (item.feedback) {
      const quote = el("blockquote", "item-feedback");
      quote.append(el("span", "feedback-label", `${t.feedbackGiven}: `), item.feedback);
      item.node.append(quote);
    }
  }
}

/** The plan inside an `exit_plan_mode` call's arguments (JSON written by the model). */
function planOf(args) {
  try {
    const plan = JSON.parse(args ?? "").plan;
    return typeof plan === "string" ? plan : "";
  } catch {
    return "";
  }
}
