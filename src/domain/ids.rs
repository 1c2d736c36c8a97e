//! Identifiers that cross the wire: sessions, agents and event ids.
//!
//! Every id is validated once, at the edge, so the store can build Redis keys from it without
//! escaping (no `{`/`}` that would break the hash tag, no spaces, bounded length).

use std::fmt;

use serde::{Deserialize, Serialize};

/// The root agent that exists from a session's creation.
pub const ROOT_AGENT: &str = "main";

fn valid_token(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A session id: 1–64 ASCII letters, digits, `-` or `_`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SessionId(String);

impl SessionId {
    pub fn parse(s: &str) -> Result<Self, String> {
        if valid_token(s, 64) {
            Ok(Self(s.to_owned()))
        } else {
            Err(format!(
                "`{}` is not a session id: use 1-64 ASCII letters, digits, `-` or `_`",
                truncate(s)
            ))
        }
    }

    /// A fresh id: 128 bits from the OS random source as 32 lowercase hex digits. Nothing in
    /// it is derived from time or a counter, so an id tells nobody when the session was made
    /// nor what the ids made next to it are (an id is the only thing standing between a
    /// guesser and a session while auth is off). Fails only if the OS cannot supply entropy.
    pub fn generate() -> Result<Self, getrandom::Error> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes)?;
        Ok(Self::from_bytes(bytes))
    }

    /// The id spelling these 128 bits (32 lowercase hex digits). Only for bits as unguessable
    /// as [`Self::generate`]'s, e.g. drawn from a keyed request's random nonce.
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(hex(&bytes))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// `bytes` as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

/// A tenant: who owns a session (the tenant of the API key that created it). 1–64 ASCII
/// letters, digits, `-` or `_`, so it can name a Redis hash tag `{t:<tenant>}` as it is.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TenantId(String);

