//! A session feed: a broadcast queue whose memory grows with what it holds.
//!
//! `tokio::sync::broadcast` allocates all of its slots when created, so an idle subscriber
//! alone on its session (the usual case: one browser per session) cost its whole buffer. A
//! feed holds only items some subscriber has not read yet: each item counts its unread
//! subscribers and leaves the queue once the last one read (or skipped) it, and the queue's
//! allocation shrinks back when it drains. `capacity` still bounds it: a subscriber that falls
//! further behind finds the oldest items gone and hears [`RecvError::Lagged`].
//!
//! Receiving is cancel-safe: a receiver's position moves only under the lock, never across an
//! await.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

pub use tokio::sync::broadcast::error::RecvError;

/// Below this many slots a drained queue keeps its allocation.
const KEEP_SLOTS: usize = 16;

pub struct Feed<T> {
    state: Mutex<State<T>>,
    /// Woken on every send and on close.
    ready: Notify,
}

struct State<T> {
    slots: VecDeque<Slot<T>>,
    /// The position of `slots[0]`; positions count every item ever sent.
    first: u64,
    receivers: usize,
    capacity: usize,
    closed: bool,
}

struct Slot<T> {
    item: T,
    /// Receivers that have not read or skipped it yet.
    unread: usize,
}

impl<T> State<T> {
    /// The position the next item sent takes.
    fn end(&self) -> u64 {
        self.first + self.slots.len() as u64
    }

    /// Marks the items at `from..` as read by one receiver that leaves or skips them.
    fn release_from(&mut self, from: u64) {
        let start = from.saturating_sub(self.first) as usize;
        for slot in self.slots.iter_mut().skip(start) {
            slot.unread = slot.unread.saturating_sub(1);
        }
        self.pop_read();
    }

    /// Drops the items every receiver is done with, and gives memory back once mostly empty.
    fn pop_read(&mut self) {
        while self.slots.front().is_some_and(|s| s.unread == 0) {
            self.slots.pop_front();
            self.first += 1;
        }
        let held = self.slots.capacity();
        if held > KEEP_SLOTS && self.slots.len() < held / 4 {
            self.slots.shrink_to((self.slots.len() * 2).max(KEEP_SLOTS));
        }
    }
}

impl<T: Clone> Feed<T> {
    /// A feed holding at most `capacity` unread items; nothing is allocated until one is sent.
    pub fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                slots: VecDeque::new(),
                first: 0,
                receivers: 0,
                capacity: capacity.max(1),
                closed: false,
            }),
            ready: Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A receiver that gets every item sent from now on.
    pub fn subscribe(self: &Arc<Self>) -> Receiver<T> {
        let mut state = self.lock();
        state.receivers += 1;
        Receiver {
            feed: self.clone(),
            next: state.end(),
        }
    }

    /// Queues `item` for every current receiver (dropped when there is none); the oldest item
    /// gives way when the feed is full.
    pub fn send(&self, item: T) {
        {
            let mut state = self.lock();
            if state.receivers == 0 || state.closed {
                return;
            }
            if state.slots.len() >= state.capacity {
                state.slots.pop_front();
                state.first += 1;
            }
            let unread = state.receivers;
            state.slots.push_back(Slot { item, unread });
        }
        self.ready.notify_waiters();
    }

    pub fn receivers(&self) -> usize {
        self.lock().receivers
    }

    /// Items held (for tests and metrics).
    pub fn held(&self) -> usize {
        self.lock().slots.len()
    }

    /// Ends the feed: receivers read what is queued, then [`RecvError::Closed`].
    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_waiters();
    }
}

/// One subscriber's position on a [`Feed`].
pub struct Receiver<T: Clone> {
    feed: Arc<Feed<T>>,
    next: u64,
}

impl<T: Clone> Receiver<T> {
    /// The next item, [`RecvError::Lagged`] once when items this receiver had not read were
    /// dropped (it goes on from the oldest item held), or [`RecvError::Closed`].
    pub async fn recv(&mut self) -> Result<T, RecvError> {
        let feed = self.feed.clone();
        loop {
            let ready = feed.ready.notified();
            tokio::pin!(ready);
            // Registered before looking, so a send between the look and the wait wakes it.
            ready.as_mut().enable();
            if let Some(result) = self.try_recv() {
                return result;
            }
            ready.await;
        }
    }

