//! Building and running the server, split so tests can bind port 0 and learn the port.

use std::net::TcpListener;
use std::sync::Arc;

use actix_web::dev::{Server, ServerHandle};
use actix_web::{web, App, HttpServer};
use anyhow::Context;

use crate::config::{redact, Settings};
use crate::http::{self, AppState};
use crate::service::Sessions;
use crate::store::{EventLog, MemoryLog, RedisLog};

pub struct Application {
    port: u16,
    server: Server,
    state: Arc<AppState>,
}

/// Opens the configured store: Redis when a URL is given, else the embedded in-memory log.
pub async fn open_store(settings: &Settings) -> anyhow::Result<Arc<dyn EventLog>> {
    Ok(match &settings.redis_url {
        Some(url) => {
            let log = RedisLog::connect(url, &settings.key_prefix)
                .await
                .with_context(|| format!("connecting to Redis at {}", redact(url)))?;
            tracing::info!(redis = %redact(url), prefix = %settings.key_prefix, "store: Redis Streams");
            Arc::new(log)
        }
        None => {
            tracing::warn!(
                "store: embedded in-memory log (REDIS_URL unset): single process, nothing persisted"
            );
            Arc::new(MemoryLog::default())
        }
    })
}

impl Application {
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        let store = open_store(&settings).await?;
        Self::build_with_store(settings, store)
    }

    pub fn build_with_store(settings: Settings, store: Arc<dyn EventLog>) -> anyhow::Result<Self> {
        let replica_id = settings.replica_id();
        let state = AppState::new(Sessions::new(store), replica_id.clone());
        let listener = TcpListener::bind(&settings.bind)
            .with_context(|| format!("binding {}", settings.bind))?;
        let port = listener.local_addr()?.port();
        let data = web::Data::from(state.clone());
        let mut server =
            HttpServer::new(move || App::new().configure(http::configure(data.clone())))
                .listen(listener)?
                .shutdown_timeout(5);
        if let Some(n) = settings.workers {
            server = server.workers(n.max(1));
        }
        tracing::info!(replica = %replica_id, addr = %format!("{}:{port}", listener_host(&settings.bind)), "listening");
        Ok(Self {
            port,
            server: server.run(),
            state,
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

    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        self.server.await
    }
}

fn listener_host(bind: &str) -> &str {
    bind.rsplit_once(':').map(|(h, _)| h).unwrap_or(bind)
}
