//! The problem codes the spec lists for a request: the operation whose method and path template
//! match it, and the codes its response for a status allows (`http::problems`, as published).

use std::sync::OnceLock;

use serde_json::Value;

/// The spec as `/openapi.json` serves it, generated once per test binary.
pub fn spec() -> &'static Value {
    static SPEC: OnceLock<Value> = OnceLock::new();
    SPEC.get_or_init(|| {
        serde_json::to_value(dsh_plan::http::openapi()).expect("the spec serializes")
    })
}

fn matches(template: &str, path: &str) -> bool {
    let (t, p): (Vec<&str>, Vec<&str>) = (template.split('/').collect(), path.split('/').collect());
    t.len() == p.len()
        && t.iter()
            .zip(&p)
            .all(|(t, p)| (t.starts_with('{') && t.ends_with('}') && !p.is_empty()) || t == p)
}

/// The operation `method path` (a URL path, query excluded) is, as `(operationId, operation)`.
pub fn operation(method: &str, path: &str) -> Option<(String, &'static Value)> {
    let method = method.to_ascii_lowercase();
    let paths = spec()["paths"].as_object()?;
    // The most literal template wins, as it does in the router.
    let mut found: Vec<(&String, &Value)> = paths
        .iter()
        .filter(|(t, item)| matches(t, path) && item.get(&method).is_some())
        .collect();
    found.sort_by_key(|(t, _)| std::cmp::Reverse(t.matches('{').count() == 0));
    let (_, item) = found.first()?;
    let op = &item[&method];
    Some((op["operationId"].as_str()?.to_owned(), op))
}

/// The codes the spec lists for `method path` answering `status`: the operation's, or for a
/// request no operation takes, those of `http::problems::UNROUTED`. Also the operation's id.
pub fn codes(method: &str, path: &str, status: u16) -> (String, Vec<String>) {
    match operation(method, path) {
        Some((id, op)) => {
            let listed = op["responses"][status.to_string()]["content"]["application/problem+json"]
                ["schema"]["allOf"][1]["properties"]["code"]["enum"]
                .as_array()
                .map(|codes| {
                    codes
                        .iter()
                        .filter_map(|c| c.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            (id, listed)
        }
        None => (
            "(no operation)".to_owned(),
            dsh_plan::http::problems::UNROUTED
                .iter()
                .filter(|c| c.status().as_u16() == status)
                .map(|c| c.as_str())
                .collect(),
        ),
    }
}
