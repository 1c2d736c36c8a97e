//! Live fan-out on one replica: one store subscription (the [`LiveBus`]) feeds in-process
//! feeds, one per session that has subscribers here. A replica never holds a Redis connection
//! per subscriber, and hears only the sessions it has subscribers for: the hub tells the bus
//! when a session gains its first subscriber here and when its last one leaves
//! ([`Watcher`]), and the bus says when a session's subscription is (re)established, which
//! makes that feed's streams catch up from the log.
//!
//! Delivery is best-effort by design: a subscriber ([`stream::LiveStream`]) tracks the last seq
//! it sent and reads any gap from the log, after a reconnect of the bus every feed is told to
//! resync, and a session whose feed heard nothing for a while has its log read past what it
//! last heard ([`Hub::recheck_quiet_feeds`]: a message that never came at the log's tail, its
//! writer gone between the commit and the message), so a stream never skips or repeats an
//! event. A subscriber that falls more than
//! [`FEED_CAPACITY`] items behind is cut off and resumes with `Last-Event-ID`. A deleted
//! session's feed hears it from the store's notice and its streams end.
//!
//! The hub routes by the fields a message carries and never parses a payload: a committed batch
//! is shared by every subscriber of its session, an ephemeral body goes out as it came.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::domain::event::frames::RecordedFrame;
use crate::domain::{Recorded, SessionId};
use crate::store::{Ephemeral, EventLog, LiveBus, LiveMessage, StoreError, Watcher};

pub mod feed;
mod revisions;
mod steps;
pub mod stream;
mod views;

pub use stream::{Item, LiveStream};

/// Items a session feed holds at most by default; a subscriber further behind is disconnected.
/// A feed holds only what some subscriber has not read yet.
pub const FEED_CAPACITY: usize = 1024;

/// Events a recheck of a quiet feed reads at most: past them, the next recheck reads on (only
/// the tail of a log can miss its message, usually one commit's events).
const RECHECK_READ: usize = 32;

/// Whether the session still has a log (it always holds at least its last event). A failed
/// read is an outage, not a deletion: the session's streams go on.
async fn has_log(log: &dyn EventLog, sid: &SessionId) -> bool {
    match log.read(sid, 0, 1).await {
        Ok(first) => !first.is_empty(),
        Err(_) => true,
    }
}

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

type Feed = feed::Feed<FeedItem>;

pub struct Hub {
    feeds: Mutex<HashMap<SessionId, Local>>,
    capacity: usize,
    /// Tells the bus which sessions this replica listens to.
    watcher: Watcher,
    /// Messages the bus delivered, and those of them for a session with no feed here.
    received: std::sync::atomic::AtomicU64,
    unwatched: std::sync::atomic::AtomicU64,
    /// The log streams catch up from (through the store's seam, as DESIGN §7 allows).
    log: Arc<dyn EventLog>,
}

/// A session with subscribers here: its feed, and what the bus said of it lately.
struct Local {
    feed: Arc<Feed>,
    /// The highest seq of the committed events delivered to the feed (0: none yet), or found in
    /// the log by a recheck.
    seen: u64,
    /// Whether committed events came since the last recheck ([`Hub::recheck_quiet_feeds`]).
    heard: bool,
    /// Whether a subscriber caught up past what the feed heard while others follow it: they
    /// may miss what it read (a lost message), so a quiet feed's next recheck has them catch
    /// up too.
    behind: bool,
}

impl Local {
    fn new(feed: Arc<Feed>) -> Self {
        Self {
            feed,
            seen: 0,
            heard: false,
            behind: false,
        }
    }
}

/// A subscriber's handle on a session feed; the feed goes away with its last subscriber.
pub struct Subscription {
    /// Always `Some` until drop, which releases it under the hub's lock.
    rx: Option<feed::Receiver<FeedItem>>,
    hub: Weak<Hub>,
    sid: SessionId,
}

