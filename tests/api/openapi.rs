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
            for status in ["401", "503"] {
                let problem = &op["responses"][status]["content"]["application/problem+json"];
                assert!(
                    problem["schema"]["allOf"][0]["$ref"] == "#/components/schemas/Problem",
                    "{method} {route} documents its {status} problems"
                );
            }
        }
    }
    assert!(spec["components"]["schemas"]["Problem"].is_object());
}

/// The README's problem tables are generated from `http::problems`; this keeps them current.
#[test]
fn the_readme_problem_tables_match_the_code() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/README.md");
    let readme = std::fs::read_to_string(path).unwrap();
    let begin = readme
        .find("<!-- problems:begin")
        .and_then(|i| readme[i..].find('\n').map(|n| i + n + 1))
        .expect("README has a problems:begin marker line");
    let end = readme
        .find("<!-- problems:end -->")
        .expect("README has a problems:end marker");
    let generated = dsh_plan::http::problems::table();
    assert!(
        readme[begin..end] == generated,
        "README.md's problem tables are out of date: replace the lines between the \
         problems:begin and problems:end markers with the output of\n\n    cargo run -q -- problems\n"
    );
}
