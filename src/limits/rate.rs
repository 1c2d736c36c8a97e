//! The per-replica front of the request-rate limit: a replica takes small batches of a key's
//! requests from the shared bucket ([`LimitStore::take`]) and hands them out locally, so the
//! hot path rarely waits on Redis while N replicas together still never pass `rate × seconds
//! + rate`: every request they allow was granted by the one bucket.
//!
//! A batch is at most about 1/20 s of the rate ([`batch`]: 1 to 1000 requests). Local
//! requests unused after [`LOCAL_TTL`] are dropped rather than spent later, so a replica cannot
//! save up a burst on top of what the bucket allows at that moment. Dropped requests are
//! spent all the same, so the batch follows the key's traffic on this replica: it doubles when
//! a batch is used up and shrinks to what was used when one expires — a key seen now and then
//! by many replicas takes one request at a time and wastes none. A refusal is remembered until
//! the bucket would grant again, so a client hammering past its limit costs no Redis round
//! trips.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::store::{LimitStore, StoreError};

/// How long requests taken from the bucket may wait on this replica before they are dropped.
pub const LOCAL_TTL: Duration = Duration::from_millis(250);
/// API keys whose local batch a replica keeps.
const KEYS: usize = 100_000;

/// A request's answer, with what the rate-limit headers need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateDecision {
    pub allowed: bool,
    /// The key's rate: requests per second (and its burst).
    pub limit: u32,
    /// Requests still allowed right now (as of this replica's last look at the bucket).
    pub remaining: u32,
    /// Seconds until the key's whole burst is available again.
    pub reset_secs: u64,
    /// Seconds until a request would be allowed again (0 when `allowed`).
    pub retry_after_secs: u64,
}

/// The most requests one trip to the bucket takes for a key of `rate` per second.
pub fn batch(rate: u32) -> u32 {
    (rate / 20).clamp(1, 1000)
}

/// This replica's share of one key's bucket.
struct Pool {
    rate: u32,
    /// Requests taken from the bucket and not yet handed out; void after `expires`.
    tokens: u32,
    expires: Instant,
    /// How many the next trip takes, and how many the last one got.
    batch: u32,
    taken: u32,
    /// What the bucket still held when this replica last took from it.
    remaining: u32,
    /// When the bucket is full again, as of the last take.
    full_at: Instant,
    /// The bucket refused: nothing to grant before then.
    denied_until: Option<Instant>,
}

impl Pool {
    fn new(rate: u32, now: Instant) -> Self {
        Self {
            rate,
            tokens: 0,
            expires: now,
            batch: 1,
            taken: 0,
            remaining: 0,
            full_at: now,
            denied_until: None,
        }
    }
}

fn ceil_secs(d: Duration) -> u64 {
    d.as_millis().div_ceil(1000) as u64
}

pub struct RateFront {
    store: Arc<dyn LimitStore>,
    pools: quick_cache::sync::Cache<String, Arc<tokio::sync::Mutex<Pool>>>,
}

impl RateFront {
    pub fn new(store: Arc<dyn LimitStore>) -> Self {
        Self {
            store,
            pools: quick_cache::sync::Cache::new(KEYS),
        }
    }

    /// Counts one request of `key_id` against `rate` requests per second.
    pub async fn check(&self, key_id: &str, rate: u32) -> Result<RateDecision, StoreError> {
        let rate = rate.max(1);
        let pool = self
            .pools
            .get_or_insert_with(key_id, || {
                Ok::<_, std::convert::Infallible>(Arc::new(tokio::sync::Mutex::new(Pool::new(
                    rate,
                    Instant::now(),
                ))))
            })
            .unwrap_or_else(|never| match never {});
        // One trip to the bucket per key at a time; others wait for its batch.
        let mut p = pool.lock().await;
        let now = Instant::now();
        if p.rate != rate {
            *p = Pool::new(rate, now);
        }
        let decision = |p: &Pool, now: Instant, allowed: bool| RateDecision {
            allowed,
            limit: rate,
            remaining: if allowed { p.remaining + p.tokens } else { 0 },
            reset_secs: ceil_secs(p.full_at.saturating_duration_since(now)),
            retry_after_secs: match (allowed, p.denied_until) {
                (false, Some(until)) => ceil_secs(until.saturating_duration_since(now)).max(1),
                (false, None) => 1,
                (true, _) => 0,
            },
        };
        if p.denied_until.is_some_and(|until| now < until) {
            return Ok(decision(&p, now, false));
        }
        p.denied_until = None;
        if p.tokens > 0 && now < p.expires {
            p.tokens -= 1;
            return Ok(decision(&p, now, true));
        }
        p.batch = match p.tokens {
            0 => (p.batch * 2).min(batch(rate)),
            // The last batch expired before it was used up: take what was used.
            left => (p.taken - left).clamp(1, batch(rate)),
        };
        let bucket = self.store.take(key_id, rate, p.batch).await?;
        let now = Instant::now();
        p.taken = bucket.granted;
        p.remaining = bucket.remaining;
        p.full_at = now + Duration::from_millis(bucket.reset_ms);
        if bucket.granted == 0 {
            p.tokens = 0;
            p.denied_until = Some(now + Duration::from_millis(bucket.retry_after_ms.max(1)));
            return Ok(decision(&p, now, false));
        }
        p.tokens = bucket.granted - 1;
        p.expires = now + LOCAL_TTL;
        Ok(decision(&p, now, true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryLimits;

    #[test]
    fn a_batch_is_a_twentieth_of_a_second_between_one_and_a_thousand() {
        assert_eq!(batch(1), 1);
        assert_eq!(batch(100), 5);
        assert_eq!(batch(1_000_000), 1000);
    }

    #[tokio::test]
    async fn a_fresh_key_gets_its_burst_then_a_refusal_with_a_retry_time() {
        let front = RateFront::new(Arc::new(MemoryLimits::default()));
        let mut allowed = 0;
        let mut last = None;
        for _ in 0..15 {
            let d = front.check("k1", 10).await.unwrap();
            allowed += u32::from(d.allowed);
            last = Some(d);
        }
        let last = last.unwrap();
        assert_eq!(allowed, 10, "a burst of one second's worth");
        assert!(!last.allowed);
        assert_eq!((last.limit, last.remaining), (10, 0));
        assert_eq!(last.retry_after_secs, 1);
        assert_eq!(last.reset_secs, 1);
        let other = front.check("k2", 10).await.unwrap();
        assert!(other.allowed, "keys do not share a bucket");
        assert_eq!(other.remaining, 9);
    }

    #[tokio::test]
    async fn a_key_seen_now_and_then_takes_one_request_at_a_time_and_wastes_none() {
        let front = RateFront::new(Arc::new(MemoryLimits::default()));
        let taken = |front: &RateFront| {
            let pool = front.pools.get("k").unwrap();
            let p = pool.try_lock().unwrap();
            (p.batch, p.taken)
        };
        // Busy: batches grow to a twentieth of the rate.
        for _ in 0..200 {
            assert!(front.check("k", 1000).await.unwrap().allowed);
        }
        assert_eq!(taken(&front), (50, 50));
        // Quiet: a request per expired batch takes one at a time.
        for _ in 0..2 {
            tokio::time::sleep(LOCAL_TTL + Duration::from_millis(20)).await;
            assert!(front.check("k", 1000).await.unwrap().allowed);
        }
        assert_eq!(taken(&front), (1, 1));
    }
}
