//! One subscriber's live view of a session as a typed stream: every committed event after its
//! cursor exactly once and in order, the plan views they change, and ephemeral messages.
//!
//! A stream subscribes to the replica's feed before it reads anything, so nothing committed
//! meanwhile is missed. It then catches up from the log past its cursor one batch per step (its
//! memory stays bounded however long the log) and follows the feed, reading any gap from the
//! log: a lost message, a `Resync` after the bus reconnected, or a lag while it was catching up
//! (the feed filled meanwhile: not a slow client, so it skips to the feed's tail and re-reads).
//! A client that lags the feed by more than its capacity is cut off: the stream ends and the
//! client resumes with its cursor. A cursor older than the trimmed log ends with [`Item::Reset`],
//! a deleted session with [`Item::Deleted`]: from the store's notice, or, if the notice was
//! lost, from a catch-up that finds the log gone.
//!
//! Framing, filters, heartbeats and bounds belong to the HTTP layer; this module reads the log
//! only through the store's [`EventLog`] seam (DESIGN §7).

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;

use futures_util::Stream;

use super::feed::RecvError;
use super::revisions::OpenReviews;
use super::steps::Steps;
use super::views::PlanViews;
use super::{FeedItem, Hub, LiveEvent, Subscription};
use crate::domain::event::frames::RevisionChanged;
use crate::domain::{AgentId, EventId, PlanView, SessionId, SessionState};
use crate::store::{Ephemeral, EventLog};

/// Events read from the log per round trip while catching up.
const CATCH_UP_BATCH: usize = 500;

/// What a stream yields, in the order a client should apply it.
// Events are most items, so boxing them would add an allocation per event and save nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// A committed event, each exactly once, in log order.
    Event(Arc<LiveEvent>),
    /// An agent's plan view: at the start (no `id`) as of the session's head, then whenever an
    /// event after that head (`id`) changed it.
    PlanView {
        id: Option<EventId>,
        agent: AgentId,
        view: PlanView,
    },
    /// A plan revision the event `id` submitted or decided.
    PlanRevision {
        id: EventId,
        agent: AgentId,
        change: RevisionChanged,
    },
    /// A message that is never recorded, e.g. an assistant delta.
    Ephemeral(Arc<Ephemeral>),
    /// The cursor is older than the trimmed log: re-read the session, then reconnect after its
    /// last event id. The stream ends after it.
    Reset { first_available: EventId },
    /// The session was deleted. The stream ends after it.
    Deleted,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Reading the log past the cursor, a batch per step.
    CatchingUp,
    /// Reading the feed; `fresh` until its first batch of events after a catch-up.
    Following {
        fresh: bool,
    },
    Ended,
}

pub struct LiveStream {
    sid: SessionId,
    log: Arc<dyn EventLog>,
    sub: Subscription,
    /// The last event sent or passed over: the stream's position.
    last: u64,
    /// The client's cursor: events up to it move the stream's state but are not sent.
    cursor: u64,
    /// `None` when plan mode is not composed (no plan views nor revisions at all).
    views: Option<(PlanViews, OpenReviews)>,
    steps: Steps,
    queue: VecDeque<Item>,
    mode: Mode,
}

impl LiveStream {
    /// Subscribes to `sid` on `hub`, then awaits `head` (the session folded to its current end)
    /// — in that order, so nothing committed between the two is missed — and opens a stream
    /// that resumes after `after` (from the start when `None`).
    pub async fn open<E>(
        hub: &Arc<Hub>,
        sid: &SessionId,
        after: Option<EventId>,
        plan_views: bool,
        head: impl Future<Output = Result<Arc<SessionState>, E>>,
    ) -> Result<Self, E> {
        let sub = hub.subscribe(sid);
        let head = head.await?;
        Ok(Self::start(
            sub,
            hub.log.clone(),
            sid,
            after,
            plan_views,
            &head,
        ))
    }

    fn start(
        sub: Subscription,
        log: Arc<dyn EventLog>,
        sid: &SessionId,
        after: Option<EventId>,
        plan_views: bool,
        head: &SessionState,
    ) -> Self {
        let cursor = after.map_or(0, EventId::seq);
        let mut queue = VecDeque::new();
        let views = plan_views.then(|| {
            let (views, initial) = PlanViews::at_head(head);
            queue.extend(initial.into_iter().map(|(agent, view)| Item::PlanView {
                id: None,
                agent,
                view,
            }));
            (views, OpenReviews::at_head(head, cursor < head.seq))
        });
        Self {
            sid: sid.clone(),
            log,
            sub,
            // A cursor past the head (not an event yet) still moves the views from the head.
            last: cursor.min(head.seq),
            cursor,
            views,
            steps: Steps::default(),
            queue,
            mode: Mode::CatchingUp,
        }
    }

