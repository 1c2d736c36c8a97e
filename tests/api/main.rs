//! The one integration test binary: every test starts its own servers on loopback ports, and
//! every Redis scenario its own redis-server.

mod helpers;

mod adversarial;
mod attacks;
mod auth;
mod composition;
mod cors;
mod counting;
mod deletion;
mod deltas;
mod errors;
mod failover;
mod guard;
mod idempotency;
mod integrity;
mod live;
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
mod sessions;
mod sse;
mod store_full;
mod turns;
mod verify;
