// The dsh-plan TypeScript client: typed REST calls (openapi-fetch over the generated
// `schema.d.ts`) and a typed reader for the Server-Sent Events streams.
//
//   const api = createClient({ baseUrl: "http://127.0.0.1:8080", token: process.env.DSH_KEY });
//   const { data, error } = await api.POST("/v1/sessions", { body: {} });
//   for await (const frame of streamEvents(api.options, data!.id)) { ... }
//
// Everything but this file is generated: `npm run generate` rewrites `schema.d.ts` from
// `openapi/openapi.json`, and CI fails when the two drift apart.
import createFetchClient, { type Client, type Middleware } from "openapi-fetch";
import type { components, paths } from "./schema.js";

export type { components, paths };
export type Schemas = components["schemas"];
/** An RFC 9457 problem document, as every error of the API is sent. */
export type Problem = Schemas["Problem"];
/** The data of one frame of an events stream, discriminated by `type`. */
export type EventFrame = Schemas["EventFrame"];
/** The data of the frame named `T` (e.g. `"question/asked"`). */
export type FrameOf<T extends EventFrame["type"]> = Extract<EventFrame, { type: T }>;

/** Where the API is and who is calling. */
export interface ClientOptions {
  /** e.g. `http://127.0.0.1:8080` (no trailing slash needed). */
  baseUrl: string;
  /**
   * A tenant API key (server side only) or a browser token from `POST /v1/sessions/{sid}/tokens`;
   * a function is asked before every request, so a token can be refreshed.
   */
  token?: string | (() => string | undefined | Promise<string | undefined>);
  /** A `fetch` to use instead of the global one. */
  fetch?: typeof fetch;
}

export type DshClient = Client<paths> & { readonly options: ClientOptions };

async function bearer(options: ClientOptions): Promise<string | undefined> {
  const t = typeof options.token === "function" ? await options.token() : options.token;
  return t ? `Bearer ${t}` : undefined;
}

/** A typed client for every REST route of the API. */
export function createClient(options: ClientOptions): DshClient {
  const baseUrl = options.baseUrl.replace(/\/+$/, "");
  const client = createFetchClient<paths>({ baseUrl, fetch: options.fetch });
  const auth: Middleware = {
    async onRequest({ request }) {
      const value = await bearer(options);
      if (value && !request.headers.has("Authorization")) request.headers.set("Authorization", value);
      return request;
    },
  };
  client.use(auth);
  return Object.assign(client, { options: { ...options, baseUrl } });
}

/** A problem answered by the API, thrown by the stream readers. */
export class ProblemError extends Error {
  constructor(
    readonly status: number,
    readonly problem: Problem,
  ) {
    super(`${status} ${problem.code}: ${problem.detail}`);
    this.name = "ProblemError";
  }
}

/** One frame of an events stream: `id` is the cursor to resume after (absent on ephemeral frames). */
export interface Frame {
  id?: string;
  event: string;
  data: EventFrame;
}

export interface StreamOptions {
  /** Resume after this cursor (an event id, or a `/v1/events` composite cursor). */
  after?: string;
  /** Only these frame types; `plan/*` matches a prefix. */
  types?: string[];
  /** Only frames of this agent. */
  agent?: string;
  /** Ends the stream (the iterator returns). */
  signal?: AbortSignal;
  /**
   * Reconnect with `Last-Event-ID` when the server ends the stream or the connection drops
   * (default true). A problem answer (404, 401, 400…) is never retried: it is thrown.
   */
  reconnect?: boolean;
}

/** The frames of one session, resuming after `after`, reconnecting as the server asks. */
export function streamEvents(client: DshClient | ClientOptions, sid: string, opts: StreamOptions = {}) {
  const options = "options" in client ? client.options : client;
  return readStream(options, `/v1/sessions/${encodeURIComponent(sid)}/events`, new URLSearchParams(), opts);
}

/** The frames of many sessions on one connection (`GET /v1/events`); every frame names its session. */
export function streamManyEvents(client: DshClient | ClientOptions, sessions: string[] | undefined, opts: StreamOptions = {}) {
  const options = "options" in client ? client.options : client;
  const query = new URLSearchParams();
  if (sessions?.length) query.set("sessions", sessions.join(","));
  return readStream(options, "/v1/events", query, opts);
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => (clearTimeout(t), resolve()), { once: true });
  });

async function* readStream(
  options: ClientOptions,
  path: string,
  query: URLSearchParams,
  opts: StreamOptions,
): AsyncGenerator<Frame, void, undefined> {
  const doFetch = options.fetch ?? fetch;
  if (opts.types?.length) query.set("types", opts.types.join(","));
  if (opts.agent) query.set("agent", opts.agent);
  let cursor = opts.after;
  let retryMs = 1000;
  while (!opts.signal?.aborted) {
    const headers: Record<string, string> = { Accept: "text/event-stream" };
    const auth = await bearer(options);
    if (auth) headers.Authorization = auth;
    if (cursor) headers["Last-Event-ID"] = cursor;
    const qs = query.toString();
    let response: Response;
    try {
      response = await doFetch(`${options.baseUrl.replace(/\/+$/, "")}${path}${qs ? `?${qs}` : ""}`, {
        headers,
        signal: opts.signal,
      });
    } catch (e) {
      if (opts.signal?.aborted) return;
      if (opts.reconnect === false) throw e;
      await sleep(retryMs, opts.signal);
      continue;
    }
    if (!response.ok || !response.body) {
      const retryAfter = Number(response.headers.get("Retry-After"));
      const body = await response.text();
      if (response.status === 503 && opts.reconnect !== false) {
        await sleep(Number.isFinite(retryAfter) && retryAfter > 0 ? retryAfter * 1000 : retryMs, opts.signal);
        continue;
      }
      let problem: Problem;
      try {
        problem = JSON.parse(body) as Problem;
      } catch {
        problem = { type: "about:blank", title: response.statusText, status: response.status, detail: body } as Problem;
      }
      throw new ProblemError(response.status, problem);
    }
    try {
      for await (const block of blocks(response.body)) {
        const frame = parse(block);
        if (frame.retry !== undefined) retryMs = frame.retry;
        if (!frame.frame) continue;
        if (frame.frame.id) cursor = frame.frame.id;
        yield frame.frame;
      }
    } catch (e) {
      if (opts.signal?.aborted) return;
      if (opts.reconnect === false) throw e;
    }
    if (opts.reconnect === false || opts.signal?.aborted) return;
    await sleep(retryMs, opts.signal);
  }
}

/** The text of each SSE block (separated by a blank line). */
async function* blocks(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  const reader = body.getReader();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
      let end: number;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        yield buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
      }
    }
  } finally {
    reader.releaseLock();
  }
}

function parse(block: string): { frame?: Frame; retry?: number } {
  let id: string | undefined;
  let event = "message";
  let retry: number | undefined;
  const data: string[] = [];
  for (const line of block.split("\n")) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "id") id = value;
    else if (field === "event") event = value;
    else if (field === "data") data.push(value);
    else if (field === "retry" && /^\d+$/.test(value)) retry = Number(value);
  }
  if (!data.length) return { retry };
  return { frame: { id, event, data: JSON.parse(data.join("\n")) as EventFrame }, retry };
}
