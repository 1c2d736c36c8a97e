//! Sending webhook deliveries: every replica runs one [`Sender`], which takes jobs from the
//! queue's slot groups (`store::webhooks`), POSTs each signed body (Standard Webhooks, see
//! [`sign`]) to its endpoint, records the attempt, and then finishes the job (2xx, or given up
//! after 24 h) or schedules its next attempt with exponential backoff.
//!
//! At least once: a job stays pending under this replica until its attempt is recorded and it
//! is finished or rescheduled; if the replica dies first, another one claims it once it has
//! been pending for the visibility timeout (`DSH_WEBHOOK_CLAIM_MS`) and sends it again, with
//! the same `webhook-id`. Receivers de-duplicate on that id.
//!
//! Bounded: at most `concurrency` deliveries in flight per replica, a take per group at most
//! that many jobs, 10 s per request, no redirects, at most [`MAX_RESPONSE`] bytes of an answer
//! read. Logs name the endpoint by id and its URL without query; never its secret.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use crate::domain::webhooks::{backoff, Attempt, Delivery, DeliveryStatus};
use crate::store::now_ms;
use crate::store::redis::LEASE_GROUPS;
use crate::store::webhooks::{Endpoint, Recording, Taken};
use crate::store::WebhookStore;

pub mod destination;
pub mod sign;

/// How long one attempt may take, connection included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes of an endpoint's answer read at most (the rest is dropped).
pub const MAX_RESPONSE: usize = 64 * 1024;
/// Jobs one take asks a group for at most.
const BATCH: usize = 32;
/// Pause between takes when the last round found work.
const BUSY_PAUSE: Duration = Duration::from_millis(10);

/// A delivery's last attempt error when its session was deleted before it was sent.
const SESSION_GONE: &str = "the session was deleted or expired; nothing was sent";

/// How a replica sends deliveries (`DSH_WEBHOOK_*`).
#[derive(Clone, Debug)]
pub struct SenderConfig {
    /// The wait after a first failed attempt; it doubles after each further one (capped).
    pub backoff_ms: u64,
    /// How long a job may stay pending under a replica before another one claims it.
    pub claim_ms: u64,
    /// Pause between rounds of takes when the queue was empty.
    pub poll_ms: u64,
    /// Deliveries in flight on this replica at most.
    pub concurrency: usize,
    /// Whether private and loopback destinations are allowed.
    pub allow_private: bool,
    /// How long after its event a delivery is retried before it is `failed`.
    pub give_up_ms: u64,
}

pub struct Sender {
    store: Arc<dyn WebhookStore>,
    client: reqwest::Client,
    /// This replica's consumer name in every group.
    consumer: String,
    config: SenderConfig,
    permits: Arc<Semaphore>,
}

