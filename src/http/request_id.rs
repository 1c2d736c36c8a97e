//! One id per request, `X-Request-Id`, so a client's report, the problem it got and the log
//! lines about it can be matched up.
//!
//! A step of the outer middleware layer ([`track`], inside only the draining replica's
//! `Connection: close`; see [`super::layers`]) takes a client's id when it is a plain token
//! (`[A-Za-z0-9._:-]{1,128}`, e.g. a proxy's or a trace id) and draws a UUID v7 otherwise, so a
//! header can never smuggle anything into a log line. The id goes back on every response —
//! problems, unknown routes, static files and event streams included —, into the `instance` of
//! every problem document (`urn:dsh-plan:request:<id>`), and into a tracing span around the
//! request, so the access line and every error logged while handling it carry it.
//!
//! Handlers and error rendering read it through [`current`] (a task-local scoped to the
//! request), so no signature changes to carry it.

use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use tracing::Instrument;

pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Longest client-sent id kept.
const MAX_LEN: usize = 128;

tokio::task_local! {
    static CURRENT: String;
}

/// The id of the request being handled on this task, if any.
pub fn current() -> Option<String> {
    CURRENT.try_with(Clone::clone).ok()
}

/// The problem `instance` naming the request being handled, if any.
pub fn instance() -> Option<String> {
    current().map(|id| format!("urn:dsh-plan:request:{id}"))
}

