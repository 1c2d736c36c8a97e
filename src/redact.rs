//! Secret redaction: what of a URL or of text from outside (a provider's error body, a store's
//! error) may be logged, printed or returned.
//!
//! Two entry points, so a secret never depends on a call site remembering which parts of a
//! string are dangerous:
//! - [`redact_url`] for a URL we were configured with (`REDIS_URL`, `DSH_PROVIDER_URL`): the
//!   userinfo and the values of credential-like query parameters are hidden, for any scheme
//!   (`redis+unix:///s?pass=…` carries its password in the query);
//! - [`scrub`] for free text: every secret the caller knows is hidden, and so is anything that
//!   looks like a credential (`Bearer …`, `Basic …`, `sk-…`, our `dsh_…` keys, URLs with
//!   userinfo, `"api_key": "…"` or `x-api-key: …` fields), and the result is bounded.
//!
//! Both err towards hiding too much: a hidden harmless word costs a reader a guess, a leaked
//! key costs a rotation.

/// What stands in for a hidden value.
const HIDDEN: &str = "***";

/// Characters [`scrub`] returns at most (an ellipsis included when it cut).
pub const SCRUB_MAX_CHARS: usize = 512;

/// Bytes of input [`scrub`] reads: a provider may answer with megabytes, and only the first
/// [`SCRUB_MAX_CHARS`] characters of the result are kept anyway.
const SCRUB_MAX_INPUT: usize = 64 * 1024;

/// Words in a parameter, field or header name that mark its value as a secret (the name is
/// split at `-`, `_`, `.` and camelCase humps first, so `x-api-key`, `access_token` and
/// `apiKey` all match, but `prompt_tokens` and `keyword` do not).
const SECRET_WORDS: &str = "pass passwd password passphrase pwd key apikey token accesstoken \
    secret auth authorization sig signature credential credentials cookie";

/// Prefixes of bearer credentials recognized without knowing them: provider keys (`sk-`,
/// `sk_`) and this service's API keys (`dsh_`). A word counts when at least
/// [`MIN_PREFIXED_TAIL`] key characters follow, so `dsh_plan` stays readable.
const KEY_PREFIXES: &[&str] = &["sk-", "sk_", "dsh_"];
const MIN_PREFIXED_TAIL: usize = 8;

/// The URL with its userinfo (user and password) and the values of credential-like query
/// parameters (`pass`, `password`, `key`, `api-key`, `token`, `access_token`, `secret`, `auth`,
/// `sig`, …, case-insensitive, percent-encoded names too) replaced by `***`.
///
/// Works on the text, not on a parsed URL, so a URL no parser accepts (a raw `@`, `/`, `#` or
/// `?` in a password) is still hidden: the userinfo runs to the last `@` before the query (a
/// path holding `@` is hidden with it).
pub fn redact_url(url: &str) -> String {
    let mut out = String::with_capacity(url.len());
    let mut rest = url;
    if let Some(i) = url.find("://") {
        out.push_str(&url[..i + 3]);
        rest = &url[i + 3..];
        if let Some(at) = userinfo_end(rest) {
            out.push_str(HIDDEN);
            rest = &rest[at..];
        }
    }
    match rest.find('?') {
        None => out.push_str(rest),
        Some(q) => {
            out.push_str(&rest[..=q]);
            let query = &rest[q + 1..];
            let (query, fragment) = query.split_at(query.find('#').unwrap_or(query.len()));
            out.push_str(&redact_query(query));
            out.push_str(fragment);
        }
    }
    out
}