impl Subscription {
    pub fn rx(&mut self) -> &mut feed::Receiver<FeedItem> {
        self.rx
            .as_mut()
            .expect("a live subscription has its receiver until dropped")
    }

    /// Tells the hub the session's log held events up to `seq` (this subscriber caught up to
    /// there): its recheck reads past that. Past what the feed heard, the log holds events
    /// the feed's other subscribers may not have (their message lost, or still on its way):
    /// unless the bus brings more (whose gap they read), they catch up at the next recheck.
    pub fn saw(&self, seq: u64) {
        let Some(hub) = self.hub.upgrade() else {
            return;
        };
        let mut feeds = hub.feeds.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(local) = feeds.get_mut(&self.sid) {
            if seq > local.seen {
                local.seen = seq;
                local.behind |= local.feed.receivers() > 1;
            }
        }
    }

    /// Skips everything buffered: the next item is the next one sent.
    pub fn skip_to_tail(&mut self) {
        if let Some(rx) = self.rx.as_mut() {
            rx.skip_to_end();
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
            .is_some_and(|f| f.feed.receivers() == 0)
        {
            feeds.remove(&self.sid);
            hub.watcher.unwatch(&self.sid);
        }
    }
}

impl Hub {
    /// Starts listening on `bus` and dispatching to local feeds.
    pub fn start(bus: &dyn LiveBus, log: Arc<dyn EventLog>, capacity: usize) -> Arc<Self> {
        let (tx, rx) = mpsc::unbounded_channel();
        let watcher = bus.listen(tx);
        let hub = Arc::new(Hub {
            feeds: Mutex::default(),
            capacity: capacity.max(1),
            watcher,
            received: Default::default(),
            unwatched: Default::default(),
            log,
        });
        tokio::spawn(Self::dispatch(Arc::downgrade(&hub), rx));
        hub
    }

    async fn dispatch(hub: Weak<Hub>, mut rx: mpsc::UnboundedReceiver<LiveMessage>) {
        while let Some(msg) = rx.recv().await {
            let Some(hub) = hub.upgrade() else { return };
            let mut feeds = hub.feeds.lock().unwrap_or_else(|p| p.into_inner());
            let confirmation = matches!(msg, LiveMessage::Watching { .. });
            if let Some(sid) = msg.session().filter(|_| !confirmation) {
                hub.received.fetch_add(1, Ordering::Relaxed);
                if !feeds.contains_key(sid) {
                    hub.unwatched.fetch_add(1, Ordering::Relaxed);
                }
            }
            match msg {
                LiveMessage::Events { sid, events } => {
                    if let Some(local) = feeds.get_mut(&sid) {
                        local.heard = true;
                        if let Some(last) = events.last() {
                            local.seen = local.seen.max(last.seq());
                        }
                        let shared = events
                            .into_iter()
                            .map(|e| LiveEvent::new(&sid, e))
                            .collect();
                        local.feed.send(FeedItem::Events(shared));
                    }
                }
                LiveMessage::Ephemeral(msg) => {
                    if let Some(local) = feeds.get(&msg.sid) {
                        local.feed.send(FeedItem::Ephemeral(Arc::new(msg)));
                    }
                }
                LiveMessage::Deleted { sid } => {
                    if let Some(local) = feeds.get(&sid) {
                        local.feed.send(FeedItem::Deleted);
                    }
                }
                LiveMessage::Reconnected => {
                    for local in feeds.values() {
                        local.feed.send(FeedItem::Resync);
                    }
                }
                LiveMessage::Watching { sid } => {
                    if let Some(local) = feeds.get(&sid) {
                        local.feed.send(FeedItem::Resync);
                    }
                }
            }
        }
    }

