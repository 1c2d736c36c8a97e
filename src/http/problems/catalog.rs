//! What each problem `code` means, and what one looks like: the words of the spec's response
//! descriptions, its examples and the README's table. One row per code; the compiler asks for
//! a row when a code is added.

use crate::http::Code;

/// The meaning of `code` (what the client should understand and do), and a `detail` as the
/// server words it for one request (the example in the spec).
pub fn describe(code: Code) -> (&'static str, &'static str) {
    use Code::*;
    match code {
        MalformedJson => (
            "The body is not valid JSON.",
            "the request body is not valid JSON: EOF while parsing a value at line 1 column 10",
        ),
        InvalidBody => (
            "The body is JSON but does not fit the route: a missing, unknown or mistyped field, or a value out of range.",
            "the request body does not fit this route: unknown field `force`, expected `active` at line 1 column 22",
        ),
        PayloadTooLarge => (
            "The body is larger than 64 KiB.",
            "the request body exceeds 65536 bytes",
        ),
        UnsupportedMediaType => (
            "A POST or PUT without `Content-Type: application/json` (send `{}` where the body is optional).",
            "PUT requests must send `Content-Type: application/json`, even with an empty body where the body is optional (got `text/plain`)",
        ),
        InvalidId => (
            "A session, agent or question id, or a revision number, in the path is malformed.",
            "`a{b}` is not a session id: use 1-64 ASCII letters, digits, `-` or `_`",
        ),
        InvalidQuery => (
            "A query parameter is unknown, malformed or out of range (a cursor included).",
            "limit must be 1-1000, got 0",
        ),
        NotFound => (
            "No route has this path.",
            "no route for GET /v1/nothing-here",
        ),
        SessionNotFound => (
            "The session does not exist: never created, deleted, expired, or another tenant's.",
            "session `9f2c41d07a3e4b6c8d1e2f3a4b5c6d7e` does not exist",
        ),
        AgentNotFound => (
            "The session has no agent with this id.",
            "agent `ghost` does not exist in this session",
        ),
        OwnerNotFound => (
            "The `owner` named in the body is not an agent of the session.",
            "owner `ghost` does not exist in this session",
        ),
        QuestionNotFound => (
            "The session has no question with this id.",
            "question `plan-review-9` does not exist in this session",
        ),
        QuestionClosed => (
            "The question was already answered or dismissed: the first answer wins and nothing is appended.",
            "question `plan-review-7` is already answered; the first answer wins",
        ),
        RevisionNotFound => (
            "The agent has no plan revision with this number (see `GET …/agents/{aid}/plans`).",
            "agent `main` has no plan revision 7",
        ),
        WebhookNotFound => (
            "The tenant has no webhook endpoint with this id (never created, deleted, or another tenant's).",
            "no webhook endpoint `wh_5f0c8a1e2b3d4c6e7f8091a2`",
        ),
        WebhookQuota => (
            "The tenant has as many webhook endpoints as it may (16): delete one first.",
            "this tenant has 16 webhook endpoints, the most it may have; delete one first",
        ),
        InvalidWebhook => (
            "The webhook's `url` is not an http(s) URL of at most 2048 bytes without credentials on a public address, or an event type is unknown.",
            "the url names a private or loopback address (10.0.0.5)",
        ),
        RevisionSuperseded => (
            "The decision names a plan revision (`revision` in the body, or `If-Match` with a digest) that is not the one the review decides, or one a newer submission superseded: the plan changed since you read it. Nothing is appended; read the open review and decide its revision.",
            "question `plan-review-31` decides plan revision 3 (sha256:5e1d…), not revision 2: the plan changed since you read it",
        ),
        CursorOutOfRange => (
            "The cursor (`Last-Event-ID` or `after`) is past the session log's last event: resume from an id the server sent.",
            "cursor `90-0` is past the end of session `9f2c41d07a3e4b6c8d1e2f3a4b5c6d7e` (last event `12-0`)",
        ),
        TooManySessions => (
            "The event stream names (or the tenant has) more sessions than one stream may follow (`DSH_STREAM_MAX_SESSIONS`).",
            "one stream follows at most 100 sessions; 140 were asked for",
        ),
        InvalidIdempotencyKey => (
            "The `Idempotency-Key` header is not 1-255 printable ASCII characters, or was sent twice.",
            "Idempotency-Key must be 1-255 printable ASCII characters",
        ),
        IdempotencyKeyReused => (
            "This `Idempotency-Key` was used in the last 24 hours for a different request (method, path, body, credential or `If-Match`): use a new key for a new request.",
            "Idempotency-Key `order-42` was used for a different request; use a new key",
        ),
        IdempotencyKeyInUse => (
            "A request with this `Idempotency-Key` is still running: retry after `Retry-After` to get its answer.",
            "a request with Idempotency-Key `order-42` is still running; retry shortly",
        ),
        IdempotencyKeyQuota => (
            "The tenant holds as many idempotency keys (of the last 24 hours) as it may: retry after `Retry-After`, or send the write without a key.",
            "the tenant holds 100000 idempotency keys; retry later or send the write without one",
        ),
        AlreadyApplied => (
            "A retry of a request that was applied already and whose answer can no longer be rebuilt (the log was compacted since): read the resource to see its state.",
            "the request with Idempotency-Key `order-42` was applied already; read the session to see its state",
        ),
        UnknownOption => (
            "The answer names an option id the question does not offer.",
            "question `plan-review-7` has no option `approve_all`; its options are `approve`, `keep_planning`",
        ),
        UnknownLabel => (
            "The answer's `label` is not one of the question's options.",
            "`Yes` is not an option of this question; choose one of [\"Approve\", \"Keep planning\"]",
        ),
        TextNotAllowed => (
            "The question takes no free text.",
            "question `q-3` does not accept free text",
        ),
        EmptyAnswer => (
            "The answer names no option and has no text.",
            "an answer needs a `label` or a non-empty `text`",
        ),
        UnknownCommand => (
            "The input starts with `/` but names no registered command (see `GET /v1/commands`).",
            "unknown command `/deploy`; known commands: /plan",
        ),
        NotACommand => (
            "The input is not a slash command (it does not start with `/`).",
            "`fix the bug` is not a slash command: commands start with `/`, e.g. `/plan`",
        ),
        TurnRunning => (
            "A turn is running, and this needs the session idle (e.g. compaction): retry when it ends.",
            "agent `main` is running a turn; try again when it is idle",
        ),
        AgentLimit => (
            "The session has as many agents as it may (`DSH_MAX_AGENTS`).",
            "this session already has 1000 agents, the most a session may have",
        ),
        InvalidForkPoint => (
            "`at` is not an event of the session, or was compacted away.",
            "`99-0` is not an event of session `9f2c41d07a3e4b6c8d1e2f3a4b5c6d7e` (its events end at 12-0)",
        ),
        ProviderFailed => (
            "The model provider failed (compaction summarizes with it): retry shortly.",
            "the model provider failed; retry shortly",
        ),
        FeatureDisabled => (
            "The feature is not composed on this server (see `GET /v1/status`).",
            "plan mode is not composed on this server (see GET /v1/status)",
        ),
        WriteContention => (
            "The session changed under this request more often than it retries: retry (`Retry-After`).",
            "too many concurrent writers on this session; retry",
        ),
        StoreUnavailable => (
            "The event store cannot be reached: retry after `Retry-After` seconds.",
            "the event store is unavailable; retry shortly",
        ),
        Unauthorized => (
            "No credential, or one that is not (or no longer) valid: send `Authorization: Bearer <API key or token>`.",
            "this route needs a credential: `Authorization: Bearer <API key or token>`",
        ),
        TokenExpired => (
            "The browser token is past its `expires_at`: mint a new one.",
            "the token has expired: ask your backend for a new one",
        ),
        InsufficientScope => (
            "The credential is valid but does not carry this action (a token's scopes or agent, or a route for API keys only).",
            "the token does not carry the `answer` scope",
        ),
        CorsRefused => (
            "A CORS preflight from an origin, or for a method or header, that is not allowed.",
            "CORS preflight refused: Origin is not allowed to make this request",
        ),
        RateLimited => (
            "The API key's request rate is used up: retry after `Retry-After` (see `RateLimit`).",
            "this API key may make 100 requests per second and has used them up; retry in 1 s",
        ),
        SessionQuota => (
            "The tenant has as many live sessions as it may: delete one first.",
            "tenant `acme` has 100000 live sessions, its limit (max-sessions); delete one or let one expire first",
        ),
        TurnQuota => (
            "The tenant has as many running turns as it may: retry when one ends.",
            "tenant `acme` has 200 turns running, its limit (max-running-turns); retry when one has ended",
        ),
        ProviderCallQuota => (
            "The tenant made as many provider calls this minute as it may: retry after `Retry-After`.",
            "tenant `acme` made 6000 provider calls in this window, its limit (max-provider-calls per minute); retry in 12 s",
        ),
        StreamQuota => (
            "The tenant has as many open event streams as it may: close one first.",
            "tenant `acme` has 10000 event streams open, its limit (max-streams); close one first",
        ),
        StoreFull => (
            "The event store is full: nothing can be recorded until an operator frees space (reads keep working).",
            "the event store is full: nothing can be recorded until an operator frees space",
        ),
        ReplicaDraining => (
            "This replica is stopping: it opens no new event stream. Retry (a load balancer retries another replica) after `Retry-After`.",
            "this replica is stopping; reconnect to another one",
        ),
        MethodNotAllowed => (
            "The path exists but does not take this method; `Allow` lists the ones it does.",
            "PATCH is not allowed on /v1/sessions/9f2c41d07a3e4b6c8d1e2f3a4b5c6d7e; allowed: GET, DELETE",
        ),
        LogCorrupt => (
            "The session log could not be read or folded; the cause is in the server's log under the request id.",
            "the session log could not be folded",
        ),
        Internal => (
            "An unexpected server error; the cause is in the server's log under the request id.",
            "the change could not be recorded",
        ),
    }
}
