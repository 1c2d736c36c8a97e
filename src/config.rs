//! Settings, from flags or the environment (flags mirror the env vars).

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "dsh-plan",
    version,
    about = "Agent sessions with a recorded, human-reviewed plan mode"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub serve: Settings,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the HTTP API (the default).
    Serve,
    /// Replay a session log and exit non-zero on any invariant violation.
    Verify {
        /// The session to check.
        #[arg(long)]
        session: String,
    },
    /// Print the OpenAPI document (what `openapi/openapi.json` must hold).
    Openapi,
    /// Print the problem codes of every operation (the README's table), as Markdown.
    Problems,
    /// Manage tenant API keys (in Redis, or in `DSH_KEYS_FILE` without Redis).
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Per-tenant settings that override the server-wide defaults (Redis only).
    Tenants {
        #[command(subcommand)]
        command: TenantsCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create a key for a tenant; prints the key once, alone on the last line.
    Create {
        /// The tenant the key acts for: 1-64 ASCII letters, digits, `-` or `_`.
        #[arg(long)]
        tenant: String,
        /// Requests per second this key may make (default: `DSH_DEFAULT_RATE`).
        #[arg(long)]
        rate: Option<u32>,
    },
    /// List keys (id, tenant, rate, created, revoked); never the secrets.
    List,
    /// Revoke a key by its id; every replica refuses it within seconds.
    Revoke {
        /// The key id, as `keys list` shows it.
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum TenantsCommand {
    /// Set limits for one tenant; unset flags keep their current value.
    Set {
        #[arg(long)]
        tenant: String,
        /// How long an idle session of this tenant is kept, e.g. `7d` (new sessions).
        #[arg(long, value_parser = humantime::parse_duration)]
        retention: Option<std::time::Duration>,
        /// Live sessions the tenant may have.
        #[arg(long)]
        max_sessions: Option<u64>,
        /// Turns the tenant may have running at once.
        #[arg(long)]
        max_running_turns: Option<u64>,
        /// Provider calls the tenant may make per minute.
        #[arg(long)]
        max_provider_calls: Option<u64>,
        /// Event streams the tenant may have open at once.
        #[arg(long)]
        max_streams: Option<u64>,
    },
    /// Show a tenant's effective limits.
    Show {
        #[arg(long)]
        tenant: String,
    },
}

/// When requests must carry a credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AuthMode {
    /// On as soon as any key exists; open (loopback only) while there is none.
    Auto,
    /// Always on: without keys, every session route answers 401.
    Keys,
    /// Never on: anyone who reaches the port may do anything (also on a public bind).
    Off,
}

#[derive(Debug, Clone, Args)]
pub struct Settings {
    /// Address to listen on.
    #[arg(
        long,
        env = "DSH_BIND",
        default_value = "127.0.0.1:8080",
        global = true
    )]
    pub bind: String,
    /// Redis URL; unset → the embedded in-memory log (single process, nothing persisted).
    #[arg(long, env = "REDIS_URL", global = true, hide_env_values = true)]
    pub redis_url: Option<String>,
    /// `REDIS_URL` names a Redis Cluster (a seed node, or `host:port,host:port`); implied by a
    /// `redis+cluster://` URL.
    #[arg(long, env = "DSH_REDIS_CLUSTER", default_value_t = false, action = clap::ArgAction::Set, global = true)]
    pub redis_cluster: bool,
    /// Redis replicas that must acknowledge an append (`WAIT`) before it is answered; fewer
    /// within a second answers 503. 0: answered once the primary has it.
    #[arg(
        long,
        env = "DSH_REDIS_WAIT_REPLICAS",
        default_value_t = 0,
        global = true
    )]
    pub redis_wait_replicas: u32,
    /// Prefix of every Redis key this service writes.
    #[arg(long, env = "DSH_KEY_PREFIX", default_value = "dsh", global = true)]
    pub key_prefix: String,
    /// This replica's id in logs and step headers; default hostname + pid.
    #[arg(long, env = "DSH_REPLICA_ID", global = true)]
    pub replica_id: Option<String>,
    /// HTTP worker threads; default one per core.
    #[arg(long, env = "DSH_WORKERS", global = true)]
    pub workers: Option<usize>,
    /// Model provider: `fixture` (deterministic, offline) or `openai` (any OpenAI-compatible
    /// Chat Completions endpoint).
    #[arg(long, env = "DSH_PROVIDER", default_value = "fixture", global = true)]
    pub provider: String,
    /// Base URL of the OpenAI-compatible API (`…/chat/completions` is appended).
    #[arg(
        long,
        env = "DSH_PROVIDER_URL",
        default_value = "https://api.openai.com/v1",
        global = true,
        hide_env_values = true
    )]
    pub provider_url: String,
    /// Model name sent to the provider.
    #[arg(long, env = "DSH_MODEL", default_value = "gpt-4o-mini", global = true)]
    pub model: String,
    /// Delay between the fixture provider's tokens, in milliseconds.
    #[arg(
        long,
        env = "DSH_FIXTURE_TOKEN_DELAY_MS",
        default_value_t = 30,
        global = true
    )]
    pub fixture_token_delay_ms: u64,
    /// Whether compaction trims the log entries its snapshot replaces.
    #[arg(long, env = "DSH_TRIM_ON_COMPACT", default_value_t = true, action = clap::ArgAction::Set, global = true)]
    pub trim_on_compact: bool,
    /// Milliseconds between SSE heartbeat comments.
    #[arg(
        long,
        env = "DSH_SSE_HEARTBEAT_MS",
        default_value_t = 15_000,
        global = true
    )]
    pub sse_heartbeat_ms: u64,
    /// Events buffered per session feed; an SSE subscriber further behind is disconnected
    /// (it resumes with `Last-Event-ID`).
    #[arg(long, env = "DSH_SSE_FEED_CAPACITY", default_value_t = crate::live::FEED_CAPACITY, global = true)]
    pub sse_feed_capacity: usize,
    /// Milliseconds between rechecks of quiet session feeds: a session with subscribers here
    /// that heard no committed events for this long has its log read past the last event
    /// heard, so an event whose live message was lost (its replica died between the commit and
    /// the message) reaches them within about twice this, and streams of a session whose log
    /// is gone (its deletion notice lost) end. 0 turns it off; at least 10.
    #[arg(
        long,
        env = "DSH_SSE_RECHECK_MS",
        default_value_t = 5_000,
        global = true
    )]
    pub sse_recheck_ms: u64,
    /// After SIGTERM, how long (ms) the replica keeps serving requests while it is not ready,
    /// before it stops accepting: time for a load balancer that polls `/readyz` to stop sending
    /// it traffic. Event streams end and turns are handed over at once either way. Answers
    /// meanwhile close their connections: behind a proxy that keeps idle connections, make it
    /// longer than the proxy's idle timeout, so the proxy lets go of every connection before the
    /// replica closes them. 0 where the platform drains first (Kubernetes' `preStop`).
    #[arg(long, env = "DSH_DRAIN_DELAY_MS", default_value_t = 0, global = true)]
    pub drain_delay_ms: u64,
    /// The plugin manifest (YAML); unset → the built-in one (plan-mode, commands, questions).
    #[arg(long, env = "DSH_CONFIG", global = true)]
    pub config: Option<String>,
    /// A directory whose `AGENTS.md` becomes the workspace-instructions section.
    #[arg(long, env = "DSH_WORKSPACE", global = true)]
    pub workspace: Option<String>,
    /// Steps one turn may take; a turn that wants more ends with reason `step-limit`.
    #[arg(long, env = "DSH_MAX_STEPS", default_value_t = crate::engine::DEFAULT_MAX_STEPS, global = true)]
    pub max_steps: u32,
    /// Agents one session may have; spawning more answers 409 `agent-limit`.
    #[arg(long, env = "DSH_MAX_AGENTS", default_value_t = 1000, global = true)]
    pub max_agents: usize,
    /// `auto` (credentials required once any key exists), `keys` (always) or `off`.
    #[arg(long, env = "DSH_AUTH", value_enum, default_value_t = AuthMode::Auto, global = true)]
    pub auth: AuthMode,
    /// Without Redis: the file `keys create` writes hashed keys to and the server reads them from.
    #[arg(long, env = "DSH_KEYS_FILE", global = true)]
    pub keys_file: Option<String>,
    /// Token signing keys, `kid:secret[,kid:secret…]`: the first signs, all verify (rotation).
    /// Unset → one generated key shared through Redis (or per process without Redis).
    #[arg(long, env = "DSH_TOKEN_KEYS", global = true, hide_env_values = true)]
    pub token_keys: Option<String>,
    /// Browser origins allowed to call the API (comma-separated, e.g. `https://app.example`).
    #[arg(long, env = "DSH_CORS_ORIGINS", value_delimiter = ',', global = true)]
    pub cors_origins: Vec<String>,
    /// Requests per second per API key unless the key sets its own.
    #[arg(long, env = "DSH_DEFAULT_RATE", default_value_t = 100, global = true)]
    pub default_rate: u32,
    /// How long an idle session is kept (refreshed on every write), unless its tenant sets one.
    #[arg(long, env = "DSH_RETENTION", default_value = "30d", value_parser = humantime::parse_duration, global = true)]
    pub retention: std::time::Duration,
    /// Live sessions per tenant, unless the tenant sets its own.
    #[arg(
        long,
        env = "DSH_TENANT_MAX_SESSIONS",
        default_value_t = 100_000,
        global = true
    )]
    pub max_sessions: u64,
    /// Running turns per tenant, unless the tenant sets its own.
    #[arg(
        long,
        env = "DSH_TENANT_MAX_RUNNING_TURNS",
        default_value_t = 200,
        global = true
    )]
    pub max_running_turns: u64,
    /// Provider calls per minute per tenant, unless the tenant sets its own.
    #[arg(
        long,
        env = "DSH_TENANT_MAX_PROVIDER_CALLS",
        default_value_t = 6_000,
        global = true
    )]
    pub max_provider_calls: u64,
    /// Open event streams per tenant, unless the tenant sets its own.
    #[arg(
        long,
        env = "DSH_TENANT_MAX_STREAMS",
        default_value_t = 10_000,
        global = true
    )]
    pub max_streams: u64,
    /// Sessions one event stream (`GET /v1/events`) may follow; past it 422 `too-many-sessions`.
    #[arg(
        long,
        env = "DSH_STREAM_MAX_SESSIONS",
        default_value_t = 100,
        global = true
    )]
    pub stream_max_sessions: usize,
    /// A PEM certificate chain: with `DSH_TLS_KEY`, the server speaks HTTPS (HTTP/2 and
    /// HTTP/1.1 by ALPN) instead of plain HTTP.
    #[arg(long, env = "DSH_TLS_CERT", global = true)]
    pub tls_cert: Option<String>,
    /// The PEM private key of `DSH_TLS_CERT` (never printed).
    #[arg(long, env = "DSH_TLS_KEY", global = true, hide_env_values = true)]
    pub tls_key: Option<String>,
    /// The window `max_provider_calls` counts in, in milliseconds: a minute; shorter only in
    /// tests.
    #[arg(
        long,
        env = "DSH_PROVIDER_CALL_WINDOW_MS",
        default_value_t = 60_000,
        hide = true,
        global = true
    )]
    pub provider_call_window_ms: u64,
    /// Webhooks: the wait (ms) after a first failed delivery attempt; it doubles after each
    /// further one, up to an hour, for 24 hours.
    #[arg(
        long,
        env = "DSH_WEBHOOK_BACKOFF_MS",
        default_value_t = 1000,
        global = true
    )]
    pub webhook_backoff_ms: u64,
    /// Webhooks: how long (ms) a delivery may stay taken by a replica before another replica
    /// sends it (the first one died); longer than a delivery's 10 s timeout.
    #[arg(
        long,
        env = "DSH_WEBHOOK_CLAIM_MS",
        default_value_t = 60_000,
        global = true
    )]
    pub webhook_claim_ms: u64,
    /// Webhooks: how often (ms) an idle replica looks for deliveries to send.
    #[arg(
        long,
        env = "DSH_WEBHOOK_POLL_MS",
        default_value_t = 500,
        global = true
    )]
    pub webhook_poll_ms: u64,
    /// Webhooks: deliveries one replica sends at once at most.
    #[arg(
        long,
        env = "DSH_WEBHOOK_CONCURRENCY",
        default_value_t = 32,
        global = true
    )]
    pub webhook_concurrency: usize,
    /// Webhooks: allow endpoints on private, loopback and link-local addresses (off: such
    /// URLs are refused at registration and such addresses at every connection).
    #[arg(long, env = "DSH_WEBHOOK_ALLOW_PRIVATE", default_value_t = false, action = clap::ArgAction::Set, global = true)]
    pub webhook_allow_private: bool,
    /// Webhooks: how long (ms) after its event a delivery is retried before it is `failed`:
    /// a day; shorter only in tests.
    #[arg(long, env = "DSH_WEBHOOK_GIVE_UP_MS", default_value_t = crate::domain::webhooks::GIVE_UP_MS, hide = true, global = true)]
    pub webhook_give_up_ms: u64,
}

