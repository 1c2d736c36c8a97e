//! HTTPS with `DSH_TLS_CERT` / `DSH_TLS_KEY`: a client that trusts the certificate reads the
//! API and its event streams, HTTP/2 multiplexes the streams over one connection, and bad
//! certificate files stop the start with a message that names them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use dsh_plan::config::Settings;
use dsh_plan::startup::Application;
use futures_util::StreamExt;

use crate::helpers::{serve, TestApp};

/// A self-signed certificate for `localhost` and its key, as PEM files.
struct Certs {
    dir: PathBuf,
    cert: String,
    key: String,
    pem: String,
}

impl Certs {
    fn new() -> Self {
        let signed = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let dir = std::env::temp_dir().join(format!("dsh-tls-{}", uuid::Uuid::now_v7().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        let pem = signed.cert.pem();
        std::fs::write(&cert, &pem).unwrap();
        std::fs::write(&key, signed.signing_key.serialize_pem()).unwrap();
        Self {
            cert: cert.to_string_lossy().into_owned(),
            key: key.to_string_lossy().into_owned(),
            dir,
            pem,
        }
    }

    fn settings(&self) -> Settings {
        let mut s = Settings::local(None);
        s.tls_cert = Some(self.cert.clone());
        s.tls_key = Some(self.key.clone());
        s.workers = Some(1);
        s
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An HTTPS replica and a client that trusts only its certificate, reaching it as `localhost`.
async fn https(certs: &Certs) -> (TestApp, reqwest::Client, u16) {
    let mut app = serve(Application::build(certs.settings()).await.unwrap());
    let port: u16 = app.address.rsplit(':').next().unwrap().parse().unwrap();
    let client = reqwest::Client::builder()
        .no_proxy()
        .tls_certs_only([reqwest::Certificate::from_pem(certs.pem.as_bytes()).unwrap()])
        .resolve("localhost", SocketAddr::from(([127, 0, 0, 1], port)))
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    app.address = format!("https://localhost:{port}");
    app.client = client.clone();
    (app, client, port)
}

/// Opens an event stream and returns the response once its first frames arrived.
async fn open_stream(client: &reqwest::Client, url: &str) -> (reqwest::Version, String) {
    let res = client.get(url).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let version = res.version();
    let mut body = res.bytes_stream();
    let mut text = String::new();
    while !text.contains("event: session/created") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), body.next())
            .await
            .expect("frames arrive")
            .expect("the stream is open")
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    // Keep the stream open while the caller opens the next one.
    tokio::spawn(async move { while body.next().await.is_some() {} });
    (version, text)
}

/// Established TCP connections whose local port is `port` (the server's ends).
fn connections_to(port: u16) -> usize {
    let mut n = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        n += text
            .lines()
            .skip(1)
            .filter(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let local_port = fields[1].rsplit(':').next().unwrap();
                u16::from_str_radix(local_port, 16) == Ok(port) && fields[3] == "01"
            })
            .count();
    }
    n
}

#[tokio::test]
async fn over_https_a_client_that_trusts_the_certificate_reads_the_api_and_event_streams() {
    let certs = Certs::new();
    let (app, client, _) = https(&certs).await;
    let status = app.get("/v1/status").await.ok();
    assert_eq!(status["service"], "dsh-plan");
    let sid = app.create_session().await;
    for _ in 0..2 {
        let (_, text) = open_stream(&client, &app.url(&format!("/v1/sessions/{sid}/events"))).await;
        assert!(text.starts_with("retry: 2000"), "{text}");
    }
    // A client that does not trust the certificate is refused.
    let untrusting = reqwest::Client::builder().no_proxy().build().unwrap();
    assert!(untrusting.get(app.url("/v1/status")).send().await.is_err());
}

#[tokio::test]
async fn over_https_two_event_streams_share_one_http2_connection() {
    let certs = Certs::new();
    let (app, client, port) = https(&certs).await;
    let (s1, s2) = (app.create_session().await, app.create_session().await);
    let (v1, _) = open_stream(&client, &app.url(&format!("/v1/sessions/{s1}/events"))).await;
    let (v2, _) = open_stream(&client, &app.url(&format!("/v1/events?sessions={s2}"))).await;
    assert_eq!(
        (v1, v2),
        (reqwest::Version::HTTP_2, reqwest::Version::HTTP_2)
    );
    assert_eq!(
        connections_to(port),
        1,
        "both streams and every request share one connection"
    );
}

/// Why the start with `settings` failed.
async fn start_error(settings: Settings) -> String {
    match Application::build(settings).await {
        Ok(_) => panic!("the start succeeded"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn bad_certificate_files_stop_the_start_with_a_message_naming_them() {
    let certs = Certs::new();
    let mut missing = certs.settings();
    missing.tls_cert = Some("/nonexistent/cert.pem".into());
    let e = start_error(missing).await;
    assert!(
        e.contains("DSH_TLS_CERT `/nonexistent/cert.pem` cannot be read"),
        "{e}"
    );
    let mut half = certs.settings();
    half.tls_key = None;
    let e = start_error(half).await;
    assert!(
        e.contains("DSH_TLS_CERT and DSH_TLS_KEY go together"),
        "{e}"
    );
    let mut swapped = certs.settings();
    swapped.tls_key = Some(certs.cert.clone());
    let e = start_error(swapped).await;
    assert!(e.contains("DSH_TLS_KEY") && !e.contains("BEGIN"), "{e}");
}
