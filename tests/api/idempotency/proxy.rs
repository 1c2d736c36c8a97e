//! A TCP proxy in front of Redis that stalls on cue: once a request carrying a chosen byte
//! string passes (e.g. the append of a `plan/mode` event), Redis still receives and runs
//! everything, but no answer reaches the replica until the test resumes it — a Redis that
//! committed the write and answered too late, as in a stall.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct StallProxy {
    pub url: String,
    /// The bytes whose passing stalls the answers (none: never).
    trigger: Arc<Mutex<Option<Vec<u8>>>>,
    /// True while answers are held.
    held: watch::Sender<bool>,
}

impl StallProxy {
    pub async fn start(redis_url: &str) -> Self {
        let upstream = redis_url
            .trim_start_matches("redis://")
            .rsplit('@')
            .next()
            .unwrap()
            .to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("redis://{}", listener.local_addr().unwrap());
        let trigger: Arc<Mutex<Option<Vec<u8>>>> = Arc::default();
        let (held, _) = watch::channel(false);
        let (t, h) = (trigger.clone(), held.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                tokio::spawn(pipe(client, server, t.clone(), h.clone()));
            }
        });
        Self { url, trigger, held }
    }

    /// Stalls the answers once a request containing `bytes` has gone to Redis.
    pub fn stall_after(&self, bytes: &str) {
        *self.trigger.lock().unwrap() = Some(bytes.as_bytes().to_vec());
    }

    /// Whether the stall began.
    pub fn stalled(&self) -> bool {
        *self.held.borrow()
    }

    /// Lets the held answers (and everything after) through.
    pub fn resume(&self) {
        *self.trigger.lock().unwrap() = None;
        self.held.send_replace(false);
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

async fn pipe(
    client: TcpStream,
    server: TcpStream,
    trigger: Arc<Mutex<Option<Vec<u8>>>>,
    held: watch::Sender<bool>,
) {
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    let mut gate = held.subscribe();
    let requests = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match client_rx.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let hit = {
                let mut armed = trigger.lock().unwrap();
                let hit = armed.as_deref().is_some_and(|t| contains(&buf[..n], t));
                if hit {
                    *armed = None; // once
                }
                hit
            };
            // Held before the request goes out, so its answer cannot slip through.
            if hit {
                held.send_replace(true);
            }
            if server_tx.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    let answers = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match server_rx.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if gate.wait_for(|held| !*held).await.is_err() {
                return;
            }
            if client_tx.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    tokio::join!(requests, answers);
}