impl Settings {
    /// Settings for a test or tool: bind to a free loopback port, defaults elsewhere.
    pub fn local(redis_url: Option<String>) -> Self {
        Self {
            bind: "127.0.0.1:0".into(),
            redis_url,
            redis_cluster: false,
            redis_wait_replicas: 0,
            key_prefix: "dsh".into(),
            replica_id: None,
            workers: Some(2),
            provider: "fixture".into(),
            provider_url: "http://127.0.0.1:9/v1".into(),
            model: "fixture-model".into(),
            fixture_token_delay_ms: 30,
            workspace: None,
            config: None,
            trim_on_compact: true,
            sse_feed_capacity: crate::live::FEED_CAPACITY,
            drain_delay_ms: 0,
            sse_heartbeat_ms: 15_000,
            sse_recheck_ms: 5_000,
            max_steps: crate::engine::DEFAULT_MAX_STEPS,
            max_agents: 1000,
            auth: AuthMode::Auto,
            keys_file: None,
            token_keys: None,
            cors_origins: Vec::new(),
            default_rate: 100,
            retention: std::time::Duration::from_secs(30 * 24 * 3600),
            max_sessions: 100_000,
            max_running_turns: 200,
            max_provider_calls: 6_000,
            max_streams: 10_000,
            stream_max_sessions: 100,
            tls_cert: None,
            tls_key: None,
            provider_call_window_ms: 60_000,
            webhook_backoff_ms: 1000,
            webhook_claim_ms: 60_000,
            webhook_poll_ms: 500,
            webhook_concurrency: 32,
            webhook_allow_private: false,
            webhook_give_up_ms: crate::domain::webhooks::GIVE_UP_MS,
        }
    }