impl TenantId {
    pub fn parse(s: &str) -> Result<Self, String> {
        if valid_token(s, 64) {
            Ok(Self(s.to_owned()))
        } else {
            Err(format!(
                "`{}` is not a tenant name: use 1-64 ASCII letters, digits, `-` or `_`",
                truncate(s)
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The tenant quotas and open-mode tokens use while the server runs without credentials.
    pub fn open() -> Self {
        Self("_open".to_owned())
    }
}

/// An agent id: 1–64 lowercase ASCII letters, digits, `-` or `_`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct AgentId(String);

impl AgentId {
    pub fn parse(s: &str) -> Result<Self, String> {
        if valid_token(s, 64) && !s.bytes().any(|b| b.is_ascii_uppercase()) {
            Ok(Self(s.to_owned()))
        } else {
            Err(format!(
                "`{}` is not an agent id: use 1-64 lowercase ASCII letters, digits, `-` or `_`",
                truncate(s)
            ))
        }
    }

    pub fn root() -> Self {
        Self(ROOT_AGENT.to_owned())
    }

    pub fn is_root(&self) -> bool {
        self.0 == ROOT_AGENT
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The id of a recorded event: its position `seq` (1-based) in the session log, written
/// `<seq>-0`, which is also its Redis Stream entry id. A gap between ids is visible.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct EventId(pub u64);

impl EventId {
    /// Accepts `<seq>-0` (what the server hands out) and a bare `<seq>`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let digits = s.strip_suffix("-0").unwrap_or(s);
        if !digits.is_empty() && digits.len() <= 19 && digits.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(n) = digits.parse() {
                return Ok(Self(n));
            }
        }
        Err(format!(
            "`{}` is not an event id: expected `<seq>-0` as returned in `id`",
            truncate(s)
        ))
    }

    pub fn seq(self) -> u64 {
        self.0
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(80).collect()
}

macro_rules! string_newtype {
    ($t:ty) => {
        impl TryFrom<String> for $t {
            type Error = String;
            fn try_from(s: String) -> Result<Self, String> {
                Self::parse(&s)
            }
        }
        impl From<$t> for String {
            fn from(v: $t) -> String {
                v.0
            }
        }
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}
string_newtype!(SessionId);
string_newtype!(AgentId);
string_newtype!(TenantId);

impl EventId {
    /// `<seq>-0` (the Redis stream id of the entry), written into `buf`: the one place the
    /// format is made, on the stack (every answer carries an event id, and every append sends
    /// a few stream ids).
    fn write(self, buf: &mut [u8; 22]) -> &str {
        let mut at = buf.len() - 2;
        buf[at..].copy_from_slice(b"-0");
        let mut n = self.0;
        loop {
            at -= 1;
            buf[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        // Digits and `-0`: ASCII.
        std::str::from_utf8(&buf[at..]).unwrap_or_default()
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.write(&mut [0; 22]))
    }
}

impl Serialize for EventId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // As a string at once: `collect_str` would go through the formatter and the
        // serializer's escaping writer one piece at a time.
        s.serialize_str(self.write(&mut [0; 22]))
    }
}

impl<'de> Deserialize<'de> for EventId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        EventId::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_reject_hash_tag_braces_and_oversize_input() {
        assert!(SessionId::parse("a{b}").is_err());
        assert!(SessionId::parse(&"x".repeat(65)).is_err());
        assert!(SessionId::parse("").is_err());
        assert!(AgentId::parse("Main").is_err());
        assert!(AgentId::parse("agent-1").is_ok());
    }

    #[test]
    fn an_event_id_serializes_as_it_displays_and_parses_back() {
        for seq in [
            0,
            1,
            9,
            10,
            99,
            100,
            12_345,
            1 << 40,
            9_999_999_999_999_999_999,
        ] {
            assert_eq!(EventId(seq).to_string(), format!("{seq}-0"));
            let json = serde_json::to_string(&EventId(seq)).unwrap();
            assert_eq!(json, format!("\"{seq}-0\""));
            assert_eq!(
                serde_json::from_str::<EventId>(&json).unwrap(),
                EventId(seq)
            );
        }
        // The widest seq fits too (parsing takes 19 digits at most).
        assert_eq!(
            serde_json::to_string(&EventId(u64::MAX)).unwrap(),
            format!("\"{}-0\"", u64::MAX)
        );
        assert_eq!(EventId(u64::MAX).to_string(), format!("{}-0", u64::MAX));
    }

    #[test]
    fn generated_session_ids_are_random_hex_with_no_time_prefix() {
        let ids: Vec<String> = (0..1000)
            .map(|_| SessionId::generate().map(String::from))
            .collect::<Result<_, _>>()
            .expect("the OS random source works in tests");
        for id in &ids {
            assert_eq!(id.len(), 32, "{id}");
            assert!(
                id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
                "{id}"
            );
            assert!(SessionId::parse(id).is_ok(), "{id}");
        }
        let distinct: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len(), "ids repeat");
        // UUIDv7 ids made in one tight loop share their leading 48-bit millisecond clock (12
        // hex digits) and come out sorted; 1,000 random ids do neither. Among 1,000 random ids
        // the most common 4-digit prefix occurs a handful of times, never hundreds.
        let mut prefixes = std::collections::HashMap::<&str, usize>::new();
        for id in &ids {
            *prefixes.entry(&id[..4]).or_default() += 1;
        }
        let most = prefixes.values().max().copied().unwrap_or(0);
        assert!(
            most < 20,
            "{most} ids share a 4-digit prefix: a clock, not randomness"
        );
        let ascending = ids.windows(2).filter(|w| w[0] < w[1]).count();
        assert!(
            (300..700).contains(&ascending),
            "{ascending} of 999 neighbours ascend: the ids are ordered"
        );
    }

    #[test]
    fn event_ids_round_trip_through_their_wire_form() {
        assert_eq!(EventId::parse("42-0"), Ok(EventId(42)));
        assert_eq!(EventId::parse("42"), Ok(EventId(42)));
        assert_eq!(EventId(42).to_string(), "42-0");
        assert!(EventId::parse("42-1").is_err());
        assert!(EventId::parse("-0").is_err());
        assert!(EventId::parse("99999999999999999999").is_err());
    }
}
