//! The problem table in the OpenAPI document and in the README.
//!
//! [`Document`] rewrites each operation's error responses from the table: one response per
//! status, described by the codes it can carry, its schema `Problem` with `code` restricted to
//! them, an example per code, and the headers sent with it (`X-Request-Id` everywhere,
//! `Retry-After` on 429 and 503 (and the 409 of a key in use), `RateLimit`/`RateLimit-Policy` wherever a credential is
//! checked). It also states each operation's security from the same table: an operation that
//! can answer 401 takes a credential, the others are public.

use std::collections::BTreeMap;

use actix_web::http::StatusCode;
use serde_json::json;
use utoipa::openapi::example::{Example, ExampleBuilder};
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{Operation, ParameterIn};
use utoipa::openapi::schema::{AllOfBuilder, ObjectBuilder, Type};
use utoipa::openapi::security::{
    ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
};
use utoipa::openapi::{ContentBuilder, OpenApi, Ref, RefOr, Response, ResponseBuilder};

use super::{authenticated, codes, describe, status, OPERATIONS, UNROUTED};
use crate::http::Code;

const PROBLEM_JSON: &str = "application/problem+json";
const REQUEST_ID: &str = "X-Request-Id";
const RETRY_AFTER: &str = "Retry-After";
const RATELIMIT: &str = "RateLimit";
const RATELIMIT_POLICY: &str = "RateLimit-Policy";
/// The request id the examples show.
const EXAMPLE_ID: &str = "0190f5c2-7b7e-7c4a-9d1e-3f6a2b8c9d10";

/// The `Modify` step that writes the table into the spec.
pub struct Document;

impl utoipa::Modify for Document {
    fn modify(&self, spec: &mut OpenApi) {
        add_components(spec);
        for item in spec.paths.paths.values_mut() {
            for op in [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ]
            .into_iter()
            .flatten()
            {
                document(op);
            }
        }
    }
}

fn header_ref(name: &str) -> RefOr<utoipa::openapi::header::Header> {
    RefOr::Ref(Ref::new(format!("#/components/headers/{name}")))
}

fn add_components(spec: &mut OpenApi) {
    let components = spec.components.get_or_insert_with(Default::default);
    let string = |pattern: Option<&str>| {
        let mut s = ObjectBuilder::new().schema_type(Type::String);
        if let Some(p) = pattern {
            s = s.pattern(Some(p));
        }
        s
    };
    let headers = [
        (
            REQUEST_ID,
            "The request's id: the client's own `X-Request-Id` when it matches \
             `[A-Za-z0-9._:-]{1,128}`, else a UUID v7 drawn by the server. A problem names it \
             in `instance`, and the server's log lines about the request carry it.",
            string(Some("^[A-Za-z0-9._:-]{1,128}$")),
            json!(EXAMPLE_ID),
        ),
        (
            RETRY_AFTER,
            "Seconds until a retry can succeed: on every 503, on `rate-limited`, \
             `provider-call-quota` and `idempotency-key-quota`, and on the 409 \
             `idempotency-key-in-use`.",
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(1)),
            json!(1),
        ),
        (
            RATELIMIT,
            "What is left of the API key's request rate (IETF RateLimit header fields): \
             `r` requests remain, the window is whole again in `t` seconds. Sent to API keys \
             and browser tokens (which spend their key's rate).",
            string(None),
            json!("\"default\";r=42;t=1"),
        ),
        (
            RATELIMIT_POLICY,
            "The API key's request rate: `q` requests per `w`-second window.",
            string(None),
            json!("\"default\";q=100;w=1"),
        ),
    ];
    for (name, description, schema, example) in headers {
        let header = HeaderBuilder::new()
            .schema(Some(schema))
            .description(Some(description))
            .example(Some(example))
            .build();
        components.headers.insert(name.to_owned(), RefOr::T(header));
    }
    for code in all_codes(false) {
        let example = example(code, code.status().as_u16());
        components.examples.insert(code.as_str(), RefOr::T(example));
    }
    let bearer = HttpBuilder::new()
        .scheme(HttpAuthScheme::Bearer)
        .description(Some(
            "A tenant API key (`dsh_<id>_<secret>`, server side only: it may do everything \
             to its tenant's sessions) or a browser token minted with \
             `POST /v1/sessions/{sid}/tokens` (one session, maybe one agent, the scopes it \
             was minted with: `read`, `plan`, `prompt`, `answer`). Needed once any API key \
             exists (`DSH_AUTH`).",
        ))
        .build();
    components.add_security_scheme("bearer", SecurityScheme::Http(bearer));
    let query = ApiKeyValue::with_description(
        "access_token",
        "A browser token in the query, for `EventSource`, which cannot set `Authorization`; \
         accepted on event streams only.",
    );
    components.add_security_scheme("accessToken", SecurityScheme::ApiKey(ApiKey::Query(query)));
}

