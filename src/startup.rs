//! Building and running the server, split so tests can bind port 0 and learn the port.

use std::net::TcpListener;
use std::sync::Arc;

use actix_web::dev::{Server, ServerHandle};
use actix_web::middleware::from_fn;
use actix_web::{web, App, HttpServer};
use anyhow::Context;

use crate::auth::credentials::random_hex;
use crate::auth::{Auth, Signer};
use crate::composition::Composition;
use crate::config::{provider_key, AuthMode, Settings};
use crate::engine::assembly::Prompting;
use crate::engine::provider::{fixture::Fixture, openai::OpenAi, ModelClient};
use crate::engine::{Engine, EngineConfig, Timing};
use crate::http::{self, AppState};
use crate::limits::Limits;
use crate::live::Hub;
use crate::redact::{redact_url, scrub, secrets_in_url};
use crate::service::idempotency::Idempotency;
use crate::service::Sessions;
use crate::store::{
    EventLog, FileKeys, KeyStore, LimitStore, LiveBus, MemoryLeases, MemoryLimits, MemoryLog,
    MemoryRequests, RedisLeases, RedisLimits, RedisLog, RedisRequests, RedisWebhooks, RequestStore,
    TurnLeases, WebhookStore,
};
use crate::webhooks::Sender;

/// The stores a replica needs.
#[derive(Clone)]
pub struct Stores {
    pub log: Arc<dyn EventLog>,
    pub live: Arc<dyn LiveBus>,
    pub leases: Arc<dyn TurnLeases>,
    /// API keys and token signing secrets.
    pub keys: Arc<dyn KeyStore>,
    /// Request rates and tenant quotas, shared by every replica.
    pub limits: Arc<dyn LimitStore>,
    /// The records of writes sent with an `Idempotency-Key`, shared by every replica.
    pub requests: Arc<dyn RequestStore>,
    /// Webhook endpoints, their delivery queue and records (Redis only).
    pub webhooks: Option<Arc<dyn WebhookStore>>,
}

pub struct Application {
    port: u16,
    server: Server,
    state: Arc<AppState>,
    shutdown: tokio::sync::watch::Sender<bool>,
    /// `DSH_DRAIN_DELAY_MS`.
    drain_delay: std::time::Duration,
    /// The server's listening socket (another handle to it), to stop listening before the
    /// server stops.
    listener: TcpListener,
}

/// Opens the configured store: Redis when a URL is given, else the embedded in-memory log.
pub async fn open_store(settings: &Settings) -> anyhow::Result<Stores> {
    Ok(match &settings.redis_url {
        Some(url) => {
            let log = RedisLog::connect_with(url, &settings.key_prefix, settings.redis_options())
                .await
                .map_err(|e| {
                    let secrets = secrets_in_url(url);
                    let known: Vec<&str> = secrets.iter().map(String::as_str).collect();
                    anyhow::anyhow!(
                        "connecting to Redis at {}: {}",
                        redact_url(url),
                        scrub(&e.to_string(), &known)
                    )
                })?;
            tracing::info!(
                redis = %redact_url(url),
                prefix = %settings.key_prefix,
                cluster = log.is_cluster(),
                wait_replicas = settings.redis_wait_replicas,
                "store: Redis Streams"
            );
            match log.eviction_policy().await {
                Some(policy) if policy != "noeviction" => tracing::warn!(
                    %policy,
                    "Redis maxmemory-policy is not `noeviction`: when Redis fills up it will \
                     silently drop session logs; set `maxmemory-policy noeviction`"
                ),
                _ => {}
            }
            let leases = Arc::new(RedisLeases::new(&log));
            let limits = Arc::new(RedisLimits::new(&log));
            let requests = Arc::new(RedisRequests::new(&log));
            let webhooks: Arc<dyn WebhookStore> = Arc::new(RedisWebhooks::new(&log));
            let log = Arc::new(log);
            Stores {
                log: log.clone(),
                live: log.clone(),
                leases,
                keys: log.clone(),
                limits,
                requests,
                webhooks: Some(webhooks),
            }
        }
        None => {
            tracing::warn!(
                "store: embedded in-memory log (REDIS_URL unset): single process, nothing persisted"
            );
            let log = Arc::new(MemoryLog::default());
            Stores {
                log: log.clone(),
                live: log,
                leases: Arc::new(MemoryLeases::default()),
                keys: Arc::new(FileKeys::new(settings.keys_file.clone().map(Into::into))),
                limits: Arc::new(MemoryLimits::default()),
                requests: Arc::new(MemoryRequests::default()),
                webhooks: None,
            }
        }
    })
}

