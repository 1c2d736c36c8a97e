//! Group commit: concurrent decisions on one session within a replica fold into one
//! compare-and-append, so a hot session costs one store round trip per batch, not per request.
//!
//! [`Sessions::decide`] queues its decision on the session's queue and waits for its own
//! outcome. The first decision to find no queue starts the session's **runner**, a task of its
//! own (so a request that goes away mid-commit abandons nothing: the commit runs to its end and
//! every decision in it is answered). The runner takes what is queued — up to [`MAX_JOBS`]
//! decisions, or a keyed request's decision alone, since a commit carries at most one request
//! marker — and makes the decisions in arrival order, each on the state the ones before it
//! leave (provisionally: their events stamped with the seqs they will get and a provisional
//! commit time). It appends all their events at once, anchored on the state the batch started
//! from. Committed: each decision gets its value, its own recorded events and the state right
//! after them, folded from the real records. If another writer got there first, the whole batch
//! is made again on the newer state. The runner stops when the queue is empty; it leaves under
//! the queue's lock, so a decision queued meanwhile is either taken or starts a new runner.
//!
//! A refusal is one decision's answer and does not hold back the others. It stands only once
//! the batch's append confirmed the state it was made on was the log's end (an empty append
//! when nothing else in the batch writes).
//!
//! The provisional commit time is the later of now and the batch's base commit time; the real
//! one is the store's. A decision's value derived from an earlier member's commit time would
//! carry the provisional time (no decision does today: events carry no time, values are
//! derived from ids, seqs and payloads, which are exact); `Decided::state` and `events` are
//! always the real ones.

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;

use super::idempotency::KeyedRequest;
use super::{anchor, shard, Decided, ServiceError, Sessions, MAX_ATTEMPTS};
use crate::domain::{DomainError, NewEvent, Recorded, SessionId, SessionState};
use crate::store::{now_ms, stamp, Append};

/// The most decisions one commit carries.
const MAX_JOBS: usize = 64;
/// The most events one commit carries (unless its first decision alone makes more): later
/// decisions wait for the next commit.
const MAX_EVENTS: usize = 256;
/// Shards of the queues' map.
const QUEUE_SHARDS: usize = 64;

/// A decision's value, its type erased on the way through the queue.
pub(super) type Value = Box<dyn Any + Send>;
type Decision = Result<(Value, Vec<NewEvent>), DomainError>;
pub(super) type Decide = Box<dyn Fn(&SessionState) -> Decision + Send + Sync>;

/// A queued decision.
pub(super) struct Job {
    pub decide: Decide,
    /// The keyed request ([`super::idempotency`]) the decision belongs to, taken from the
    /// deciding task when it queued: its commit is made alone, with its marker.
    pub keyed: Option<Arc<KeyedRequest>>,
    pub reply: oneshot::Sender<Answer>,
}

/// What a queued decision comes to.
pub(super) enum Answer {
    Decided(Decided<Value>),
    /// (Keyed only.) An earlier attempt of the request committed seqs `first..=last`: the
    /// decider rebuilds its result from the log.
    Already {
        first: u64,
        last: u64,
    },
    Failed(ServiceError),
    /// The decision panicked; the decider panics with it, as if it had decided itself.
    Panicked(Box<dyn Any + Send>),
}

/// The decisions waiting on each session that has a runner (a session is here exactly while
/// its runner runs).
pub(super) struct Queues(Box<[Mutex<Waiting>]>);

/// One shard of [`Queues`] (hashed as the fold cache is: SipHash cost more than the rest of
/// a queue's bookkeeping).
type Waiting = HashMap<SessionId, VecDeque<Job>, quick_cache::DefaultHashBuilder>;

impl Default for Queues {
    fn default() -> Self {
        Self((0..QUEUE_SHARDS).map(|_| Mutex::default()).collect())
    }
}

impl Queues {
    fn of(&self, sid: &SessionId) -> MutexGuard<'_, Waiting> {
        let m = &self.0[shard(sid, self.0.len())];
        m.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `job`; true when the session has no runner yet (the caller starts one).
    fn push(&self, sid: &SessionId, job: Job) -> bool {
        let mut queues = self.of(sid);
        if let Some(queue) = queues.get_mut(sid) {
            queue.push_back(job);
            return false;
        }
        queues.insert(sid.clone(), VecDeque::from([job]));
        true
    }