/// The secret values a URL carries (its userinfo and credential-like query values, raw and
/// percent-decoded), for [`scrub`]'s `known` list: text echoing one of them alone is scrubbed
/// too.
pub fn secrets_in_url(url: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = url;
    if let Some(i) = url.find("://") {
        rest = &url[i + 3..];
        if let Some(at) = userinfo_end(rest) {
            let userinfo = &rest[..at];
            found.push(userinfo.to_owned());
            found.extend(userinfo.split_once(':').map(|(_, p)| p.to_owned()));
            rest = &rest[at..];
        }
    }
    if let Some(q) = rest.find('?') {
        let query = &rest[q + 1..];
        let query = &query[..query.find('#').unwrap_or(query.len())];
        for pair in query.split('&') {
            if let Some((name, value)) = pair.split_once('=') {
                if secret_name(&percent_decode(name)) {
                    found.push(value.to_owned());
                }
            }
        }
    }
    let decoded: Vec<String> = found.iter().map(|s| percent_decode(s)).collect();
    found.extend(decoded);
    found.retain(|s| !s.is_empty());
    found.sort();
    found.dedup();
    found
}

/// Free text made safe to log or store: every `known` secret (and its percent-encoded form)
/// and everything that looks like a credential is replaced by `***`, then the text is cut to
/// [`SCRUB_MAX_CHARS`] characters.
pub fn scrub(text: &str, known: &[&str]) -> String {
    let text = hide_known(cut_bytes(text, SCRUB_MAX_INPUT), known);
    let text = hide_urls(&text);
    let text = hide_fields(&text);
    let text = hide_schemes(&text);
    let text = hide_prefixed(&text);
    match text.char_indices().nth(SCRUB_MAX_CHARS - 1) {
        Some((end, _)) if text[end..].chars().nth(1).is_some() => format!("{}…", &text[..end]),
        _ => text,
    }
}

/// Where the userinfo ends in what follows `://` (the index of its `@`), if there is one.
fn userinfo_end(rest: &str) -> Option<usize> {
    let q = rest.find('?').unwrap_or(rest.len());
    rest[..q].rfind('@').or_else(|| {
        // A raw `?` in the password: the "query" reaches an `@` before any `=` or `&`.
        let after = &rest[q..];
        let stop = after.find(['=', '&']).unwrap_or(after.len());
        after[..stop].rfind('@').map(|at| q + at)
    })
}

