//! HEAD wherever GET is: the GET route's status and headers without a body, an event stream
//! included (answered at once, not held open), and `Allow` naming HEAD beside every GET.

use std::time::Duration;

use crate::helpers::TestApp;
use crate::on_both_stores;

/// Sends HEAD to `path`: status, headers, and the body bytes (there must be none).
async fn head(app: &TestApp, path: &str) -> (u16, reqwest::header::HeaderMap, usize) {
    let res = tokio::time::timeout(
        Duration::from_secs(5),
        app.client.head(app.url(path)).send(),
    )
    .await
    .unwrap_or_else(|_| panic!("HEAD {path} answered within 5 s"))
    .expect("the server answers");
    let (status, headers) = (res.status().as_u16(), res.headers().clone());
    let body = tokio::time::timeout(Duration::from_secs(5), res.bytes())
        .await
        .unwrap_or_else(|_| panic!("HEAD {path} ended within 5 s"))
        .unwrap_or_default();
    (status, headers, body.len())
}

on_both_stores! {
    async fn head_answers_every_get_route_with_its_headers_and_no_body(app: TestApp) {
        let sid = app.create_session().await;
        let path = format!("/v1/sessions/{sid}");
        let got = app.client.get(app.url(&path)).send().await.unwrap();
        let (get_type, get_length) = (
            got.headers()["content-type"].clone(),
            got.headers()["content-length"].clone(),
        );
        let (status, headers, body) = head(&app, &path).await;
        assert_eq!(status, 200);
        assert_eq!(body, 0, "HEAD has no body");
        assert_eq!(headers["content-type"], get_type);
        assert_eq!(headers["content-length"], get_length, "the length GET would send");
        assert!(headers.contains_key("x-request-id"));

        // Event streams answer their headers and end, rather than holding a stream open.
        for stream in [format!("{path}/events"), format!("/v1/events?sessions={sid}")] {
            let (status, headers, body) = head(&app, &stream).await;
            assert_eq!(status, 200, "{stream}");
            assert_eq!(headers["content-type"], "text/event-stream", "{stream}");
            assert_eq!(body, 0, "{stream}");
        }

        // Lists, pages and the spec too; a missing session is the GET's 404.
        for page in ["/v1/sessions", "/healthz", "/openapi.json", "/"] {
            assert_eq!(head(&app, page).await.0, 200, "{page}");
        }
        let (status, _, body) = head(&app, "/v1/sessions/nosuchsession").await;
        assert_eq!((status, body), (404, 0));
    }

    async fn a_write_method_on_a_get_route_lists_get_and_head_in_allow(app: TestApp) {
        let sid = app.create_session().await;
        let path = format!("/v1/sessions/{sid}/agents/main");
        let res = app
            .client
            .post(app.url(&path))
            .header("content-type", "application/json")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 405);
        assert_eq!(res.headers()["allow"], "GET, HEAD");
    }
}