/// The configured model provider. The key is read from the environment here and nowhere else.
pub fn open_provider(
    settings: &Settings,
    plan_policy: Option<String>,
) -> anyhow::Result<Arc<dyn ModelClient>> {
    Ok(match settings.provider.as_str() {
        "fixture" => Arc::new(Fixture::new(
            plan_policy,
            std::time::Duration::from_millis(settings.fixture_token_delay_ms),
        )),
        "openai" => {
            let key = provider_key();
            tracing::info!(url = %redact_url(&settings.provider_url), model = %settings.model, key = if key.is_some() { "set" } else { "unset" }, "provider: openai");
            Arc::new(OpenAi::new(&settings.provider_url, key, &settings.model)?)
        }
        other => anyhow::bail!("DSH_PROVIDER must be `fixture` or `openai`, not `{other}`"),
    })
}

/// Authentication for this replica: checks that the bind and the keys agree (an open server
/// is for loopback only), and loads the token signing secrets.
pub async fn open_auth(settings: &Settings, keys: Arc<dyn KeyStore>) -> anyhow::Result<Arc<Auth>> {
    let any = !keys.ids().await.context("reading the API keys")?.is_empty();
    let public = !is_loopback(&settings.bind);
    match settings.auth {
        AuthMode::Off if public => tracing::warn!(
            bind = %settings.bind,
            "DSH_AUTH=off on a non-loopback address: anyone who reaches it can read and write every session"
        ),
        AuthMode::Off => tracing::warn!("DSH_AUTH=off: no credentials are checked"),
        AuthMode::Auto if !any && public => anyhow::bail!(
            "refusing to serve {} without credentials: create an API key (`dsh-plan keys create --tenant NAME`), \
             bind to 127.0.0.1, or set DSH_AUTH=off to run open on purpose",
            settings.bind
        ),
        AuthMode::Auto if !any => tracing::warn!(
            "no API keys exist: serving OPEN on loopback (anyone on this machine can use every session); \
             `dsh-plan keys create --tenant NAME` turns credentials on"
        ),
        AuthMode::Keys if !any => {
            tracing::warn!("DSH_AUTH=keys but no API key exists yet: every session route answers 401")
        }
        _ => tracing::info!("credentials required: API keys and browser tokens"),
    }
    let signing = match &settings.token_keys {
        Some(raw) => Signer::parse_keys(raw).map_err(anyhow::Error::msg)?,
        None => {
            let proposed = random_hex(32).map_err(anyhow::Error::msg)?;
            let secret = keys
                .signing_secret(AUTO_KID, &proposed)
                .await
                .context("loading the token signing key")?;
            vec![(AUTO_KID.to_owned(), secret)]
        }
    };
    let signer = Signer::new(&signing).map_err(anyhow::Error::msg)?;
    // Off loopback, `auto` means `keys`: a public server never turns open because its keys
    // vanished (a keys file deleted, a Redis restarted empty).
    let mode = match settings.auth {
        AuthMode::Auto if public => AuthMode::Keys,
        m => m,
    };
    Ok(Arc::new(Auth::new(
        mode,
        keys,
        signer,
        settings.default_rate,
    )))
}

/// The kid of the signing secret the server generates when `DSH_TOKEN_KEYS` is unset.
const AUTO_KID: &str = "auto-1";

