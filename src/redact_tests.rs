use super::*;

#[test]
fn urls_lose_their_userinfo_and_keep_host_port_and_path() {
    assert_eq!(
        redact_url("redis://default:s3cret@redis.internal:6380/2"),
        "redis://***@redis.internal:6380/2"
    );
    assert_eq!(
        redact_url("rediss://:s3cret@redis.internal"),
        "rediss://***@redis.internal"
    );
    assert_eq!(
        redact_url("http://user@example.com/v1"),
        "http://***@example.com/v1"
    );
    assert_eq!(
        redact_url("redis://127.0.0.1:6379"),
        "redis://127.0.0.1:6379"
    );
    assert_eq!(redact_url(""), "");
}

#[test]
fn a_password_holding_at_colon_slash_hash_or_question_mark_is_hidden_whole() {
    for (url, secret) in [
        ("redis://u:p@ss@host:6379/0", "p@ss"),
        ("redis://u:p:a:ss@host", "p:a:ss"),
        ("redis://u:pa/ss@host/0", "pa/ss"),
        ("redis://u:pa#ss@host/0", "pa#ss"),
        ("redis://u:pa?ss@host/0?db=1", "pa?ss"),
        ("redis://u:p%40ss@host", "p%40ss"),
    ] {
        let shown = redact_url(url);
        assert!(
            shown.ends_with("host") || shown.contains("@host"),
            "{shown}"
        );
        for part in secret.split(['@', ':', '/', '#', '?']) {
            assert!(!shown.contains(part), "`{part}` of {url} shown: {shown}");
        }
    }
}

#[test]
fn credential_query_values_are_hidden_for_any_scheme_and_others_kept() {
    assert_eq!(
        redact_url("redis+unix:///run/redis.sock?db=2&pass=s3cret"),
        "redis+unix:///run/redis.sock?db=2&pass=***"
    );
    assert_eq!(
        redact_url("unix:///run/redis.sock?user=me&password=s3cret#frag"),
        "unix:///run/redis.sock?user=me&password=***#frag"
    );
    assert_eq!(
        redact_url(
            "https://u:p@gw.example/v1?API-Key=a&api_key=b&apikey=c&Token=d&access_token=e&secret=f&auth=g&sig=h&key=i&model=m"
        ),
        "https://***@gw.example/v1?API-Key=***&api_key=***&apikey=***&Token=***&access_token=***&secret=***&auth=***&sig=***&key=***&model=m"
    );
    // A percent-encoded name is still a name.
    assert_eq!(
        redact_url("http://h/?api%2Dkey=x"),
        "http://h/?api%2Dkey=***"
    );
    // Words inside a name count, substrings of a word do not.
    assert_eq!(
        redact_url("http://h/?max_tokens=5&keyword=k&x-goog-api-key=z"),
        "http://h/?max_tokens=5&keyword=k&x-goog-api-key=***"
    );
    assert_eq!(redact_url("http://h/v1?"), "http://h/v1?");
}

#[test]
fn a_urls_secrets_are_listed_raw_and_decoded() {
    let found = secrets_in_url("http://user:p%40ss@h/v1?api-key=k3y&model=m");
    for s in ["user:p%40ss", "p%40ss", "p@ss", "k3y"] {
        assert!(found.iter().any(|f| f == s), "{s} missing from {found:?}");
    }
    assert!(!found.iter().any(|f| f == "m"), "{found:?}");
    assert!(secrets_in_url("redis://127.0.0.1:6379/0").is_empty());
}

#[test]
fn scrubbing_hides_every_known_secret_and_its_encoded_form() {
    let body = "denied for key hunter2/x (hunter2%2Fx) twice: hunter2/x";
    let out = scrub(body, &["hunter2/x", ""]);
    assert!(!out.contains("hunter2"), "{out}");
    assert_eq!(out, "denied for key *** (***) twice: ***");
}

#[test]
fn scrubbing_hides_bearer_and_basic_credentials_and_prefixed_keys() {
    let out = scrub(
        "got Authorization Bearer sk-proj-abcdefgh12345678 and basic dXNlcjpwYXNz; sk-zyxwvutsrqpo, dsh_0123456789abcdef and `dsh_plan`",
        &[],
    );
    for leak in ["abcdefgh", "dXNlcjpwYXNz", "zyxwvuts", "0123456789"] {
        assert!(!out.contains(leak), "{leak} in {out}");
    }
    assert!(
        out.contains("`dsh_plan`"),
        "a crate name is not a key: {out}"
    );
}

#[test]
fn scrubbing_hides_credential_fields_in_json_headers_and_queries() {
    let body = r#"{"error":{"message":"bad","echo":{"headers":{"authorization":"Bearer x1","x-api-key":"x2","Cookie":"x3"},"api_key":"x\"4","usage":{"prompt_tokens":12}}}}
x-api-key: x5
proxy-authorization: Digest x6
GET /v1?model=m&apiKey=x7&token=x8 HTTP/1.1
{'password': 'x9', "auth": {"user": "me", "pass": "x10"}}"#;
    let out = scrub(body, &[]);
    for leak in [
        "x1", "x2", "x3", "x\\\"4", "\"4", "x5", "x6", "x7", "x8", "x9", "x10",
    ] {
        assert!(!out.contains(leak), "{leak} in {out}");
    }
    for kept in ["\"prompt_tokens\":12", "model=m", "\"user\": \"me\""] {
        assert!(out.contains(kept), "{kept} hidden: {out}");
    }
}

#[test]
fn scrubbing_redacts_urls_inside_text() {
    let out = scrub(
        "cannot reach redis://:pw1@10.0.0.1:6379/0 nor 'https://gw/v1?sig=pw2' (see http://docs.example/x)",
        &[],
    );
    assert_eq!(
        out,
        "cannot reach redis://***@10.0.0.1:6379/0 nor 'https://gw/v1?sig=***' (see http://docs.example/x)"
    );
}

#[test]
fn scrubbed_text_is_bounded_and_cut_on_a_character() {
    let out = scrub(&"é".repeat(10_000), &[]);
    assert_eq!(out.chars().count(), SCRUB_MAX_CHARS);
    assert!(out.ends_with('…'));
    let exact = "a".repeat(SCRUB_MAX_CHARS);
    assert_eq!(scrub(&exact, &[]), exact);
    // Past the input bound, nothing is read at all.
    let far = format!("{}Bearer tail", "b".repeat(2 * SCRUB_MAX_INPUT));
    assert!(scrub(&far, &[]).chars().count() <= SCRUB_MAX_CHARS);
}

#[test]
fn plain_text_passes_unchanged() {
    let text = "The model `gpt-4o-mini` does not exist or you do not have access to it. (404)";
    assert_eq!(scrub(text, &["unrelated-secret"]), text);
}