    fn try_recv(&mut self) -> Option<Result<T, RecvError>> {
        let mut state = self.feed.lock();
        if self.next < state.first {
            let missed = state.first - self.next;
            self.next = state.first;
            return Some(Err(RecvError::Lagged(missed)));
        }
        let index = (self.next - state.first) as usize;
        if let Some(slot) = state.slots.get_mut(index) {
            let item = slot.item.clone();
            slot.unread = slot.unread.saturating_sub(1);
            self.next += 1;
            if index == 0 {
                state.pop_read();
            }
            return Some(Ok(item));
        }
        state.closed.then_some(Err(RecvError::Closed))
    }

    /// Skips everything queued: the next item is the next one sent.
    pub fn skip_to_end(&mut self) {
        let mut state = self.feed.lock();
        let from = self.next;
        state.release_from(from);
        self.next = state.end();
    }

    pub fn feed(&self) -> &Arc<Feed<T>> {
        &self.feed
    }
}

impl<T: Clone> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut state = self.feed.lock();
        state.receivers = state.receivers.saturating_sub(1);
        let from = self.next;
        state.release_from(from);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_receiver_gets_every_item_in_order_and_read_items_leave_the_feed() {
        let feed = Feed::new(8);
        let mut a = feed.subscribe();
        let mut b = feed.subscribe();
        for i in 0..3 {
            feed.send(i);
        }
        assert_eq!(feed.held(), 3);
        for i in 0..3 {
            assert_eq!(a.recv().await, Ok(i));
        }
        assert_eq!(feed.held(), 3, "b has not read them yet");
        for i in 0..3 {
            assert_eq!(b.recv().await, Ok(i));
        }
        assert_eq!(feed.held(), 0);
    }

    #[tokio::test]
    async fn a_feed_without_receivers_holds_nothing() {
        let feed = Feed::new(8);
        feed.send(1);
        assert_eq!(feed.held(), 0);
        let mut a = feed.subscribe();
        feed.send(2);
        assert_eq!(
            a.recv().await,
            Ok(2),
            "a receiver starts at what is sent after it"
        );
    }

    #[tokio::test]
    async fn a_receiver_further_behind_than_the_capacity_hears_it_lagged_then_goes_on() {
        let feed = Feed::new(2);
        let mut slow = feed.subscribe();
        for i in 0..5 {
            feed.send(i);
        }
        assert_eq!(slow.recv().await, Err(RecvError::Lagged(3)));
        assert_eq!(slow.recv().await, Ok(3));
        assert_eq!(slow.recv().await, Ok(4));
        assert_eq!(feed.held(), 0);
    }

    #[tokio::test]
    async fn leaving_or_skipping_releases_what_the_receiver_had_not_read() {
        let feed = Feed::new(8);
        let mut a = feed.subscribe();
        let b = feed.subscribe();
        feed.send(1);
        feed.send(2);
        drop(b);
        assert_eq!(feed.receivers(), 1);
        a.skip_to_end();
        assert_eq!(feed.held(), 0);
        feed.send(3);
        assert_eq!(a.recv().await, Ok(3));
    }

    #[tokio::test]
    async fn a_waiting_receiver_wakes_on_send_and_on_close() {
        let feed = Feed::new(4);
        let mut a = feed.subscribe();
        let waiter = tokio::spawn(async move {
            let first = a.recv().await;
            let second = a.recv().await;
            (first, second)
        });
        tokio::task::yield_now().await;
        feed.send(7);
        feed.close();
        assert_eq!(waiter.await.unwrap(), (Ok(7), Err(RecvError::Closed)));
    }

    #[test]
    fn a_drained_feed_gives_its_memory_back() {
        let feed = Feed::new(4096);
        let mut a = feed.subscribe();
        for i in 0..1000 {
            feed.send(i);
        }
        a.skip_to_end();
        let state = feed.lock();
        assert!(
            state.slots.capacity() <= KEEP_SLOTS,
            "{}",
            state.slots.capacity()
        );
    }
}
