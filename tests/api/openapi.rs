/// The committed spec is what third parties generate clients from: it must match the code.
#[test]
fn the_committed_openapi_spec_matches_the_code() {
    let generated = dsh_plan::http::openapi_json();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/openapi.json");
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == generated,
        "openapi/openapi.json is out of date; regenerate it with:\n\n    cargo run -q -- openapi > openapi/openapi.json\n"
    );
}

#[tokio::test]
async fn the_served_spec_documents_every_route_with_problem_responses() {
    let app = crate::helpers::spawn_replica(None, "a").await;
    let spec = app.get("/openapi.json").await.ok();
    let paths = spec["paths"].as_object().unwrap();
    for route in [
        "/v1/status",
        "/v1/sessions",
        "/v1/sessions/{sid}",
        "/v1/sessions/{sid}/agents",
        "/v1/sessions/{sid}/agents/{aid}",
        "/v1/sessions/{sid}/agents/{aid}/plan",
        "/v1/sessions/{sid}/log",
        "/v1/sessions/{sid}/projections/plan",
        "/healthz",
        "/readyz",
    ] {
        assert!(paths.contains_key(route), "{route} is documented");
    }
    for (route, ops) in paths.iter().filter(|(r, _)| r.starts_with("/v1/sessions")) {
        for (method, op) in ops.as_object().unwrap() {
            let problem = &op["responses"]["4XX"]["content"]["application/problem+json"];
            assert!(
                problem.is_object(),
                "{method} {route} documents its problems"
            );
        }
    }
    assert!(spec["components"]["schemas"]["Problem"].is_object());
}