/// Whether `bind` (`host:port`) listens on loopback only.
pub fn is_loopback(bind: &str) -> bool {
    let host = listener_host(bind)
        .trim_start_matches('[')
        .trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

impl Application {
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        let store = open_store(&settings).await?;
        Self::build_with_store(settings, store).await
    }

    pub async fn build_with_store(settings: Settings, stores: Stores) -> anyhow::Result<Self> {
        let auth = open_auth(&settings, stores.keys.clone()).await?;
        let replica_id = settings.replica_id();
        let composition =
            Composition::load(settings.config.as_deref()).map_err(anyhow::Error::msg)?;
        tracing::info!(
            plan_mode = composition.plan_mode.is_some(),
            commands = composition.commands,
            questions = composition.questions,
            "composition"
        );
        let policy = composition.plan_policy();
        let prompting = Prompting::new(
            policy.clone(),
            Prompting::workspace_instructions(settings.workspace.as_deref()),
        );
        let provider = open_provider(&settings, policy)?;
        let limits = Limits::new(stores.limits.clone(), &settings);
        let mut sessions = Sessions::new(stores.log.clone()).with_limits(limits.clone());
        if let Some(webhooks) = &stores.webhooks {
            sessions = sessions.with_webhooks(webhooks.clone());
        }
        let sessions = Arc::new(sessions);
        let engine = Engine::new(
            sessions.clone(),
            stores.live.clone(),
            stores.leases,
            provider,
            prompting,
            &composition,
            EngineConfig {
                replica: replica_id.clone(),
                timing: Timing::default(),
                max_steps: settings.max_steps,
                limits: limits.clone(),
            },
        );
        engine.start();
        let hub = Hub::start(
            stores.live.as_ref(),
            stores.log.clone(),
            settings.sse_feed_capacity,
        );
        if settings.sse_recheck_ms > 0 {
            hub.recheck_quiet_feeds(std::time::Duration::from_millis(
                settings.sse_recheck_ms.max(10),
            ));
        }
        let (shutdown_tx, shutdown) = tokio::sync::watch::channel(false);
        if let Some(webhooks) = &stores.webhooks {
            Sender::start_for(webhooks, &replica_id, settings.webhook_sender(), &shutdown)?;
        }
        let state = Arc::new(AppState {
            sessions,
            engine,
            composition,
            replica_id: replica_id.clone(),
            hub,
            shutdown,
            sse_heartbeat: std::time::Duration::from_millis(settings.sse_heartbeat_ms.max(100)),
            trim_on_compact: settings.trim_on_compact,
            max_agents: settings.max_agents.max(1),
            stream_max_sessions: settings.stream_max_sessions.max(1),
            auth,
            requests: Default::default(),
            limits,
            idempotency: Arc::new(Idempotency::new(stores.requests.clone())),
            webhooks: stores.webhooks.clone(),
            webhook_allow_private: settings.webhook_allow_private,
        });
        // Before binding: bad certificate files stop the start with a clear message.
        let tls =
            crate::tls::server_config(settings.tls_cert.as_deref(), settings.tls_key.as_deref())?;
        let listener = TcpListener::bind(&settings.bind)
            .with_context(|| format!("binding {}", settings.bind))?;
        let port = listener.local_addr()?.port();
        let listening = listener.try_clone()?;
        let data = web::Data::from(state.clone());
        let origins =
            http::cors::parse_origins(&settings.cors_origins).map_err(anyhow::Error::msg)?;
        let server = HttpServer::new(move || {
            // Runs on each worker thread: its Redis commands go on a connection of its own.
            crate::store::redis::own_connections();
            // Outermost last: the edge (request id, metrics, security headers, …), CORS, then
            // admission (the caller, JSON writes, keyed writes); see `http::layers`.
            App::new()
                .wrap(from_fn(http::layers::admit))
                .wrap(http::cors::layer(&origins))
                .wrap(from_fn(http::layers::edge))
                .configure(http::configure(data.clone()))
        })
        .disable_signals()
        .shutdown_timeout(5);
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut server = match tls {
            // ALPN: actix offers HTTP/2 (with its `http2` feature) and HTTP/1.1.
            Some(config) => server.listen_rustls_0_23(listener, config)?,
            None => server.listen(listener)?,
        };
        if let Some(n) = settings.workers {
            server = server.workers(n.max(1));
        }
        tracing::info!(replica = %replica_id, addr = %format!("{scheme}://{}:{port}", listener_host(&settings.bind)), "listening");
        Ok(Self {
            port,
            server: server.run(),
            state,
            shutdown: shutdown_tx,
            drain_delay: std::time::Duration::from_millis(settings.drain_delay_ms),
            listener: listening,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn state(&self) -> Arc<AppState> {
        self.state.clone()
    }

    /// A handle that stops the server (gracefully or not) from elsewhere.
    pub fn handle(&self) -> ServerHandle {
        self.server.handle()
    }

    /// Serves until stopped through [`Self::handle`] (tests) or by the process's signals.
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        self.server.await
    }

    /// Serves until SIGINT or SIGTERM, then drains: readiness turns false, SSE streams end with
    /// a reconnect hint (so clients reconnect to another replica), running turns are handed
    /// over to other replicas, and the server stops gracefully.
    pub async fn run_until_signalled(self) -> std::io::Result<()> {
        let handle = self.server.handle();
        let shutdown = self.shutdown;
        let engine = self.state.engine.clone();
        let last_runners = engine.clone();
        let drain_delay = self.drain_delay;
        let listener = self.listener;
        tokio::spawn(async move {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            next_signal(&mut term).await;
            // A second signal stops at once (an operator who cannot wait for the drain): what
            // was acknowledged is in the store, and turns still running are adopted by other
            // replicas once their leases lapse.
            tokio::spawn(async move {
                next_signal(&mut term).await;
                tracing::warn!("a second signal: exiting now, without finishing the drain");
                std::process::exit(1);
            });
            // Not ready from now on, and event streams end with a hint to reconnect soon (new
            // ones are refused with 503 `replica-draining`, which a proxy retries elsewhere);
            // running turns are handed to other replicas; requests in flight finish.
            tracing::info!("shutting down: closing event streams, handing running turns over");
            let _ = shutdown.send(true);
            engine.stop(HANDOFF_GRACE).await;
            tokio::time::sleep(drain_delay).await;
            stop_listening(&handle, &listener).await;
            handle.stop(true).await;
        });
        let served = self.server.await;
        // A prompt answered after the engine stopped (during the drain, or in flight when the
        // server stopped) started its turn's runner, which hands the turn over at once; a
        // prompt whose client went away may still be opening its turn. The process waits for
        // both before its runtime ends: a runner dropped before it let go would leave the
        // turn's lease to lapse (3 s) before another replica ran its first step.
        last_runners.finish(HANDOFF_GRACE).await;
        served
    }
}

/// The next SIGINT or SIGTERM (`term`: the SIGTERM stream, if it could be installed).
async fn next_signal(term: &mut Option<tokio::signal::unix::Signal>) {
    let terminate = async {
        match term.as_mut() {
            Some(t) => {
                t.recv().await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate => {}
    }
}

/// Closes the listening socket while the server still serves, then gives the connections
/// it accepted [`LAST_ANSWERS`] to be answered. A stopping server drops an accepted
/// connection whose request has not started yet; a proxy that sent a POST on it cannot retry
/// it elsewhere (nginx answers 502). A connection refused by a closed listener carried no
/// request, so a proxy sends it to another replica whatever its method.
async fn stop_listening(handle: &ServerHandle, listener: &TcpListener) {
    use std::os::fd::AsRawFd;
    // Not accepting first (so the acceptor is not woken by the socket it loses), then not
    // listening: connections that arrive are refused, not queued for an acceptor that stopped.
    handle.pause().await;
    // SAFETY: shutdown(2) on a socket this process owns; a failure leaves it listening, and the
    // server's stop closes it as before.
    if unsafe { libc::shutdown(listener.as_raw_fd(), libc::SHUT_RD) } != 0 {
        let e = std::io::Error::last_os_error();
        tracing::warn!(error = %e, "could not stop listening ahead of the stop");
        return;
    }
    tokio::time::sleep(LAST_ANSWERS).await;
}

/// How long connections accepted before the listener closed get to have their request
/// started, before the server stops (requests in flight then still get up to 5 s).
const LAST_ANSWERS: std::time::Duration = std::time::Duration::from_millis(250);

/// How long a stopping replica waits for its turn runners to hand their turns over.
const HANDOFF_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

fn listener_host(bind: &str) -> &str {
    bind.rsplit_once(':').map(|(h, _)| h).unwrap_or(bind)
}