    /// The next batch: the unkeyed decisions at the front (up to [`MAX_JOBS`]), or a keyed one
    /// alone. Empty: the runner is gone (it left the map under the same lock).
    fn take(&self, sid: &SessionId) -> Vec<Job> {
        let mut queues = self.of(sid);
        let Some(queue) = queues.get_mut(sid) else {
            return Vec::new();
        };
        let mut batch = Vec::new();
        while let Some(job) = queue.pop_front() {
            let keyed = job.keyed.is_some();
            if keyed && !batch.is_empty() {
                queue.push_front(job);
                break;
            }
            batch.push(job);
            if keyed || batch.len() == MAX_JOBS {
                break;
            }
        }
        if batch.is_empty() {
            queues.remove(sid);
        }
        batch
    }

    /// Puts back decisions a commit had no room for, ahead of what came after them.
    fn put_back(&self, sid: &SessionId, jobs: Vec<Job>) {
        let mut queues = self.of(sid);
        let queue = queues.entry(sid.clone()).or_default();
        for job in jobs.into_iter().rev() {
            queue.push_front(job);
        }
    }

    /// Drops the session's queue (its deciders learn the runner is gone).
    fn forget(&self, sid: &SessionId) {
        self.of(sid).remove(sid);
    }
}

/// Removes a runner's queue if the runner dies by a panic, so its session is not stuck
/// without one.
struct Leaving<'a> {
    queues: &'a Queues,
    sid: &'a SessionId,
    done: bool,
}

impl Drop for Leaving<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.queues.forget(self.sid);
        }
    }
}

/// One decision of a batch, made on the state the decisions before it leave.
enum Made {
    /// With the range of its events in the batch's.
    Value(Value, Range<usize>),
    Refused(DomainError),
    /// Its events do not fold (a bug): they are left out of the commit.
    Corrupt(ServiceError),
    Panicked(Box<dyn Any + Send>),
}

/// A batch made on one state: each decision's outcome, and all their events.
struct Batch {
    made: Vec<Made>,
    events: Vec<NewEvent>,
}

impl Sessions {
    /// Queues `job` on `sid`, starting the session's runner if it has none.
    pub(super) fn enqueue(self: &Arc<Self>, sid: &SessionId, job: Job) {
        if self.queues.push(sid, job) {
            let (this, sid) = (self.clone(), sid.clone());
            tokio::spawn(async move { this.run(sid).await });
        }
    }

    /// The session's runner: commits batches until its queue is empty.
    async fn run(self: Arc<Self>, sid: SessionId) {
        let mut leaving = Leaving {
            queues: &self.queues,
            sid: &sid,
            done: false,
        };
        loop {
            let jobs = self.queues.take(&sid);
            if jobs.is_empty() {
                leaving.done = true;
                return;
            }
            let left = self.commit(&sid, jobs).await;
            if !left.is_empty() {
                self.queues.put_back(&sid, left);
            }
        }
    }

    /// Makes `jobs` on the log's end and commits their events in one append; answers each
    /// and returns the decisions that did not fit in the commit.
    async fn commit(&self, sid: &SessionId, mut jobs: Vec<Job>) -> Vec<Job> {
        // Serialized with a delete of the session.
        let _serial = self.lock(sid).lock().await;
        let keyed = match jobs.as_slice() {
            [job] => job.keyed.clone(),
            _ => None,
        };
        let mark = keyed.as_ref().map(|k| k.mark());
        let mut state = match self.cache.get(sid) {
            Some(s) => s,
            None => match self.catch_up(sid, Arc::default()).await {
                Ok(s) => s,
                Err(e) => return fail(jobs, e),
            },
        };
        for _ in 0..MAX_ATTEMPTS {
            if !state.exists() {
                return fail(jobs, ServiceError::SessionNotFound(sid.clone()));
            }
            let batch = make(&state, &jobs);
            let left = jobs.split_off(batch.made.len());
            let appended = self
                .append(
                    sid,
                    anchor(&state),
                    &batch.events,
                    state.terms.retention_ms,
                    mark.as_ref(),
                )
                .await;
            let appended = match appended {
                Ok(appended) => appended,
                Err(e) => {
                    fail(left, e.clone().into());
                    return fail(jobs, e.into());
                }
            };
            match appended {
                Append::Committed(recorded) => {
                    if let (Some(k), false) = (&keyed, recorded.is_empty()) {
                        k.committed(false);
                    }
                    self.answer(sid, &state, jobs, batch.made, recorded);
                    return left;
                }
                Append::Already { first, last } => {
                    if let Some(k) = &keyed {
                        k.committed(true);
                    }
                    for job in jobs {
                        let _ = job.reply.send(Answer::Already { first, last });
                    }
                    return left;
                }
                Append::Conflict { head, missing } => {
                    jobs.extend(left);
                    let caught_up = match self.advance(sid, state, &missing) {
                        Ok(s) if s.seq < head => self.catch_up(sid, s).await,
                        other => other,
                    };
                    state = match caught_up {
                        Ok(s) => s,
                        Err(e) => return fail(jobs, e),
                    };
                }
                Append::Replaced => {
                    jobs.extend(left);
                    // The log no longer holds what we folded (Redis lost data): start over.
                    tracing::warn!(session = %sid, seq = state.seq, "the log no longer holds what this replica folded; folding it again");
                    self.cache.remove(sid);
                    state = match self.catch_up(sid, Arc::default()).await {
                        Ok(s) => s,
                        Err(e) => return fail(jobs, e),
                    };
                }
            }
        }
        fail(jobs, ServiceError::Contention)
    }

