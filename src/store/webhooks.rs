//! Webhook endpoints, the delivery queue and the delivery records (Redis only; the layout is in
//! `redis/webhooks.rs`).
//!
//! Endpoints and delivery records belong to their tenant (`{t:<tenant>}`). The queue is spread
//! over [`super::redis::LEASE_GROUPS`] slot groups like the turn leases, each a stream with one
//! consumer group: a job is taken by one replica (`XREADGROUP`), stays pending until that
//! replica finishes it or schedules its retry, and is taken over by another replica
//! (`XAUTOCLAIM`) when it stays pending longer than the visibility timeout (its replica died).

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};

use super::StoreResult;
use crate::domain::webhooks::{Attempt, Delivery, WebhookEvent};

/// A registered endpoint as stored, its signing secret included (never shown after creation).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    pub id: String,
    pub url: String,
    pub events: Vec<WebhookEvent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `whsec_<base64>`.
    pub secret: String,
    /// ms since the epoch.
    pub created_at: u64,
}

/// One delivery to make: everything the sender needs but the endpoint's URL and secret, which
/// it reads when it sends (a deleted endpoint gets nothing more).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// The delivery id (`webhook-id`).
    pub id: String,
    pub tenant: String,
    pub endpoint: String,
    pub event: WebhookEvent,
    pub session: String,
    /// The queue group it goes to (its session's).
    pub group: usize,
    /// The event's commit time (ms): retries stop 24 h after it.
    pub created_at: u64,
    /// Attempts made so far.
    #[serde(default)]
    pub attempts: u32,
    /// The JSON body, sent byte for byte on every attempt.
    pub body: String,
}

/// A job taken from the queue: pending under this replica's consumer until finished or retried.
#[derive(Clone, Debug)]
pub struct Taken {
    pub group: usize,
    /// Its stream entry id.
    pub entry: String,
    pub job: Job,
}

/// What [`WebhookStore::create`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Created {
    Stored,
    /// An endpoint with this id exists already.
    Exists,
    /// The tenant has as many endpoints as it may.
    Full,
}

/// A page of an endpoint's deliveries, newest first.
#[derive(Clone, Debug, Default)]
pub struct DeliveryPage {
    pub deliveries: Vec<Delivery>,
    /// Where the next page starts (an opaque position), when more may follow.
    pub next: Option<String>,
}

/// A change to a delivery's record.
#[derive(Clone, Debug)]
pub struct Recording<'a> {
    pub tenant: &'a str,
    pub endpoint: &'a str,
    /// The record as it now stands (its attempts are kept beside it, not in it).
    pub delivery: &'a Delivery,
    /// An attempt to add to its list.
    pub attempt: Option<&'a Attempt>,
    /// Only create the record (the job was just queued); an existing one is left as it is.
    pub create_only: bool,
}

pub trait WebhookStore: Send + Sync + 'static {
    /// Stores a new endpoint unless one with its id exists (a keyed retry: nothing is changed)
    /// or the tenant has `max` already.
    fn create<'a>(
        &'a self,
        tenant: &'a str,
        endpoint: &'a Endpoint,
        max: usize,
    ) -> BoxFuture<'a, StoreResult<Created>>;
    /// The tenant's endpoints, oldest first.
    fn endpoints<'a>(&'a self, tenant: &'a str) -> BoxFuture<'a, StoreResult<Vec<Endpoint>>>;
    fn endpoint<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, StoreResult<Option<Endpoint>>>;
    /// Whether the session a job is about still exists: a deleted or expired session's
    /// events (plan text among them) are not sent on.
    fn session_exists<'a>(&'a self, session: &'a str) -> BoxFuture<'a, StoreResult<bool>>;
    /// Removes an endpoint and its delivery records; false when there was none.
    fn remove<'a>(&'a self, tenant: &'a str, id: &'a str) -> BoxFuture<'a, StoreResult<bool>>;

    /// Queues `job` unless a job with its id was queued in the last [`SEEN_MS`]: true when
    /// this call queued it.
    fn enqueue<'a>(&'a self, job: &'a Job) -> BoxFuture<'a, StoreResult<bool>>;
    /// Up to `max` jobs of `group` for `consumer`: retries that came due, jobs pending longer
    /// than `claim_idle_ms` under any consumer, then new ones.
    fn take<'a>(
        &'a self,
        group: usize,
        consumer: &'a str,
        max: usize,
        claim_idle_ms: u64,
    ) -> BoxFuture<'a, StoreResult<Vec<Taken>>>;
    /// The job is done (delivered, given up, or its endpoint is gone).
    fn finish<'a>(&'a self, taken: &'a Taken) -> BoxFuture<'a, StoreResult<()>>;
    /// Takes `taken` off the queue and queues `taken.job` again when `due_ms` (epoch) comes.
    fn retry<'a>(&'a self, taken: &'a Taken, due_ms: u64) -> BoxFuture<'a, StoreResult<()>>;

    /// Creates or updates a delivery record (the newest [`KEPT_DELIVERIES`] of an endpoint are
    /// kept, with their latest [`KEPT_ATTEMPTS`] attempts).
    fn record<'a>(&'a self, r: Recording<'a>) -> BoxFuture<'a, StoreResult<()>>;
    /// A page of the endpoint's delivery records, newest first, after position `after`.
    fn deliveries<'a>(
        &'a self,
        tenant: &'a str,
        endpoint: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<DeliveryPage>>;
}

/// How long a queued delivery id is remembered, so announcing its event again queues nothing.
pub const SEEN_MS: u64 = 48 * 3600 * 1000;
/// Delivery records kept per endpoint.
pub const KEPT_DELIVERIES: usize = 1000;
/// Attempts kept per delivery record.
pub const KEPT_ATTEMPTS: usize = 20;
/// Jobs a queue group's stream holds at most (older entries are trimmed, pending or not).
pub const QUEUE_MAX: usize = 100_000;
