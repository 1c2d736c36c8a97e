// Questions as the client reads them: options are `{id, kind, label}`, an answer names an
// option by id, and the two plan-review kinds show in the UI's own language. Frames are read
// defensively, since the stream's frame shapes are still settling.
import { t } from "./i18n.js";

export const REVIEW = "plan-review";
export const isReview = (q) => q?.intent?.kind === REVIEW;

/** The question's options, each `{id, kind, label}`. */
export function options(q) {
  return (q?.options || []).map((o) => ({ id: o.id, kind: o.kind || "other", label: o.label ?? o.id }));
}

/** The first option of `kind`, or undefined. */
export const optionOf = (q, kind) => options(q).find((o) => o.kind === kind);

/** Display text: a plan review's own kinds localized, anything else as the server labels it. */
export function optionLabel(q, option) {
  if (isReview(q) && option.kind === "approve") return t.approve;
  if (isReview(q) && option.kind === "keep_planning") return t.keepPlanning;
  return option.label;
}

/** The body of `POST .../answer`: the option's id, and free text when the question takes it. */
export function answerBody(q, option, text) {
  const body = {};
  if (option) body.option = option.id;
  if (text && q.allow_text) body.text = text;
  return body;
}

/** Who answered, for people: `token:<subject>` shows the subject, `key:<id>` the key. */
export function who(by) {
  if (!by) return null;
  const [kind, ...rest] = String(by).split(":");
  const name = rest.join(":");
  if (kind === "token" && name) return name;
  if (kind === "key" && name) return t.apiKey(name);
  return String(by);
}

/**
 * The decision an answer stands for: `approved` for an approving option; otherwise a plan
 * review goes back to planning (an option or free text alike), any other question is
 * `answered`.
 */
export function decisionOf(q, answered) {
  const id = answered.option;
  const chosen = options(q).find((o) => (id ? o.id === id : o.label === answered.label));
  if (chosen?.kind === "approve") return "approved";
  return isReview(q) ? "keep_planning" : "answered";
}

/** A plan review's decision from the `exit_plan_mode` result the model got. */
export function decisionOfResult(ok, result) {
  if (ok && result?.approved) return "approved";
  switch (result?.reason) {
    case "rejected":
      return "keep_planning";
    case "dismissed":
      return "dismissed";
    case "unavailable":
      return "unavailable";
    default:
      return null; // not a review (e.g. plan mode was off): no decision to show
  }
}
