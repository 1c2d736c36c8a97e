//! The one integration test binary: every test starts its own servers on loopback ports, and
//! every Redis scenario its own redis-server.

mod helpers;

mod adversarial;
mod attacks;
mod auth;
mod cluster;
mod composition;
mod cors;
mod counting;
mod cursors;
mod deletion;
mod deltas;
mod errors;
mod failover;
mod fanout;
mod frames;
mod group;
mod guard;
mod head;
mod idempotency;
mod integrity;
mod lists;
mod live;
mod many;
mod mock_provider;
mod modes;
mod openapi;
mod plan;
mod quotas;
mod rate_limits;
mod redaction;
mod replicas;
mod retention;
mod review;
mod revisions;
mod rolling;
mod sessions;
mod spec;
mod sse;
mod store_full;
mod tls;
mod turns;
mod verify;
mod webhook_queue;
mod webhooks;