fn redact_query(query: &str) -> String {
    query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if secret_name(&percent_decode(name)) => format!("{name}={HIDDEN}"),
            _ => pair.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// Whether a parameter, field or header of this name holds a secret.
fn secret_name(name: &str) -> bool {
    let mut word = String::new();
    let mut prev_lower = false;
    for c in name.chars().chain(std::iter::once(' ')) {
        let hump = c.is_ascii_uppercase() && prev_lower;
        if !c.is_ascii_alphanumeric() || hump {
            if SECRET_WORDS.split_whitespace().any(|w| w == word) {
                return true;
            }
            word.clear();
        }
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        if c.is_ascii_alphanumeric() {
            word.push(c.to_ascii_lowercase());
        }
    }
    false
}

fn hide_known(text: &str, known: &[&str]) -> String {
    let mut secrets: Vec<String> = known
        .iter()
        .filter(|s| !s.is_empty())
        .flat_map(|s| [(*s).to_owned(), percent_encode(s)])
        .collect();
    // Longest first, so a secret containing another is hidden whole.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    secrets.dedup();
    let mut text = text.to_owned();
    for s in &secrets {
        if text.contains(s.as_str()) {
            text = text.replace(s.as_str(), HIDDEN);
        }
    }
    text
}

/// Every `scheme://…` in the text through [`redact_url`].
fn hide_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut from = 0;
    while let Some(found) = text[from..].find("://") {
        let sep = from + found;
        let start = text[..sep]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-')))
            .map_or(0, |i| i + 1)
            .max(copied);
        let end = text[sep..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`'))
            .map_or(text.len(), |i| sep + i);
        out.push_str(&text[copied..start]);
        out.push_str(&redact_url(&text[start..end]));
        copied = end;
        from = end.max(sep + 3);
    }
    out.push_str(&text[copied..]);
    out
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')
}

/// The value of every `name: value`, `name=value` or `"name": "value"` whose name is a
/// secret's (JSON fields, headers echoed into a body, query strings).
fn hide_fields(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    while i < b.len() {
        if !is_name_byte(b[i]) || (i > 0 && is_name_byte(b[i - 1])) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && is_name_byte(b[i]) {
            i += 1;
        }
        let mut j = i;
        if j < b.len() && matches!(b[j], b'"' | b'\'') {
            j += 1;
        }
        j = skip_blanks(b, j);
        let separator = j < b.len() && matches!(b[j], b':' | b'=');
        if !separator || text[j..].starts_with("://") || !secret_name(&text[start..i]) {
            continue;
        }
        let (from, to) = value_span(b, skip_blanks(b, j + 1));
        if to > from {
            out.push_str(&text[copied..from]);
            out.push_str(HIDDEN);
            copied = to;
            i = to;
        }
    }
    out.push_str(&text[copied..]);
    out
}

fn skip_blanks(b: &[u8], mut j: usize) -> usize {
    while j < b.len() && matches!(b[j], b' ' | b'\t') {
        j += 1;
    }
    j
}

/// The span of the value starting at `j`: inside its quotes, or up to the end of the line or
/// the next delimiter. An object or array is left alone: its own fields are scanned next.
fn value_span(b: &[u8], j: usize) -> (usize, usize) {
    match b.get(j) {
        Some(b'{' | b'[') => (j, j),
        Some(&quote @ (b'"' | b'\'')) => {
            let mut k = j + 1;
            while k < b.len() && b[k] != quote {
                k += if b[k] == b'\\' { 2 } else { 1 };
            }
            (j + 1, k.min(b.len()))
        }
        _ => {
            let mut k = j;
            while k < b.len()
                && !matches!(
                    b[k],
                    b'\n' | b'\r' | b',' | b';' | b'&' | b'}' | b']' | b'"' | b'\''
                )
            {
                k += 1;
            }
            (j, k)
        }
    }
}

fn is_b64token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'+' | b'/' | b'=')
}

/// The credential after `Bearer` or `Basic` (any case).
fn hide_schemes(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    while i < b.len() {
        let word_start = i == 0 || !b[i - 1].is_ascii_alphanumeric();
        let scheme = ["bearer", "basic"].into_iter().find(|s| {
            b.len() >= i + s.len() && b[i..i + s.len()].eq_ignore_ascii_case(s.as_bytes())
        });
        let Some(scheme) = scheme.filter(|_| word_start) else {
            i += 1;
            continue;
        };
        let blanks = skip_blanks(b, i + scheme.len());
        let mut end = blanks;
        while end < b.len() && is_b64token_byte(b[end]) {
            end += 1;
        }
        if blanks > i + scheme.len() && end > blanks {
            out.push_str(&text[copied..blanks]);
            out.push_str(HIDDEN);
            copied = end;
        }
        i = end.max(i + 1);
    }
    out.push_str(&text[copied..]);
    out
}

/// Words that start like a known kind of key (`sk-…`, `dsh_…`), prefix kept.
fn hide_prefixed(text: &str) -> String {
    let b = text.as_bytes();
    let key_byte = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_');
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    while i < b.len() {
        let word_start = i == 0 || !key_byte(b[i - 1]);
        let prefix = KEY_PREFIXES
            .iter()
            .find(|p| word_start && b[i..].starts_with(p.as_bytes()));
        let Some(prefix) = prefix else {
            i += 1;
            continue;
        };
        let tail = i + prefix.len();
        let mut end = tail;
        while end < b.len() && key_byte(b[end]) {
            end += 1;
        }
        if end - tail >= MIN_PREFIXED_TAIL {
            out.push_str(&text[copied..tail]);
            out.push_str(HIDDEN);
            copied = end;
        }
        i = end;
    }
    out.push_str(&text[copied..]);
    out
}

fn cut_bytes(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).and_then(|c| hex(*c)),
            b.get(i + 2).and_then(|c| hex(*c)),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|c| match c {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (c as char).to_string()
            }
            _ => format!("%{c:02X}"),
        })
        .collect()
}

#[cfg(test)]
#[path = "redact_tests.rs"]
mod tests;