    /// Every `every`, reads the log of each session whose feed heard no committed events since
    /// the last time, past the last seq it knows of: if the log holds more, the feed's streams
    /// catch up from it ([`FeedItem::Resync`]). A live message is sent after its commit, so a
    /// replica that dies between the two (or a message lost on the way) leaves subscribers
    /// elsewhere without that event until the session's next message: for a session that goes
    /// quiet after it, about twice this long at most (the period it was committed in may have
    /// heard other events; a pass takes a read per quiet session). A log found gone (its
    /// deletion notice lost, its keys expired) ends the streams the same way. One `read` per
    /// quiet session and period (from the last event heard or caught up to, so it finds that
    /// one alone unless an event went unheard), one session at a time, none after the store
    /// turns out unavailable until the next period; nothing for a session the bus keeps busy.
    pub fn recheck_quiet_feeds(self: &Arc<Self>, every: Duration) {
        let hub = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let Some(hub) = hub.upgrade() else { return };
                hub.recheck().await;
            }
        });
    }

    async fn recheck(&self) {
        let quiet: Vec<(SessionId, u64)> = {
            let mut feeds = self.feeds.lock().unwrap_or_else(|p| p.into_inner());
            feeds
                .iter_mut()
                .filter_map(|(sid, local)| {
                    let heard = std::mem::replace(&mut local.heard, false);
                    let behind = std::mem::replace(&mut local.behind, false);
                    if heard {
                        // Busy: a stream behind reads its gap when the next message comes.
                        return None;
                    }
                    if behind {
                        local.feed.send(FeedItem::Resync);
                        return None;
                    }
                    Some((sid.clone(), local.seen))
                })
                .collect()
        };
        for (sid, seen) in quiet {
            // From the last event known, which a log always holds (it keeps at least its last
            // event): none means the log is gone, its deletion notice lost or its keys
            // expired, and the streams' catch-up ends them.
            let read = self.log.read(&sid, seen.saturating_sub(1), RECHECK_READ);
            let last = match read.await {
                Ok(events) => events.last().map(Recorded::seq),
                // The rest waits for the next period (a bus that reconnects resyncs every
                // feed anyway): an outage is not met with a read per feed.
                Err(StoreError::Unavailable(e)) => {
                    tracing::debug!(session = %sid, error = %e, "a quiet feed's log could not be read; rechecks resume next period");
                    return;
                }
                // This session's log (e.g. an entry this build cannot decode); the others'
                // rechecks go on.
                Err(e) => {
                    tracing::debug!(session = %sid, error = %e, "a quiet feed's log could not be read");
                    continue;
                }
            };
            if last.is_some_and(|last| last <= seen) {
                continue;
            }
            // Nothing from there on: gone, or shorter than what was heard (Redis lost entries;
            // the streams' catch-up would find nothing either, every period).
            if last.is_none() && has_log(&*self.log, &sid).await {
                continue;
            }
            let mut feeds = self.feeds.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(local) = feeds.get_mut(&sid) {
                local.seen = local.seen.max(last.unwrap_or(0));
                local.feed.send(FeedItem::Resync);
            }
        }
    }

    pub fn subscribe(self: &Arc<Self>, sid: &SessionId) -> Subscription {
        let mut feeds = self.feeds.lock().unwrap_or_else(|p| p.into_inner());
        let rx = match feeds.get(sid) {
            Some(local) => local.feed.subscribe(),
            None => {
                let feed = Feed::new(self.capacity);
                let rx = feed.subscribe();
                feeds.insert(sid.clone(), Local::new(feed));
                // Under the lock, so a watch and the unwatch of a feed that just emptied
                // reach the bus in the order the feeds changed.
                self.watcher.watch(sid);
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
        feeds.values().map(|f| f.feed.receivers()).sum()
    }

    /// Session messages the bus delivered to this replica, and how many of them were for a
    /// session without local subscribers (a bus that delivers every session, like the
    /// in-memory one, makes those; the Redis bus should not).
    pub fn received(&self) -> (u64, u64) {
        (
            self.received.load(Ordering::Relaxed),
            self.unwatched.load(Ordering::Relaxed),
        )
    }

    /// Sessions with local subscribers (for metrics and tests).
    pub fn active_feeds(&self) -> usize {
        self.feeds.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}