    /// How the service uses `REDIS_URL`.
    pub fn redis_options(&self) -> crate::store::redis::RedisOptions {
        crate::store::redis::RedisOptions {
            cluster: self.redis_cluster,
            wait_replicas: self.redis_wait_replicas,
        }
    }

    /// How this replica sends webhook deliveries.
    pub fn webhook_sender(&self) -> crate::webhooks::SenderConfig {
        crate::webhooks::SenderConfig {
            backoff_ms: self.webhook_backoff_ms,
            claim_ms: self.webhook_claim_ms,
            poll_ms: self.webhook_poll_ms,
            concurrency: self.webhook_concurrency,
            allow_private: self.webhook_allow_private,
            give_up_ms: self.webhook_give_up_ms,
        }
    }

    pub fn replica_id(&self) -> String {
        self.replica_id
            .clone()
            .unwrap_or_else(|| format!("{}-{}", hostname(), std::process::id()))
    }
}

/// The provider key: read from the environment only (never a flag, never logged).
pub fn provider_key() -> Option<String> {
    std::env::var("DSH_PROVIDER_KEY")
        .ok()
        .filter(|k| !k.is_empty())
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "dsh".into())
}

/// The URL without credentials, for logs (kept for callers of the old name).
pub use crate::redact::redact_url as redact;
