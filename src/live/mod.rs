//! Live fan-out on one replica: one store subscription (the [`LiveBus`]) feeds in-process
//! broadcast channels, one per session that has subscribers here. A replica never holds a
//! Redis connection per subscriber.
//!
//! Delivery is best-effort by design: a subscriber ([`stream::LiveStream`]) tracks the last seq
//! it sent and reads any gap from the log, and after a reconnect of the bus every feed is told
//! to resync, so a stream never skips or repeats an event. A subscriber that falls more than
//! [`FEED_CAPACITY`] items behind is cut off and resumes with `Last-Event-ID`. A deleted
//! session's feed hears it from the store's notice and its streams end.
//!
//! The hub routes by the fields a message carries and never parses a payload: a committed batch
//! is shared by every subscriber of its session, an ephemeral body goes out as it came.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::{broadcast, mpsc};

use crate::domain::event::frames::RecordedFrame;
use crate::domain::{Recorded, SessionId};
use crate::store::{Ephemeral, EventLog, LiveBus, LiveMessage};

mod steps;
pub mod stream;
mod views;

pub use stream::{Item, LiveStream};

/// Items buffered per session feed by default; a subscriber further behind is disconnected.
pub const FEED_CAPACITY: usize = 1024;

/// A committed event on its way to subscribers, serialized at most once per replica however
/// many subscribers send it.
#[derive(Debug)]
pub struct LiveEvent {
    /// The session it was committed to: every frame names its session.
    sid: SessionId,
    event: Recorded,
    json: std::sync::OnceLock<Result<Arc<str>, String>>,
}

impl LiveEvent {
    pub fn new(sid: &SessionId, event: Recorded) -> Arc<Self> {
        Arc::new(Self {
            sid: sid.clone(),
            event,
            json: std::sync::OnceLock::new(),
        })
    }

    /// The event's frame as JSON (the SSE frame's `data:`: the event naming its session),
    /// serialized on first use.
    pub fn json(&self) -> Result<&str, &str> {
        let json = self.json.get_or_init(|| {
            serde_json::to_string(&RecordedFrame {
                session: &self.sid,
                event: &self.event,
            })
            .map(Arc::from)
            .map_err(|e| e.to_string())
        });
        json.as_deref().map_err(String::as_str)
    }
}

impl std::ops::Deref for LiveEvent {
    type Target = Recorded;
    fn deref(&self) -> &Recorded {
        &self.event
    }
}

impl PartialEq for LiveEvent {
    fn eq(&self, other: &Self) -> bool {
        self.event == other.event
    }
}

#[derive(Clone, Debug)]
pub enum FeedItem {
    Events(Arc<[Arc<LiveEvent>]>),
    /// An ephemeral message, e.g. an assistant delta.
    Ephemeral(Arc<Ephemeral>),
    /// Messages may have been lost: read the log past your cursor.
    Resync,
    /// The session was deleted.
    Deleted,
}

pub struct Hub {
    feeds: Mutex<HashMap<SessionId, broadcast::Sender<FeedItem>>>,
    capacity: usize,
    /// The log streams catch up from (through the store's seam, as DESIGN §7 allows).
    log: Arc<dyn EventLog>,
}

/// A subscriber's handle on a session feed; the feed goes away with its last subscriber.
pub struct Subscription {
    /// Always `Some` until drop, which releases it under the hub's lock.
    rx: Option<broadcast::Receiver<FeedItem>>,
    hub: Weak<Hub>,
    sid: SessionId,
}

impl Subscription {
    pub fn rx(&mut self) -> &mut broadcast::Receiver<FeedItem> {
        self.rx
            .as_mut()
            .expect("a live subscription has its receiver until dropped")
    }

    /// Skips everything buffered: the next item is the next one sent.
    pub fn skip_to_tail(&mut self) {
        if let Some(rx) = self.rx.as_mut() {
            *rx = rx.resubscribe();
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let Some(hub) = self.hub.upgrade() else {
            return;
        };
        let mut feeds = hub.feeds.lock().unwrap_or_else(|p| p.into_inner());
        // Released under the lock, so two last subscribers leaving together cannot both see
        // the other and leave the feed behind.
        drop(self.rx.take());
        if feeds
            .get(&self.sid)
            .is_some_and(|tx| tx.receiver_count() == 0)
        {
            feeds.remove(&self.sid);
        }
    }
}

impl Hub {
    /// Starts listening on `bus` and dispatching to local feeds.
    pub fn start(bus: &dyn LiveBus, log: Arc<dyn EventLog>, capacity: usize) -> Arc<Self> {
        let hub = Arc::new(Hub {
            feeds: Mutex::default(),
            capacity: capacity.max(1),
            log,
        });
        let (tx, rx) = mpsc::unbounded_channel();
        bus.listen(tx);
        tokio::spawn(Self::dispatch(Arc::downgrade(&hub), rx));
        hub
    }

    async fn dispatch(hub: Weak<Hub>, mut rx: mpsc::UnboundedReceiver<LiveMessage>) {
        while let Some(msg) = rx.recv().await {
            let Some(hub) = hub.upgrade() else { return };
            let feeds = hub.feeds.lock().unwrap_or_else(|p| p.into_inner());
            match msg {
                LiveMessage::Events { sid, events } => {
                    if let Some(tx) = feeds.get(&sid) {
                        let shared = events
                            .into_iter()
                            .map(|e| LiveEvent::new(&sid, e))
                            .collect();
                        let _ = tx.send(FeedItem::Events(shared));
                    }
                }
                LiveMessage::Ephemeral(msg) => {
                    if let Some(tx) = feeds.get(&msg.sid) {
                        let _ = tx.send(FeedItem::Ephemeral(Arc::new(msg)));
                    }
                }
                LiveMessage::Deleted { sid } => {
                    if let Some(tx) = feeds.get(&sid) {
                        let _ = tx.send(FeedItem::Deleted);
                    }
                }
                LiveMessage::Reconnected => {
                    for tx in feeds.values() {
                        let _ = tx.send(FeedItem::Resync);
                    }
                }
            }
        }
    }

    pub fn subscribe(self: &Arc<Self>, sid: &SessionId) -> Subscription {
        let mut feeds = self.feeds.lock().unwrap_or_else(|p| p.into_inner());
        let rx = match feeds.get(sid) {
            Some(tx) => tx.subscribe(),
            None => {
                let (tx, rx) = broadcast::channel(self.capacity);
                feeds.insert(sid.clone(), tx);
                rx
            }
        };
        Subscription {
            rx: Some(rx),
            hub: Arc::downgrade(self),
            sid: sid.clone(),
        }
    }

    /// SSE subscribers on this replica.
    pub fn subscribers(&self) -> usize {
        let feeds = self.feeds.lock().unwrap_or_else(|p| p.into_inner());
        feeds.values().map(|tx| tx.receiver_count()).sum()
    }

    /// Sessions with local subscribers (for metrics and tests).
    pub fn active_feeds(&self) -> usize {
        self.feeds.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}
