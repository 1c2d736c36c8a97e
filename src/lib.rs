//! dsh-plan: agent sessions with a recorded, human-reviewed plan mode.
//!
//! - [`domain`] — events, the session fold and every plan rule (pure, no I/O);
//! - [`store`] — the session log: Redis Streams and an in-memory twin behind one trait;
//! - [`auth`] — API keys, browser tokens, and who may do what to which session;
//! - [`limits`] — per-key request rates and per-tenant quotas that hold across replicas;
//! - [`service`] — folds on read, compare-and-append decisions, the per-replica cache;
//! - [`webhooks`] — sending deliveries to the tenants' endpoints, signed, at least once;
//! - [`http`] — thin handlers, the one error type, the OpenAPI document;
//! - [`redact`] — what of a URL or an outside error text may be logged, printed or returned;
//! - [`verify`] — the invariant checker behind `dsh-plan verify`;
//! - [`startup`] / [`config`] / [`tls`] — build/run split, settings, optional HTTPS.

pub mod auth;
pub mod composition;
pub mod config;
pub mod domain;
pub mod engine;
pub mod http;
pub mod limits;
pub mod live;
pub mod redact;
pub mod service;
pub mod startup;
pub mod store;
pub mod tls;
pub mod verify;
pub mod webhooks;
