//! A small SSE client for tests: reads a real `text/event-stream` over HTTP and hands parsed
//! frames to the test as they arrive.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;
use tokio::sync::mpsc;

#[derive(Clone, Debug)]
pub struct Frame {
    pub id: Option<String>,
    pub event: String,
    pub data: Value,
}

pub struct SseClient {
    rx: mpsc::UnboundedReceiver<Frame>,
    /// True once the server ended the stream.
    pub ended: tokio::sync::watch::Receiver<bool>,
    pub last_id: Option<String>,
    /// Every frame handed to the test so far.
    seen: Vec<Frame>,
    /// The last `retry:` the server sent (ms), 0 before any.
    retry: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl SseClient {
    /// Connects to `url`, optionally resuming with `Last-Event-ID`.
    pub async fn connect(url: &str, last_event_id: Option<&str>) -> Self {
        Self::connect_as(url, last_event_id, None).await
    }

    /// [`Self::connect`] presenting `bearer` (an API key or a token) in `Authorization`.
    pub async fn connect_as(url: &str, last_event_id: Option<&str>, bearer: Option<&str>) -> Self {
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let mut req = client.get(url).header("accept", "text/event-stream");
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id);
        }
        if let Some(credential) = bearer {
            req = req.bearer_auth(credential);
        }
        let res = req.send().await.expect("the SSE endpoint answers");
        assert_eq!(res.status(), 200, "{url}");
        assert_eq!(res.headers()["content-type"], "text/event-stream");
        assert_eq!(res.headers()["cache-control"], "no-cache");
        assert_eq!(res.headers()["x-accel-buffering"], "no");
        assert!(
            res.headers().get("content-encoding").is_none(),
            "no compression on the stream"
        );
        let (tx, rx) = mpsc::unbounded_channel();
        let (ended_tx, ended) = tokio::sync::watch::channel(false);
        let retry = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let retry_seen = retry.clone();
        tokio::spawn(async move {
            let mut body = res.bytes_stream();
            let mut buf = String::new();
            while let Some(Ok(chunk)) = body.next().await {
                buf.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(end) = buf.find("\n\n") {
                    let raw: String = buf.drain(..end + 2).collect();
                    let hint = raw.lines().find_map(|l| l.strip_prefix("retry: "));
                    if let Some(ms) = hint.and_then(|v| v.trim().parse().ok()) {
                        retry_seen.store(ms, std::sync::atomic::Ordering::SeqCst);
                    }
                    if let Some(frame) = parse(&raw) {
                        if tx.send(frame).is_err() {
                            return;
                        }
                    }
                }
            }
            let _ = ended_tx.send(true);
        });
        Self {
            rx,
            ended,
            last_id: last_event_id.map(str::to_owned),
            seen: Vec::new(),
            retry,
        }
    }

    /// The last `retry:` hint the server sent, in ms (0 before any).
    pub fn retry_ms(&self) -> u64 {
        self.retry.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The next frame, or `None` when the stream ended or nothing came within `wait`.
    pub async fn next(&mut self, wait: Duration) -> Option<Frame> {
        let frame = tokio::time::timeout(wait, self.rx.recv())
            .await
            .ok()
            .flatten()?;
        if let Some(id) = &frame.id {
            self.last_id = Some(id.clone());
        }
        self.seen.push(frame.clone());
        Some(frame)
    }

    /// Every frame the test has read from this stream, in order.
    pub fn seen(&self) -> &[Frame] {
        &self.seen
    }

    /// Frames until one matches `pred` (inclusive); panics after 10 s.
    pub async fn until(&mut self, what: &str, pred: impl Fn(&Frame) -> bool) -> Vec<Frame> {
        let mut seen = Vec::new();
        loop {
            let frame = self
                .next(Duration::from_secs(10))
                .await
                .unwrap_or_else(|| panic!("no {what} in {seen:#?}"));
            let done = pred(&frame);
            seen.push(frame);
            if done {
                return seen;
            }
        }
    }

    /// Frames until each of `keys` has had a frame matching `pred(frame, key)`, in whatever
    /// order they come (a stream that merges sessions orders them as they are committed, not
    /// as listed); panics after 10 s without one.
    pub async fn until_each(
        &mut self,
        what: &str,
        keys: &[&str],
        pred: impl Fn(&Frame, &str) -> bool,
    ) -> Vec<Frame> {
        let mut waiting: Vec<&str> = keys.to_vec();
        let mut seen = Vec::new();
        while !waiting.is_empty() {
            let frame = self
                .next(Duration::from_secs(10))
                .await
                .unwrap_or_else(|| panic!("no {what} for {waiting:?} in {seen:#?}"));
            waiting.retain(|key| !pred(&frame, key));
            seen.push(frame);
        }
        seen
    }

    /// Every frame until the server ends the stream.
    pub async fn drain(&mut self) -> Vec<Frame> {
        let mut out = Vec::new();
        while let Some(f) = self.next(Duration::from_secs(10)).await {
            out.push(f);
        }
        out
    }
}

fn parse(raw: &str) -> Option<Frame> {
    let (mut id, mut event, mut data) = (None, None, String::new());
    for line in raw.lines() {
        if let Some(v) = line.strip_prefix("id: ") {
            id = Some(v.to_owned());
        } else if let Some(v) = line.strip_prefix("event: ") {
            event = Some(v.to_owned());
        } else if let Some(v) = line.strip_prefix("data: ") {
            data.push_str(v);
        }
    }
    Some(Frame {
        id,
        event: event?,
        data: serde_json::from_str(&data).unwrap_or(Value::Null),
    })
}

/// The ids of the committed-event frames (not derived views or deltas).
pub fn raw_ids(frames: &[Frame]) -> Vec<u64> {
    frames
        .iter()
        .filter(|f| f.event != "plan/view" && f.event != "reset" && f.id.is_some())
        .map(|f| {
            f.id.as_deref()
                .unwrap()
                .trim_end_matches("-0")
                .parse()
                .unwrap()
        })
        .collect()
}
