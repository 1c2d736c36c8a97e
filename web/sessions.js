// The sessions this browser opened, newest first, kept in localStorage (the server lists a
// tenant's sessions only to API keys, which a browser never holds).
import { t } from "./i18n.js";

const STORE = "dsh-plan.sessions";
const known = () => JSON.parse(localStorage.getItem(STORE) || "[]");

export function remember(sid) {
  const list = known().filter((s) => s !== sid);
  list.unshift(sid);
  localStorage.setItem(STORE, JSON.stringify(list.slice(0, 50)));
}

/** Drops a session the server says does not exist, so the list stops offering it. */
export const forget = (sid) => localStorage.setItem(STORE, JSON.stringify(known().filter((s) => s !== sid)));

/** Renders the list into `ul`, marking `current`; choosing one calls `open(sid)`. */
export function renderSessionList(ul, current, open) {
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
    b.setAttribute("aria-current", String(sid === current));
    b.onclick = () => open(sid);
    li.append(b);
    ul.append(li);
  }
}
