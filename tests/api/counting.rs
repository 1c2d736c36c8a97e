//! An event log that counts the events it hands out, to show what a hot path reads, and the
//! compare-and-appends it is asked for.

/// A log that counts the events it hands out, to show what a hot path reads, and the
/// compare-and-appends it is asked for.
pub struct CountingLog {
    pub inner: std::sync::Arc<dyn dsh_plan::store::EventLog>,
    pub read: std::sync::atomic::AtomicUsize,
    pub appends: std::sync::atomic::AtomicUsize,
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