/// Whether a client-sent id is kept as it is.
pub fn acceptable(id: &str) -> bool {
    (1..=MAX_LEN).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// The client's id when acceptable, else a fresh UUID v7 (time-ordered to the millisecond).
fn choose(sent: Option<&HeaderValue>) -> String {
    sent.and_then(|v| v.to_str().ok())
        .filter(|v| acceptable(v))
        .map(str::to_owned)
        .unwrap_or_else(fresh_id)
}

/// A fresh UUID v7. Its random bits come from a per-thread generator seeded once from the OS:
/// a request id must be unique, not secret, and `Uuid::now_v7` made one `getrandom` system
/// call per request.
fn fresh_id() -> String {
    use std::cell::Cell;
    thread_local! {
        static STATE: Cell<u64> = Cell::new(seed());
    }
    let (a, b) = STATE.with(|s| (splitmix(s), splitmix(s)));
    let mut random = [0u8; 10];
    random[..8].copy_from_slice(&a.to_le_bytes());
    random[8..].copy_from_slice(&b.to_le_bytes()[..2]);
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    uuid::Builder::from_unix_timestamp_millis(ms, &random)
        .into_uuid()
        .to_string()
}

/// A generator's seed: OS randomness, or (without it) the time and the thread.
fn seed() -> u64 {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_ok() {
        return u64::from_le_bytes(bytes);
    }
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new()
        .hash_one((std::thread::current().id(), std::time::SystemTime::now()))
}

/// SplitMix64: the next value of the generator in `state`.
fn splitmix(state: &std::cell::Cell<u64>) -> u64 {
    let x = state.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
    state.set(x);
    let z = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Gives the request its id, runs it inside a span carrying the id, logs one access line, and
/// sets `X-Request-Id` on the response. (An error an inner middleware returns instead of a
/// response is rendered later, by the server, outside the request's scope: it gets the header
/// but no `instance`, so this crate's middleware answer refusals as responses.)
pub async fn track<B>(
    req: ServiceRequest,
    next: impl super::layers::Rest<B>,
) -> Result<ServiceResponse<B>, actix_web::Error> {
    let id = choose(req.headers().get(&X_REQUEST_ID));
    // The path only: the query may carry an `access_token`.
    let span = tracing::info_span!("request", id = %id, method = %req.method(), path = %req.path());
    let started = std::time::Instant::now();
    let value = HeaderValue::from_str(&id).unwrap_or_else(|_| HeaderValue::from_static("-"));
    let result = CURRENT
        .scope(id, next.call(req))
        .instrument(span.clone())
        .await;
    let status = match &result {
        Ok(res) => res.status(),
        Err(err) => err.as_response_error().status_code(),
    };
    span.in_scope(|| {
        tracing::info!(
            target: "access",
            status = status.as_u16(),
            ms = started.elapsed().as_secs_f64() * 1000.0,
            "served"
        )
    });
    match result {
        Ok(mut res) => {
            res.headers_mut().insert(X_REQUEST_ID, value);
            Ok(res)
        }
        Err(mut err) => {
            err.add_response_mapper(move |mut res| {
                res.headers_mut().insert(X_REQUEST_ID, value.clone());
                res
            });
            Err(err)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_tokens_up_to_128_characters_are_kept() {
        for ok in [
            "a",
            "req-1",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "trace.id_7:span",
            &"x".repeat(128),
        ] {
            assert!(acceptable(ok), "{ok}");
            assert_eq!(choose(Some(&HeaderValue::from_str(ok).unwrap())), ok);
        }
    }

    #[test]
    fn anything_else_is_replaced_by_a_uuid_v7() {
        for bad in ["", "a b", "a/b", "ä", "x\"y", "{}", &"x".repeat(129)] {
            assert!(!acceptable(bad), "{bad:?}");
        }
        let drawn = choose(Some(&HeaderValue::from_static("not ok")));
        let uuid = uuid::Uuid::parse_str(&drawn).expect("a uuid");
        assert_eq!(uuid.get_version_num(), 7);
        assert_ne!(choose(None), choose(None));
    }

    #[test]
    fn drawn_ids_are_distinct_across_threads_and_carry_the_current_time() {
        let before = std::time::SystemTime::now();
        let drawn: Vec<String> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..4)
                .map(|_| scope.spawn(|| (0..5_000).map(|_| fresh_id()).collect::<Vec<_>>()))
                .collect();
            threads
                .into_iter()
                .flat_map(|t| t.join().unwrap())
                .collect()
        });
        let distinct: std::collections::HashSet<_> = drawn.iter().collect();
        assert_eq!(distinct.len(), drawn.len());
        let after = std::time::SystemTime::now();
        for id in &drawn {
            let uuid = uuid::Uuid::parse_str(id).unwrap();
            assert_eq!(uuid.get_version_num(), 7);
            let (secs, nanos) = uuid.get_timestamp().unwrap().to_unix();
            let at = std::time::UNIX_EPOCH + std::time::Duration::new(secs, nanos);
            let floor = before - std::time::Duration::from_millis(1);
            assert!(floor <= at && at <= after, "{id}");
        }
    }

    /// Log output captured in memory.
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[actix_web::test]
    async fn the_access_line_and_an_error_logged_while_handling_carry_the_id() {
        use crate::http::{ApiError, Code, Problem};
        use actix_web::{middleware::from_fn, test, web, App, HttpResponse};
        let logs = Captured::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let boom = || async {
            Err::<HttpResponse, _>(ApiError::opaque(Code::Internal, "broke", "the cause"))
        };
        let app = test::init_service(
            App::new()
                .wrap(from_fn(crate::http::layers::edge))
                .route("/boom", web::get().to(boom)),
        )
        .await;
        let req = test::TestRequest::get()
            .uri("/boom?access_token=secret")
            .insert_header(("x-request-id", "log-me-1"))
            .to_request();
        let res = test::call_service(&app, req).await;
        assert_eq!(res.headers().get("x-request-id").unwrap(), "log-me-1");
        let problem: Problem = test::read_body_json(res).await;
        assert_eq!(
            problem.instance.as_deref(),
            Some("urn:dsh-plan:request:log-me-1")
        );
        let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
        let line = |what: &str| {
            text.lines()
                .find(|l| l.contains(what))
                .unwrap_or_else(|| panic!("no `{what}` line in:\n{text}"))
                .to_owned()
        };
        assert!(line("request failed").contains("id=log-me-1"), "{text}");
        let access = line("served");
        assert!(
            access.contains("id=log-me-1") && access.contains("status=500"),
            "{text}"
        );
        assert!(
            !text.contains("secret"),
            "the query is never logged: {text}"
        );
    }

    #[tokio::test]
    async fn the_current_id_is_known_inside_the_scope_only() {
        assert_eq!(current(), None);
        let inside = CURRENT.scope("r-1".into(), async { instance() }).await;
        assert_eq!(inside.as_deref(), Some("urn:dsh-plan:request:r-1"));
    }
}