/// Rewrites one operation's error responses, headers and security from the table.
fn document(op: &mut Operation) {
    let id = op.operation_id.clone().unwrap_or_default();
    let Some(codes) = codes(&id) else {
        return;
    };
    let keyed = authenticated(&id);
    let responses = &mut op.responses.responses;
    responses.retain(|status, _| !(status.starts_with('4') || status.starts_with('5')));
    for response in responses.values_mut() {
        if let RefOr::T(r) = response {
            add_headers(r, keyed);
        }
    }
    let mut by_status: BTreeMap<u16, Vec<Code>> = BTreeMap::new();
    for code in codes {
        by_status
            .entry(status(&id, code).as_u16())
            .or_default()
            .push(code);
    }
    for (status, codes) in by_status {
        let mut response = problem_response(status, &codes);
        add_headers(&mut response, keyed);
        if status == 429 || status == 503 || codes.contains(&Code::IdempotencyKeyInUse) {
            response
                .headers
                .insert(RETRY_AFTER.to_owned(), header_ref(RETRY_AFTER));
        }
        responses.insert(status.to_string(), RefOr::T(response));
    }
    op.security = Some(match keyed {
        true => {
            let mut ways = vec![SecurityRequirement::new("bearer", Vec::<String>::new())];
            let in_query = op.parameters.iter().flatten().any(|p| {
                matches!(p, RefOr::T(p) if p.name == "access_token" && p.parameter_in == ParameterIn::Query)
            });
            if in_query {
                ways.push(SecurityRequirement::new(
                    "accessToken",
                    Vec::<String>::new(),
                ));
            }
            ways
        }
        false => Vec::new(),
    });
}

fn add_headers(response: &mut Response, keyed: bool) {
    response
        .headers
        .insert(REQUEST_ID.to_owned(), header_ref(REQUEST_ID));
    if keyed {
        for name in [RATELIMIT, RATELIMIT_POLICY] {
            response.headers.insert(name.to_owned(), header_ref(name));
        }
    }
}

/// The response for `status`: which codes it carries and what each means, `Problem` with
/// `code` restricted to them, and an example of each.
fn problem_response(status: u16, codes: &[Code]) -> Response {
    let reason = StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Error");
    let mut description = format!("{reason}: a problem document with one of these codes:\n");
    for code in codes {
        description.push_str(&format!("\n- `{}`: {}", code.as_str(), describe(*code).0));
    }
    let names: Vec<String> = codes.iter().map(|c| c.as_str()).collect();
    let schema = AllOfBuilder::new()
        .item(Ref::from_schema_name("Problem"))
        .item(
            ObjectBuilder::new().property(
                "code",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some(names.clone())),
            ),
        );
    // The shared example of each code, or its own where this status is an exception.
    let examples = codes.iter().map(|code| {
        let example = match code.status().as_u16() == status {
            true => RefOr::Ref(Ref::new(format!("#/components/examples/{}", code.as_str()))),
            false => RefOr::T(example(*code, status)),
        };
        (code.as_str(), example)
    });
    ResponseBuilder::new()
        .description(description)
        .content(
            PROBLEM_JSON,
            ContentBuilder::new()
                .schema(Some(schema))
                .examples_from_iter(examples)
                .build(),
        )
        .build()
}

/// An example problem document for `code` sent with `status`.
fn example(code: Code, status: u16) -> Example {
    let (meaning, detail) = describe(code);
    let title = StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Error");
    ExampleBuilder::new()
        .summary(meaning)
        .value(Some(json!({
            "type": format!("urn:dsh-plan:problem:{}", code.as_str()),
            "title": title,
            "status": status,
            "detail": detail,
            "code": code.as_str(),
            "instance": format!("urn:dsh-plan:request:{EXAMPLE_ID}"),
        })))
        .build()
}

/// Every code an operation (and, with `unrouted`, a request no operation takes) can answer,
/// by status.
fn all_codes(unrouted: bool) -> Vec<Code> {
    let mut all: Vec<Code> = Vec::new();
    let extra = if unrouted { UNROUTED } else { &[] };
    for code in OPERATIONS
        .iter()
        .flat_map(|(op, _)| codes(op).unwrap_or_default())
        .chain(extra.iter().copied())
    {
        if !all.contains(&code) {
            all.push(code);
        }
    }
    all.sort_by_key(|c| c.status().as_u16());
    all
}

/// The README's problem tables: every code with its status and meaning, then every operation
/// with the codes it can answer, by status.
pub fn markdown(spec: &OpenApi) -> String {
    let mut routes: BTreeMap<String, String> = BTreeMap::new();
    for (path, item) in &spec.paths.paths {
        let ops = [
            ("GET", &item.get),
            ("PUT", &item.put),
            ("POST", &item.post),
            ("DELETE", &item.delete),
            ("PATCH", &item.patch),
        ];
        for (method, op) in ops {
            if let Some(id) = op.as_ref().and_then(|o| o.operation_id.clone()) {
                routes.insert(id, format!("{method} {path}"));
            }
        }
    }
    let all = all_codes(true);
    let mut out = String::from("| code | status | meaning |\n|---|---|---|\n");
    for code in &all {
        out.push_str(&format!(
            "| `{}` | {} | {} |\n",
            code.as_str(),
            code.status().as_u16(),
            describe(*code).0.replace('|', "\\|")
        ));
    }
    out.push_str("\n| operation | route | codes by status |\n|---|---|---|\n");
    for (op, _) in OPERATIONS {
        let mut by_status: BTreeMap<u16, Vec<String>> = BTreeMap::new();
        for code in codes(op).unwrap_or_default() {
            by_status
                .entry(status(op, code).as_u16())
                .or_default()
                .push(format!("`{}`", code.as_str()));
        }
        let cell: Vec<String> = by_status
            .into_iter()
            .map(|(s, c)| format!("{s} {}", c.join(", ")))
            .collect();
        let route = routes.get(*op).cloned().unwrap_or_default();
        let cell = if cell.is_empty() {
            "none".to_owned()
        } else {
            cell.join("; ")
        };
        out.push_str(&format!("| `{op}` | `{route}` | {cell} |\n"));
    }
    let unrouted: Vec<String> = UNROUTED
        .iter()
        .map(|c| format!("`{}`", c.as_str()))
        .collect();
    out.push_str(&format!(
        "\nA request no operation takes (an unknown path, a wrong method) can get {}.\n",
        unrouted.join(", ")
    ));
    out
}