    /// The next item; `None` once the stream ended (reset, cut off, feed closed, or the log
    /// unreadable), after which the client resumes with its cursor.
    ///
    /// Cancel-safe: state changes only after the one await of a step completes, so a caller
    /// may race this against a timer. (Prefer [`LiveStream::into_stream`], which also keeps
    /// an interrupted log read.)
    pub async fn next(&mut self) -> Option<Item> {
        loop {
            if let Some(item) = self.queue.pop_front() {
                return Some(item);
            }
            match self.mode {
                Mode::Ended => return None,
                Mode::CatchingUp => self.catch_up_batch().await,
                Mode::Following { fresh } => {
                    let item = self.sub.rx().recv().await;
                    self.receive(item, fresh);
                }
            }
        }
    }

    /// The stream as a [`Stream`] of items.
    pub fn into_stream(self) -> impl Stream<Item = Item> + Send {
        futures_util::stream::unfold(self, |mut s| async move { s.next().await.map(|i| (i, s)) })
    }

    /// Reads and queues one batch of the log past the cursor; a short batch ends the catch-up.
    async fn catch_up_batch(&mut self) {
        let batch = match self.log.read(&self.sid, self.last, CATCH_UP_BATCH).await {
            Ok(batch) => batch,
            Err(e) => {
                tracing::warn!(session = %self.sid, error = %e, "live catch-up failed; ending the stream");
                self.mode = Mode::Ended;
                return;
            }
        };
        if batch.is_empty() && !super::has_log(&*self.log, &self.sid).await {
            self.queue.push_back(Item::Deleted);
            self.mode = Mode::Ended;
            return;
        }
        if let Some(first) = batch.first() {
            if self.last > 0 && first.seq() > self.last + 1 {
                self.queue.push_back(Item::Reset {
                    first_available: first.id,
                });
                self.mode = Mode::Ended;
                return;
            }
        }
        if batch.len() < CATCH_UP_BATCH {
            self.mode = Mode::Following { fresh: true };
        }
        for e in batch {
            self.accept(LiveEvent::new(&self.sid, e));
        }
        if matches!(self.mode, Mode::Following { .. }) {
            // Caught up: the log ended here a moment ago.
            self.sub.saw(self.last);
        }
    }

    fn receive(&mut self, item: Result<FeedItem, RecvError>, fresh: bool) {
        match item {
            Ok(FeedItem::Events(batch)) => {
                self.mode = Mode::Following { fresh: false };
                for e in batch.iter() {
                    if e.seq() <= self.last {
                        continue;
                    }
                    if e.seq() > self.last + 1 {
                        // A lost message: the log has it, and the rest.
                        self.mode = Mode::CatchingUp;
                        return;
                    }
                    self.accept(e.clone());
                }
            }
            Ok(FeedItem::Ephemeral(msg)) => {
                if self.steps.admits(&msg) {
                    self.queue.push_back(Item::Ephemeral(msg));
                }
            }
            Ok(FeedItem::Resync) => self.mode = Mode::CatchingUp,
            Ok(FeedItem::Deleted) => {
                self.queue.push_back(Item::Deleted);
                self.mode = Mode::Ended;
            }
            // Fell behind while catching up from the log: not a slow client; skip what the
            // feed buffered and read it from the log instead.
            Err(RecvError::Lagged(_)) if fresh => {
                self.sub.skip_to_tail();
                self.mode = Mode::CatchingUp;
            }
            Err(RecvError::Lagged(n)) => {
                tracing::info!(session = %self.sid, behind = n, "slow live subscriber cut off; it resumes with its cursor");
                self.mode = Mode::Ended;
            }
            Err(RecvError::Closed) => self.mode = Mode::Ended,
        }
    }

    /// Takes the next event in log order: queues it and the plan views it changed, unless the
    /// client's cursor already covers it.
    fn accept(&mut self, e: Arc<LiveEvent>) {
        self.last = e.seq();
        self.steps.observe(&e);
        let (changed, revised) = match &mut self.views {
            Some((views, reviews)) => (views.apply(&e), reviews.apply(&e)),
            None => (Vec::new(), None),
        };
        if e.seq() <= self.cursor {
            return;
        }
        let (id, agent) = (e.id, e.agent.clone());
        self.queue.push_back(Item::Event(e));
        self.queue
            .extend(changed.into_iter().map(|(agent, view)| Item::PlanView {
                id: Some(id),
                agent,
                view,
            }));
        if let Some(change) = revised {
            self.queue
                .push_back(Item::PlanRevision { id, agent, change });
        }
    }
}

#[cfg(test)]
mod tests;
