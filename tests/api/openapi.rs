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
    let reply = app.get("/openapi.json").await;
    assert_eq!(reply.content_type, "application/json");
    let spec = reply.ok();
    let committed: serde_json::Value =
        serde_json::from_str(&dsh_plan::http::openapi_json()).unwrap();
    assert_eq!(
        spec, committed,
        "the server serves the spec the code documents"
    );
    // Swagger UI at /docs reads the same document.
    let init = app.text("/docs/swagger-initializer.js").await;
    assert!(init.contains("\"/openapi.json\""), "{init}");
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

/// The README documents each route by example: every operation of the spec has a `curl` line
/// (continuation lines joined) with its method and a URL that fits its path template.
#[test]
fn the_readme_has_a_curl_example_of_every_route() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let spec: serde_json::Value = serde_json::from_str(&dsh_plan::http::openapi_json()).unwrap();
    let commands: Vec<String> = readme
        .replace("\\\n", " ")
        .lines()
        .filter(|l| l.trim_start().starts_with("curl ") || l.contains("$(curl "))
        .map(|l| l.replace("$P/", "$B/v1/sessions/$SID/agents/main/"))
        .collect();
    // The method and the URL paths (`$B/…`) of one command.
    let examples: Vec<(String, Vec<String>)> = commands
        .iter()
        .map(|c| {
            let method = ["POST", "PUT", "DELETE"]
                .into_iter()
                .find(|m| c.contains(&format!("-X{m}")) || c.contains(&format!("-X {m}")))
                .unwrap_or("GET");
            let urls = c
                .split("$B")
                .skip(1)
                .map(|rest| {
                    let end = rest.find(['"', '\'', ' ', '?', ')']).unwrap_or(rest.len());
                    rest[..end].to_owned()
                })
                .collect();
            (method.to_lowercase(), urls)
        })
        .collect();
    let fits = |template: &str, url: &str| {
        let (t, u): (Vec<_>, Vec<_>) = (template.split('/').collect(), url.split('/').collect());
        t.len() == u.len() && t.iter().zip(&u).all(|(t, u)| t.starts_with('{') || t == u)
    };
    let mut missing = Vec::new();
    for (path, ops) in spec["paths"].as_object().unwrap() {
        for method in ops.as_object().unwrap().keys() {
            let shown = examples
                .iter()
                .any(|(m, urls)| m == method && urls.iter().any(|u| fits(path, u)));
            if !shown {
                missing.push(format!("{} {path}", method.to_uppercase()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "README.md has no curl example of {missing:?}"
    );
}
