//! Cursor rules, the same on the event streams and the REST log: ids order by their number, a
//! cursor past the log's end is refused, and a page that starts where a compaction trimmed the
//! log says so.

use serde_json::json;

use crate::helpers::TestApp;
use crate::on_both_stores;

async fn flips(app: &TestApp, sid: &str, n: usize) {
    for i in 0..n {
        app.set_plan(sid, "main", i % 2 == 0).await.ok();
    }
}

on_both_stores! {
    async fn a_cursor_past_the_log_end_is_refused_on_every_route_that_takes_one(app: TestApp) {
        let sid = app.create_session().await;
        flips(&app, &sid, 9).await; // ids 1-0 … 10-0
        let stream = |query: &str| format!("/v1/sessions/{sid}/events{query}");
        for path in [
            stream("?after=11-0"),
            format!("/v1/sessions/{sid}/log?after=11-0"),
            format!("/v1/events?sessions={sid}&after={sid}:11"),
        ] {
            let detail = app.get(&path).await.assert_problem(400, "cursor-out-of-range");
            assert!(detail.contains("`10-0`") && detail.contains("numerically"), "{path}: {detail}");
        }
        let header = app
            .send(app.client.get(app.url(&stream(""))).header("last-event-id", "11-0"))
            .await;
        header.assert_problem(400, "cursor-out-of-range");
        // Malformed is another problem.
        app.get(&stream("?after=eleven")).await.assert_problem(400, "invalid-query");
        // At the head is fine: nothing yet.
        let page = app.get(&format!("/v1/sessions/{sid}/log?after=10-0")).await.ok();
        assert_eq!(page["events"], json!([]));
        assert!(page.get("trimmed_before").is_none());
    }

    async fn ids_order_by_their_number_not_as_strings(app: TestApp) {
        let sid = app.create_session().await;
        flips(&app, &sid, 10).await; // ids 1-0 … 11-0
        // "9-0" < "10-0" < "11-0" as numbers, not as strings.
        let page = app.get(&format!("/v1/sessions/{sid}/log?after=9-0")).await.ok();
        let ids: Vec<&str> = page["events"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["10-0", "11-0"]);
    }

    async fn a_log_page_that_starts_in_a_trimmed_range_names_the_first_id_still_there(app: TestApp) {
        let sid = app.create_session().await;
        flips(&app, &sid, 4).await; // ids 1-0 … 5-0
        app.post_json(&format!("/v1/sessions/{sid}/compact"), json!({})).await.ok();
        let log = app.events(&sid).await;
        assert_eq!(log.len(), 1, "the compaction trimmed what it replaced: {log:#?}");
        let first = log[0]["id"].as_str().unwrap().to_owned();
        assert_eq!(first, "6-0");
        for after in ["0-0", "1-0", "4-0"] {
            let page = app.get(&format!("/v1/sessions/{sid}/log?after={after}")).await.ok();
            assert_eq!(page["trimmed_before"], first.as_str(), "after {after}");
            assert_eq!(page["events"][0]["id"], first.as_str(), "the page starts at the first id still there");
        }
        let from_the_start = app.get(&format!("/v1/sessions/{sid}/log")).await.ok();
        assert_eq!(from_the_start["trimmed_before"], first.as_str());
        // Right before the snapshot nothing was skipped.
        let page = app.get(&format!("/v1/sessions/{sid}/log?after=5-0")).await.ok();
        assert!(page.get("trimmed_before").is_none(), "{page}");
        assert_eq!(page["events"][0]["id"], first.as_str());
    }
}
