//! The live stream on the in-memory log. Most tests feed the hub through [`Wire`], a bus the
//! test drives by hand, so a lost message, a reconnect or a lag happens exactly where a test
//! puts it; time is paused, so "nothing more comes" is decided when every task is idle.

mod cursor;
mod derived;
mod events;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::mpsc::UnboundedSender;

use self::events::created;
use super::*;
use crate::domain::{NewEvent, Recorded};
use crate::store::{Anchor, LiveBus, LiveMessage, MemoryLog, StepRef, StoreResult, Watcher};

/// A live bus the test drives: what it sends is all the hub hears.
#[derive(Default)]
struct Wire(Mutex<Option<UnboundedSender<LiveMessage>>>);

impl Wire {
    fn send(&self, msg: LiveMessage) {
        let tx = self.0.lock().unwrap();
        tx.as_ref().expect("the hub listens").send(msg).unwrap();
    }
}

impl LiveBus for Wire {
    fn publish(&self, msg: Ephemeral) -> BoxFuture<'_, StoreResult<()>> {
        self.send(LiveMessage::Ephemeral(msg));
        Box::pin(async { Ok(()) })
    }

    fn listen(&self, tx: UnboundedSender<LiveMessage>) -> Watcher {
        *self.0.lock().unwrap() = Some(tx);
        Watcher::everything()
    }
}

struct Session {
    sid: SessionId,
    log: Arc<MemoryLog>,
    wire: Wire,
    hub: Arc<Hub>,
    head: AtomicU64,
}

impl Session {
    /// A session with its root agent `main`, its creation not yet delivered to anyone.
    async fn new(capacity: usize) -> Self {
        let wire = Wire::default();
        let log = Arc::new(MemoryLog::default());
        let hub = Hub::start(&wire, log.clone(), capacity);
        let s = Self {
            sid: SessionId::parse("s1").unwrap(),
            log,
            wire,
            hub,
            head: AtomicU64::new(0),
        };
        s.append(vec![created()]).await;
        s
    }

    /// Appends to the log without telling the feed: a lost message.
    async fn append(&self, events: Vec<NewEvent>) -> Vec<Recorded> {
        let expected = self.head.load(Ordering::SeqCst);
        match self
            .log
            .append(&self.sid, Anchor::seq_only(expected), &events, 0)
            .await
            .unwrap()
        {
            crate::store::Append::Committed(recorded) => {
                self.head.fetch_add(recorded.len() as u64, Ordering::SeqCst);
                recorded
            }
            other => panic!("append conflicted: {other:?}"),
        }
    }

    /// Appends and delivers to the feed, as a commit does.
    async fn commit(&self, events: Vec<NewEvent>) -> Vec<Recorded> {
        let recorded = self.append(events).await;
        self.deliver(&recorded);
        recorded
    }

    fn deliver(&self, events: &[Recorded]) {
        self.wire.send(LiveMessage::Events {
            sid: self.sid.clone(),
            events: events.to_vec(),
        });
    }

    fn publish(&self, msg: Ephemeral) {
        self.wire.send(LiveMessage::Ephemeral(msg));
    }

    async fn open(&self, after: Option<u64>) -> LiveStream {
        let head = fold(&self.log, &self.sid);
        LiveStream::open(&self.hub, &self.sid, after.map(EventId), true, head)
            .await
            .unwrap()
    }
}

/// A fresh session and a stream on it that has sent its initial view and waits on the feed.
async fn following(capacity: usize) -> (Session, LiveStream) {
    let s = Session::new(capacity).await;
    let mut stream = s.open(Some(1)).await;
    assert_eq!(drain(&mut stream).await, ["view main active=false"]);
    (s, stream)
}

/// The session folded to the log's end, as `Sessions::state` answers it.
async fn fold(log: &MemoryLog, sid: &SessionId) -> Result<Arc<SessionState>, String> {
    let mut state = SessionState::default();
    for e in log.read(sid, 0, usize::MAX).await.unwrap() {
        state.evolve(&e).map_err(|e| e.to_string())?;
    }
    Ok(Arc::new(state))
}

/// Every item until the stream ends (`end`) or nothing more comes while all tasks are idle.
async fn drain(stream: &mut LiveStream) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_millis(100), stream.next()).await {
            Ok(Some(item)) => out.push(describe(&item)),
            Ok(None) => {
                out.push("end".into());
                return out;
            }
            Err(_) => return out,
        }
    }
}

fn describe(item: &Item) -> String {
    match item {
        Item::Event(e) => format!("{} {}", e.seq(), e.kind.type_name()),
        Item::PlanView { id, agent, view } => {
            let mut s = format!("view {agent} active={}", view.active);
            if let Some(p) = view.pending {
                s.push_str(&format!(" pending={p}"));
            }
            if let Some(id) = id {
                s.push_str(&format!(" @{}", id.seq()));
            }
            s
        }
        Item::PlanRevision { id, agent, change } => format!(
            "revision {agent} {} {:?} @{}",
            change.number,
            change.status,
            id.seq()
        ),
        Item::Ephemeral(m) => match &m.step {
            Some(at) => format!(
                "{} {}/{}/{} {}",
                m.kind, at.turn, at.step, at.attempt, m.body
            ),
            None => format!("{} {}", m.kind, m.body),
        },
        Item::Reset { first_available } => format!("reset {}", first_available.seq()),
        Item::Deleted => "deleted".into(),
    }
}
