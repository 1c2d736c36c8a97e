//! What a keyed request (`Idempotency-Key`) needs of [`Sessions`] beyond a plain decision:
//! appends that carry the request's marker, and the result of a commit an earlier attempt of
//! the request made, rebuilt from the log (see [`super::idempotency`]).

use std::sync::Arc;

use super::{Decided, ServiceError, Sessions};
use crate::domain::{DomainError, NewEvent, SessionId, SessionState};
use crate::store::{Anchor, Append, Mark, StoreError};

impl Sessions {
    /// Appends with the keyed request's marker when there is one.
    pub(super) async fn append(
        &self,
        sid: &SessionId,
        expected: Anchor,
        events: &[NewEvent],
        ttl_ms: u64,
        mark: Option<&Mark>,
    ) -> Result<Append, StoreError> {
        match mark {
            Some(mark) => {
                self.log
                    .append_once(sid, expected, events, ttl_ms, mark)
                    .await
            }
            None => self.log.append(sid, expected, events, ttl_ms).await,
        }
    }

    /// The result of a decision an earlier attempt of this keyed request committed at seqs
    /// `first..=last`: `decide` made again on the state it was made on (decisions are pure
    /// functions of the state, and ids a request draws are the same on a retry), and the state
    /// right after those events, as the first attempt would have answered.
    pub(super) async fn rebuild<T>(
        &self,
        sid: &SessionId,
        first: u64,
        last: u64,
        decide: impl Fn(&SessionState) -> Result<(T, Vec<NewEvent>), DomainError>,
    ) -> Result<Decided<T>, ServiceError> {
        let applied = ServiceError::AlreadyApplied { seq: last };
        let before = first.saturating_sub(1);
        let Some(prior) = self.state_at(sid, before).await? else {
            return Err(applied);
        };
        let Ok((value, _)) = decide(&prior) else {
            return Err(applied);
        };
        let count = (last + 1).saturating_sub(first) as usize;
        let events = self.log.read(sid, before, count).await?;
        if events.len() != count || events.first().is_none_or(|e| e.seq() != first) {
            return Err(applied);
        }
        let mut state = (*prior).clone();
        for e in &events {
            state.evolve(e)?;
        }
        Ok(Decided {
            value,
            state: Arc::new(state),
            events,
        })
    }

    /// The session `sid` as its creation (events up to `last`) left it, or as it is now when
    /// its first events were compacted away since.
    pub(super) async fn created(
        &self,
        sid: &SessionId,
        last: u64,
    ) -> Result<Arc<SessionState>, ServiceError> {
        let events = self.log.read(sid, 0, last as usize).await?;
        if events.len() as u64 != last || events.first().is_none_or(|e| e.seq() != 1) {
            return self.state(sid).await;
        }
        self.advance(sid, Arc::default(), &events)
    }
}
