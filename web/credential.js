// The browser token, when the integrator's page hands one over in the URL fragment:
// `/#token=<jwt>&session=<sid>` (a fragment never reaches a server). It is taken out of the
// address bar at once, so it stays out of history, bookmarks and screenshots, and kept in this
// tab only (sessionStorage, for a reload). Without one the client runs as in open mode.
const STORE = "dsh-plan.token";
let bearer = null;

export const fragmentHasToken = () => new URLSearchParams(location.hash.slice(1)).has("token");

/** Takes the token out of the fragment (leaving `#<sid>` when a session was named), or keeps the tab's. */
export function takeToken() {
  const params = new URLSearchParams(location.hash.slice(1));
  const token = params.get("token");
  if (!token) {
    bearer = sessionStorage.getItem(STORE);
    return;
  }
  const session = params.get("session");
  history.replaceState(null, "", location.pathname + location.search + (session ? `#${session}` : ""));
  sessionStorage.setItem(STORE, token);
  bearer = token;
}

/** Headers for a fetch: `Authorization: Bearer` when there is a token. */
export const authorization = () => (bearer ? { authorization: `Bearer ${bearer}` } : {});

/** EventSource cannot send headers: the token rides in the query, on the events route only. */
export function withToken(query) {
  if (bearer) query.set("access_token", bearer);
  return query;
}
