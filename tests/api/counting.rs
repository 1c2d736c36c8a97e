//! An event log that counts the events it hands out, to show what a hot path reads, and the
//! compare-and-appends it is asked for.

/// A log that counts the events it hands out, to show what a hot path reads, and the
/// compare-and-appends it is asked for.
pub struct CountingLog {
    pub inner: std::sync::Arc<dyn dsh_plan::store::EventLog>,
    pub read: std::sync::atomic::AtomicUsize,
    pub appends: std::sync::atomic::AtomicUsize,
    /// Holds the next append back, once armed.
    pub held: Gate,
}

/// Holds one append back: armed, the next append waits until released (see
/// [`Gate::entered`]).
#[derive(Default)]
pub struct Gate {
    armed: std::sync::atomic::AtomicBool,
    entered: tokio::sync::Notify,
    release: tokio::sync::Notify,
}

impl Gate {
    /// Holds the next append back.
    pub fn arm(&self) {
        self.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Resolves once the held append is waiting.
    pub async fn entered(&self) {
        self.entered.notified().await
    }

    /// Lets the held append go on.
    pub fn release(&self) {
        self.release.notify_one();
    }

    async fn pass(&self) {
        if self.armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
            self.entered.notify_one();
            self.release.notified().await;
        }
    }
}

impl CountingLog {
    fn count(&self, n: usize) {
        self.read.fetch_add(n, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn events_read(&self) -> usize {
        self.read.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn appends(&self) -> usize {
        self.appends.load(std::sync::atomic::Ordering::SeqCst)
    }
}

mod store {
    use dsh_plan::domain::{NewEvent, Recorded, SessionId};
    use dsh_plan::store::{Anchor, Append, EventLog, Mark, StoreResult};
    use futures_util::future::BoxFuture;

    impl super::CountingLog {
        /// Counts the append, and the missed events a conflict hands back.
        fn conflicts(&self, out: Append) -> Append {
            self.appends
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if let Append::Conflict { missing, .. } = &out {
                self.count(missing.len());
            }
            out
        }
    }

    impl EventLog for super::CountingLog {
        fn kind(&self) -> &'static str {
            self.inner.kind()
        }

        fn read<'a>(
            &'a self,
            sid: &'a SessionId,
            after: u64,
            limit: usize,
        ) -> BoxFuture<'a, StoreResult<Vec<Recorded>>> {
            Box::pin(async move {
                let events = self.inner.read(sid, after, limit).await?;
                self.count(events.len());
                Ok(events)
            })
        }

        fn read_after<'a>(
            &'a self,
            sid: &'a SessionId,
            anchor: Anchor,
            limit: usize,
        ) -> BoxFuture<'a, StoreResult<Option<Vec<Recorded>>>> {
            Box::pin(async move {
                let events = self.inner.read_after(sid, anchor, limit).await?;
                self.count(events.as_ref().map_or(0, Vec::len));
                Ok(events)
            })
        }

        fn append<'a>(
            &'a self,
            sid: &'a SessionId,
            expected: Anchor,
            events: &'a [NewEvent],
            ttl_ms: u64,
        ) -> BoxFuture<'a, StoreResult<Append>> {
            Box::pin(async move {
                self.held.pass().await;
                let out = self.inner.append(sid, expected, events, ttl_ms).await?;
                Ok(self.conflicts(out))
            })
        }

        fn append_once<'a>(
            &'a self,
            sid: &'a SessionId,
            expected: Anchor,
            events: &'a [NewEvent],
            ttl_ms: u64,
            mark: &'a Mark,
        ) -> BoxFuture<'a, StoreResult<Append>> {
            Box::pin(async move {
                self.held.pass().await;
                let out = self
                    .inner
                    .append_once(sid, expected, events, ttl_ms, mark)
                    .await?;
                Ok(self.conflicts(out))
            })
        }

        fn ping(&self) -> BoxFuture<'_, StoreResult<()>> {
            self.inner.ping()
        }

        fn full(&self) -> BoxFuture<'_, StoreResult<bool>> {
            self.inner.full()
        }

        fn trim<'a>(
            &'a self,
            sid: &'a SessionId,
            keep_from: u64,
        ) -> BoxFuture<'a, StoreResult<()>> {
            self.inner.trim(sid, keep_from)
        }

        fn delete<'a>(&'a self, sid: &'a SessionId) -> BoxFuture<'a, StoreResult<bool>> {
            self.inner.delete(sid)
        }
    }
}

/// An application on `redis` whose session log is a [`CountingLog`] (the live bus, leases
/// and the rest on Redis as usual), served on loopback; with its state, for tests that drive
/// the engine directly.
pub async fn app(
    redis: &crate::helpers::TestRedis,
) -> (
    crate::helpers::TestApp,
    std::sync::Arc<CountingLog>,
    std::sync::Arc<dsh_plan::http::AppState>,
) {
    use dsh_plan::store::{RedisLeases, RedisLimits, RedisLog, RedisRequests};
    use std::sync::Arc;
    let log = RedisLog::connect(&redis.url, &redis.prefix).await.unwrap();
    let leases = Arc::new(RedisLeases::new(&log));
    let limits = Arc::new(RedisLimits::new(&log));
    let requests = Arc::new(RedisRequests::new(&log));
    let log = Arc::new(log);
    let counting = Arc::new(CountingLog {
        inner: log.clone(),
        read: Default::default(),
        appends: Default::default(),
        held: Default::default(),
    });
    let stores = dsh_plan::startup::Stores {
        log: counting.clone(),
        live: log.clone(),
        leases,
        keys: log.clone(),
        limits,
        requests,
        webhooks: None,
    };
    let mut settings = dsh_plan::config::Settings::local(Some(redis.url.clone()));
    settings.key_prefix = redis.prefix.clone();
    settings.fixture_token_delay_ms = 1;
    let app = dsh_plan::startup::Application::build_with_store(settings, stores)
        .await
        .unwrap();
    let state = app.state();
    (crate::helpers::serve(app), counting, state)
}
