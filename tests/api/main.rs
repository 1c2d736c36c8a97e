//! The one integration test binary: every test starts its own servers on loopback ports, and
//! every Redis scenario its own redis-server.

mod helpers;

mod adversarial;
mod composition;
mod counting;
mod deltas;
mod errors;
mod failover;
mod integrity;
mod live;
mod mock_provider;
mod openapi;
mod plan;
mod quotas;
mod rate_limits;
mod replicas;
mod review;
mod sessions;
mod sse;
mod turns;
mod verify;
