//! The pure domain: ids, events, the session fold and every plan-mode rule. No async, no I/O.

pub mod agent;
pub mod commands;
pub mod event;
pub mod history;
pub mod ids;
pub mod plan;
pub mod questions;
pub mod session;
pub mod turn;
pub mod webhooks;

pub use agent::{AgentState, AgentStatus, Next};
pub use event::{EventKind, NewEvent, Recorded};
pub use ids::{AgentId, EventId, SessionId, TenantId};
pub use plan::{Outcome, PlanView};
pub use session::{DomainError, FoldError, SessionState, SessionTerms};

#[cfg(test)]
mod proptests;
