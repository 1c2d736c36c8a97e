// k6 load script: users toggle plan mode and read it back while SSE readers, in the bounded
// mode (stock k6 cannot read an endless stream), measure commit-to-delivery lag from each
// event's server `committed_at`.
//
//   BASE=http://127.0.0.1:8080 k6 run k6/plan-and-events.js
// (`bash k6/run-k6.sh` starts Redis and two replicas and points writers and readers at
// different ones.)
import http from "k6/http";
import { check } from "k6";
import { Trend, Counter } from "k6/metrics";

const BASE = __ENV.BASE || "http://127.0.0.1:8080";
const READ_BASE = __ENV.READ_BASE || BASE;
const lag = new Trend("sse_commit_to_delivery_ms", true);
const delivered = new Counter("sse_events_delivered");

export const options = {
  scenarios: {
    writers: { executor: "constant-vus", vus: 16, duration: __ENV.DURATION || "20s", exec: "writer" },
    readers: { executor: "constant-vus", vus: 8, duration: __ENV.DURATION || "20s", exec: "reader" },
  },
  thresholds: {
    "http_req_failed{scenario:writers}": ["rate<0.01"],
    "http_req_duration{scenario:writers}": ["p(99)<50"],
    sse_commit_to_delivery_ms: ["p(99)<250"],
  },
};

export function setup() {
  const sessions = [];
  for (let i = 0; i < 8; i++) sessions.push(http.post(`${BASE}/v1/sessions`, "{}", { headers: { "content-type": "application/json" } }).json("id"));
  return { sessions };
}

export function writer({ sessions }) {
  const sid = sessions[__VU % sessions.length];
  const url = `${BASE}/v1/sessions/${sid}/agents/main/plan`;
  const put = http.put(url, JSON.stringify({ active: __ITER % 2 === 0 }), { headers: { "content-type": "application/json" } });
  check(put, { "PUT answers an outcome": (r) => r.status === 200 && ["committed", "queued", "cancelled", "noop"].includes(r.json("outcome")) });
  check(http.get(url), { "GET answers the plan": (r) => r.status === 200 && typeof r.json("active") === "boolean" });
}

export function reader({ sessions }) {
  const sid = sessions[__VU % sessions.length];
  const head = http.get(`${READ_BASE}/v1/sessions/${sid}`).json("last_event_id");
  // Bounded mode: the stream ends right after the next plan/mode, so the response's arrival
  // time is that event's delivery time.
  const res = http.get(`${READ_BASE}/v1/sessions/${sid}/events?after=${head}&types=plan/mode&max_events=1&max_ms=3000`, { timeout: "5s" });
  const received = Date.now();
  check(res, { "SSE answers": (r) => r.status === 200 });
  for (const line of (res.body || "").split("\n")) {
    if (!line.startsWith("data: ")) continue;
    lag.add(Math.max(0, received - Date.parse(JSON.parse(line.slice(6)).committed_at)));
    delivered.add(1);
  }
}