impl Sender {
    pub fn new(
        store: Arc<dyn WebhookStore>,
        consumer: String,
        config: SenderConfig,
    ) -> anyhow::Result<Arc<Self>> {
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(Arc::new(destination::Guarded {
                allow_private: config.allow_private,
            }))
            .user_agent(concat!("dsh-plan-webhooks/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Arc::new(Self {
            store,
            client,
            consumer,
            permits: Arc::new(Semaphore::new(config.concurrency.max(1))),
            config,
        }))
    }

    /// Starts this replica's sender (its consumer name: the replica's id and a fresh suffix,
    /// so a restarted replica never inherits what its last run left pending; that is claimed).
    pub fn start_for(
        store: &Arc<dyn WebhookStore>,
        replica: &str,
        config: SenderConfig,
        shutdown: &tokio::sync::watch::Receiver<bool>,
    ) -> anyhow::Result<()> {
        let consumer = format!("{replica}#{}", uuid::Uuid::now_v7().simple());
        Self::new(store.clone(), consumer, config)?.start(shutdown.clone());
        Ok(())
    }

    /// Takes and sends jobs until `shutdown` turns true. Jobs in flight then are left pending
    /// (another replica claims them); none is taken after.
    pub fn start(
        self: &Arc<Self>,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let mut first = 0;
            loop {
                if *shutdown.borrow() {
                    return;
                }
                let found = this.round(first).await;
                first = (first + 1) % LEASE_GROUPS;
                let pause = if found {
                    BUSY_PAUSE
                } else {
                    Duration::from_millis(this.config.poll_ms.max(10))
                };
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    // Stopping, or the server is gone.
                    changed = shutdown.changed() => if changed.is_err() { return },
                }
            }
        })
    }

    /// One take from every group (starting at `first`), as far as free capacity goes;
    /// whether any job was taken.
    async fn round(self: &Arc<Self>, first: usize) -> bool {
        let mut found = false;
        for i in 0..LEASE_GROUPS {
            let free = self.permits.available_permits().min(BATCH);
            if free == 0 {
                break;
            }
            let group = (first + i) % LEASE_GROUPS;
            let taken = self
                .store
                .take(group, &self.consumer, free, self.config.claim_ms)
                .await;
            let jobs = match taken {
                Ok(jobs) => jobs,
                Err(e) => {
                    tracing::warn!(group, error = %e, "taking webhook jobs failed");
                    break;
                }
            };
            for t in jobs {
                found = true;
                let Ok(permit) = self.permits.clone().acquire_owned().await else {
                    return found;
                };
                let this = self.clone();
                tokio::spawn(async move {
                    this.deliver(t).await;
                    drop(permit);
                });
            }
        }
        found
    }

    /// One attempt at a job, its record, and the job finished or rescheduled.
    async fn deliver(&self, mut t: Taken) {
        let job = &t.job;
        let endpoint = match self.store.endpoint(&job.tenant, &job.endpoint).await {
            Ok(Some(e)) => e,
            // Deleted since: nothing more is sent.
            Ok(None) => return self.finish(&t).await,
            // Left pending: claimed again after the visibility timeout.
            Err(e) => {
                return tracing::warn!(delivery = %job.id, error = %e, "reading a webhook endpoint failed")
            }
        };
        // A session deleted (or expired) since its event was queued: nothing of it is sent,
        // and the delivery ends `failed` with the reason.
        let exists = match self.store.session_exists(&job.session).await {
            Ok(exists) => exists,
            Err(e) => {
                return tracing::warn!(delivery = %job.id, error = %e, "checking a webhook's session failed")
            }
        };
        let at = now_ms();
        let started = Instant::now();
        let outcome = match exists {
            true => self.send(&endpoint, &t).await,
            false => Err(SESSION_GONE.to_owned()),
        };
        let attempt = Attempt {
            at,
            status: outcome.as_ref().ok().copied(),
            error: outcome.as_ref().err().cloned(),
            duration_ms: started.elapsed().as_millis() as u64,
        };
        t.job.attempts += 1;
        let job = &t.job;
        let ok = matches!(outcome, Ok(s) if (200..300).contains(&s));
        let now = now_ms();
        let next = match ok || !exists {
            true => None,
            false => backoff(
                self.config.backoff_ms,
                job.attempts,
                now.saturating_sub(job.created_at),
                self.config.give_up_ms,
            )
            .map(|wait| now + wait),
        };
        let status = match (ok, next) {
            (true, _) => DeliveryStatus::Succeeded,
            (false, Some(_)) => DeliveryStatus::Pending,
            (false, None) => DeliveryStatus::Failed,
        };
        if !ok {
            tracing::info!(delivery = %job.id, endpoint = %endpoint.id, url = %destination::shown(&endpoint.url), attempt = job.attempts, status = ?attempt.status, error = ?attempt.error, "webhook attempt failed");
        }
        let delivery = Delivery {
            id: job.id.clone(),
            event: job.event,
            session: job.session.clone(),
            status,
            attempts: Vec::new(),
            next_attempt_at: next,
            created_at: job.created_at,
        };
        let recording = Recording {
            tenant: &job.tenant,
            endpoint: &job.endpoint,
            delivery: &delivery,
            attempt: Some(&attempt),
            create_only: false,
        };
        if let Err(e) = self.store.record(recording).await {
            tracing::warn!(delivery = %job.id, error = %e, "recording a webhook attempt failed");
        }
        match next {
            Some(due) => {
                if let Err(e) = self.store.retry(&t, due).await {
                    tracing::warn!(delivery = %t.job.id, error = %e, "scheduling a webhook retry failed; it is claimed again later");
                }
            }
            None => self.finish(&t).await,
        }
    }

    async fn finish(&self, t: &Taken) {
        if let Err(e) = self.store.finish(t).await {
            tracing::warn!(delivery = %t.job.id, error = %e, "finishing a webhook job failed; it may be sent again");
        }
    }

    /// POSTs the job's body, signed; the endpoint's status, or why there was none.
    async fn send(&self, endpoint: &Endpoint, t: &Taken) -> Result<u16, String> {
        destination::parse(&endpoint.url, self.config.allow_private)?;
        let key = sign::secret_key(&endpoint.secret)
            .ok_or_else(|| "the endpoint's secret is not base64".to_owned())?;
        let timestamp = now_ms() / 1000;
        let body = t.job.body.as_bytes();
        let signature = sign::signature(&key, &t.job.id, timestamp, body);
        let sent = self
            .client
            .post(&endpoint.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("webhook-id", &t.job.id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(t.job.body.clone())
            .send()
            .await;
        let mut res = sent.map_err(failure)?;
        let status = res.status().as_u16();
        // Read (a bounded part of) the answer, so the connection can be reused.
        let mut read = 0;
        while read < MAX_RESPONSE {
            match res.chunk().await {
                Ok(Some(chunk)) => read += chunk.len(),
                _ => break,
            }
        }
        Ok(status)
    }
}

/// Why a request got no answer, without its URL (which may carry a token in its query).
fn failure(e: reqwest::Error) -> String {
    if e.is_timeout() {
        return format!("timed out after {} s", REQUEST_TIMEOUT.as_secs());
    }
    let e = e.without_url();
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text.chars().take(300).collect()
}