    /// Answers each decision of a committed batch: its value, its own records and the state
    /// right after them (folded from the records, with the real commit time).
    fn answer(
        &self,
        sid: &SessionId,
        base: &Arc<SessionState>,
        jobs: Vec<Job>,
        made: Vec<Made>,
        recorded: Vec<Recorded>,
    ) {
        let mut state = base.clone();
        let mut broken: Option<ServiceError> = None;
        for (job, made) in jobs.into_iter().zip(made) {
            let answer = match (made, &broken) {
                (Made::Value(..), Some(e)) => Answer::Failed(e.clone()),
                (Made::Value(value, range), None) => {
                    let events = recorded.get(range).unwrap_or_default().to_vec();
                    match fold(&state, &events) {
                        Ok(next) => {
                            state = next;
                            Answer::Decided(Decided {
                                value,
                                state: state.clone(),
                                events,
                            })
                        }
                        Err(e) => {
                            broken = Some(e.clone());
                            Answer::Failed(e)
                        }
                    }
                }
                (Made::Refused(e), _) => Answer::Failed(e.into()),
                (Made::Corrupt(e), _) => Answer::Failed(e),
                (Made::Panicked(p), _) => Answer::Panicked(p),
            };
            // A decider that went away (its request ended) needs no answer.
            let _ = job.reply.send(answer);
        }
        if broken.is_none() {
            self.remember(sid, state.clone());
        }
        if let Some(limits) = &self.limits {
            let retention = Duration::from_millis(state.terms.retention_ms);
            limits.touch_session(state.terms.tenant.as_ref(), sid, retention);
        }
    }
}

/// Makes each decision on the state the ones before it leave, as far as the commit has room.
fn make(base: &Arc<SessionState>, jobs: &[Job]) -> Batch {
    let mut batch = Batch {
        made: Vec::with_capacity(jobs.len()),
        events: Vec::new(),
    };
    let mut state = base.clone();
    // Seqs are exact once the commit lands on `base`; the time is provisional.
    let at = now_ms().max(base.tail_ts);
    for (i, job) in jobs.iter().enumerate() {
        let decided = std::panic::catch_unwind(AssertUnwindSafe(|| (job.decide)(&state)));
        let (value, events) = match decided {
            Ok(Ok(decided)) => decided,
            Ok(Err(refused)) => {
                batch.made.push(Made::Refused(refused));
                continue;
            }
            Err(panic) => {
                batch.made.push(Made::Panicked(panic));
                continue;
            }
        };
        if i > 0 && batch.events.len() + events.len() > MAX_EVENTS {
            break;
        }
        // The last decision's events are folded only after the commit: nothing reads them
        // before.
        if i + 1 < jobs.len() && !events.is_empty() {
            match fold(&state, &stamp(&events, state.seq + 1, at)) {
                Ok(next) => state = next,
                Err(e) => {
                    batch.made.push(Made::Corrupt(e));
                    continue;
                }
            }
        }
        let start = batch.events.len();
        batch.events.extend(events);
        batch
            .made
            .push(Made::Value(value, start..batch.events.len()));
    }
    batch
}

/// `state` with `events` folded (the same state when there are none).
fn fold(state: &Arc<SessionState>, events: &[Recorded]) -> Result<Arc<SessionState>, ServiceError> {
    if events.is_empty() {
        return Ok(state.clone());
    }
    let mut next = (**state).clone();
    for e in events {
        next.evolve(e)?;
    }
    Ok(Arc::new(next))
}

/// Answers every decision of `jobs` with `error`; nothing is left over.
fn fail(jobs: Vec<Job>, error: ServiceError) -> Vec<Job> {
    for job in jobs {
        let _ = job.reply.send(Answer::Failed(error.clone()));
    }
    Vec::new()
}
