//! Redis's clock as a replica reads it between `TIME` calls: the commit time of an append that
//! takes the direct path (`append.rs`), which sends no script to read `TIME` in.
//!
//! `TIME` is read at most once a [`RESYNC`] (on the append that finds the reading stale) and
//! carried forward on this process's monotonic clock, placed at the middle of its round trip:
//! off by at most half a round trip plus the two clocks' drift over a second. A session's
//! commit times never go back: the append takes the later of this and its last entry's.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use redis::RedisResult;

use super::Conn;

/// How long a reading of `TIME` is carried forward before it is read again.
const RESYNC: Duration = Duration::from_secs(1);

#[derive(Default)]
pub(super) struct RedisClock {
    read: Mutex<Option<Reading>>,
}

#[derive(Clone, Copy)]
struct Reading {
    /// When, on this process's clock, Redis's clock read `micros`.
    at: Instant,
    micros: u64,
}

impl Reading {
    fn now_ms(&self) -> u64 {
        (self.micros + self.at.elapsed().as_micros() as u64) / 1000
    }
}

impl RedisClock {
    /// Redis's time now, in ms since the epoch: one `TIME` round trip on `conn` when the last
    /// reading is older than [`RESYNC`] (or there is none).
    pub(super) async fn now_ms(&self, conn: &mut Conn) -> RedisResult<u64> {
        if let Some(read) = self.fresh() {
            return Ok(read.now_ms());
        }
        let before = Instant::now();
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await?;
        let read = Reading {
            at: before + before.elapsed() / 2,
            micros: secs.saturating_mul(1_000_000).saturating_add(micros),
        };
        *self.read.lock().unwrap_or_else(PoisonError::into_inner) = Some(read);
        Ok(read.now_ms())
    }

    fn fresh(&self) -> Option<Reading> {
        let read = *self.read.lock().unwrap_or_else(PoisonError::into_inner);
        read.filter(|r| r.at.elapsed() < RESYNC)
    }
}
