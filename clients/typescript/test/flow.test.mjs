// The whole plan-review flow through the generated SDK against a live server, on the embedded
// log and on Redis: plan mode on, a prompt, a review answered "keep planning" by option id,
// the revised plan approved, the turn ends with plan mode off; the stream helper sees it all.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createClient, streamEvents, ProblemError } from "../dist/index.js";
import { startServer } from "./server.mjs";

/** Collects a stream's frames in the background; `next(type)` awaits the next one of a type. */
function collect(api, sid, signal) {
  const frames = [];
  let seen = 0;
  let wake = () => {};
  const done = (async () => {
    for await (const frame of streamEvents(api, sid, { signal })) {
      frames.push(frame);
      wake();
    }
  })().catch((e) => {
    if (!signal.aborted) throw e;
  });
  async function next(type, timeoutMs = 20000) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const i = frames.findIndex((f, k) => k >= seen && f.data.type === type);
      if (i >= 0) {
        seen = i + 1;
        return frames[i];
      }
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no ${type} frame; saw ${frames.map((f) => f.event).join(", ")}`);
      await new Promise((r) => {
        wake = r;
        setTimeout(r, left);
      });
    }
  }
  return { frames, next, done };
}

for (const store of ["memory", "redis"]) {
  test(`sdk_plan_review_flow_on_${store}`, async () => {
    const server = await startServer(store);
    const stop = new AbortController();
    try {
      const api = createClient({ baseUrl: server.base });
      const created = await api.POST("/v1/sessions", { body: {} });
      assert.equal(created.response.status, 201, JSON.stringify(created.error));
      const sid = created.data.id;
      const path = { sid, aid: "main" };
      const stream = collect(api, sid, stop.signal);

      const on = await api.PUT("/v1/sessions/{sid}/agents/{aid}/plan", { params: { path }, body: { active: true } });
      assert.equal(on.data.plan.active, true, JSON.stringify(on.data));

      const key = `flow-${store}-1`;
      const prompt = () =>
        api.POST("/v1/sessions/{sid}/agents/{aid}/messages", {
          params: { path, header: { "Idempotency-Key": key } },
          body: { text: "add a login page" },
        });
      const first = await prompt();
      assert.equal(first.response.ok, true, JSON.stringify(first.error));
      const again = await prompt();
      assert.equal(again.response.headers.get("Idempotent-Replayed"), "true");
      assert.deepEqual(again.data, first.data);

      // The first review: keep planning, by option id, with feedback.
      await stream.next("question/asked");
      const open = await api.GET("/v1/sessions/{sid}/questions", { params: { path: { sid }, query: { status: "open" } } });
      assert.equal(open.data.questions.length, 1);
      const review = open.data.questions[0];
      const keep = review.options.find((o) => o.kind === "keep_planning");
      assert.ok(keep, JSON.stringify(review.options));
      const answered = await api.POST("/v1/sessions/{sid}/questions/{qid}/answer", {
        params: { path: { sid, qid: review.id } },
        body: { option: keep.id, text: "also add tests" },
      });
      assert.equal(answered.data.state, "answered", JSON.stringify(answered.error));

      // The revised plan: approve it.
      await stream.next("question/asked");
      const second = (await api.GET("/v1/sessions/{sid}/questions", { params: { path: { sid } } })).data.questions[0];
      assert.notEqual(second.id, review.id);
      assert.match(second.detail, /also add tests/);
      const one = await api.GET("/v1/sessions/{sid}/questions/{qid}", { params: { path: { sid, qid: second.id } } });
      assert.deepEqual(one.data, second);
      const approve = second.options.find((o) => o.kind === "approve");
      await api.POST("/v1/sessions/{sid}/questions/{qid}/answer", {
        params: { path: { sid, qid: second.id } },
        body: { option: approve.id },
      });

      const ended = await stream.next("turn/ended");
      assert.equal(ended.data.session, sid);
      const plan = await api.GET("/v1/sessions/{sid}/agents/{aid}/plan", { params: { path } });
      assert.equal(plan.data.active, false);
      const history = await api.GET("/v1/sessions/{sid}/questions", { params: { path: { sid }, query: { status: "answered" } } });
      assert.deepEqual(history.data.questions.map((q) => q.id), [review.id, second.id]);

      // Every recorded frame names its session and carries a resumable id.
      const recorded = stream.frames.filter((f) => f.id);
      assert.ok(recorded.length > 5);
      assert.ok(recorded.every((f) => f.data.session === sid && f.data.type === f.event));

      const listed = await api.GET("/v1/sessions", {});
      assert.ok(listed.data.sessions.some((s) => s.id === sid));

      // Problems are typed: a made-up session is a 404 with its code.
      const missing = await api.GET("/v1/sessions/{sid}", { params: { path: { sid: "0".repeat(32) } } });
      assert.equal(missing.response.status, 404);
      assert.equal(missing.error.code, "session-not-found");
      await assert.rejects(
        async () => {
          for await (const _ of streamEvents(api, "0".repeat(32), { reconnect: false })) break;
        },
        (e) => e instanceof ProblemError && e.status === 404,
      );
    } finally {
      stop.abort();
      server.stop();
    }
  });
}
