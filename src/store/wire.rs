//! The payloads replicas exchange on a session's live pub/sub channel, and their decoding.
//!
//! Three kinds share a channel, told apart by their first byte:
//! - a committed batch, JSON published by `append.lua` in the append's own round trip
//!   (`{"sid":…,"first":…,"ms":…,"events":[[type, agent, data], …]}`): the appending replica
//!   encodes it around the commit time ([`encode_committed`]), the script puts the time in;
//! - an ephemeral message: one header line `E <sid> <agent> <kind> <turn> <step> <attempt>`
//!   (`- 0 0` when it belongs to no step), a newline, then the body bytes. Routing needs the
//!   header alone, so a body (an assistant delta's JSON) is never parsed on the way;
//! - a deletion notice `D <sid>`, published by `delete.lua` as it removes the session.

use std::sync::Arc;

use super::{Ephemeral, LiveMessage, StepRef, StoreError, StoreResult};
use crate::domain::event::SCHEMA_VERSION;
use crate::domain::{AgentId, EventId, EventKind, NewEvent, Recorded, SessionId};

/// Stands for "no step" in an ephemeral header; never a turn id (`turn-<hex>`).
const NO_TURN: &str = "-";

/// Whether `s` can stand as one header field: no spaces or control characters.
fn header_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic() || b >= 0x80)
}

/// Encodes an ephemeral message as its header line and body.
pub(super) fn encode_ephemeral(msg: &Ephemeral) -> StoreResult<String> {
    let (turn, step, attempt) = match &msg.step {
        Some(s) => (s.turn.as_str(), s.step, s.attempt),
        None => (NO_TURN, 0, 0),
    };
    if !header_token(&msg.kind) || !header_token(turn) || (msg.step.is_some() && turn == NO_TURN) {
        return Err(StoreError::Unencodable(format!(
            "ephemeral kind `{}` and turn `{turn}` must be non-empty and without spaces",
            msg.kind
        )));
    }
    let mut out = String::with_capacity(msg.body.len() + 96);
    out.push_str(&format!(
        "E {} {} {} {turn} {step} {attempt}\n",
        msg.sid, msg.agent, msg.kind
    ));
    out.push_str(&msg.body);
    Ok(out)
}

/// Batches whose payloads add up to more than this are put into their message by the script
/// (`cjson`), so their payloads go to Redis once; smaller ones, the usual case, are encoded
/// here, which costs Redis less than building Lua tables for `cjson`.
const PREENCODED_MAX: usize = 4096;

/// A committed batch's message as two parts, before and after its commit time (which only the
/// store knows): `events` with `data`, their encoded payloads, committed from seq `first`. The
/// second part is empty for a batch over [`PREENCODED_MAX`]: the script encodes its events.
pub(super) fn encode_committed(
    sid: &SessionId,
    first: u64,
    events: &[NewEvent],
    data: &[String],
) -> StoreResult<(String, String)> {
    // Built by hand, once per append: ids are validated tokens (ASCII letters, digits, `-`,
    // `_`) and type names `[a-z/]` constants, none of which JSON escapes, so only the payloads
    // need escaping.
    let unencodable = |e: serde_json::Error| StoreError::Unencodable(e.to_string());
    let head = format!(r#"{{"sid":"{}","first":{first},"ms":""#, sid.as_str());
    let size: usize = data.iter().map(String::len).sum();
    if size > PREENCODED_MAX {
        return Ok((head, String::new()));
    }
    let mut tail = Vec::with_capacity(size + events.len() * 96 + 16);
    tail.extend_from_slice(br#"","events":["#);
    for (i, (e, d)) in events.iter().zip(data).enumerate() {
        if i > 0 {
            tail.push(b',');
        }
        for part in [
            r#"[""#,
            e.kind.type_name(),
            r#"",""#,
            e.agent.as_str(),
            r#"","#,
        ] {
            tail.extend_from_slice(part.as_bytes());
        }
        serde_json::to_writer(&mut tail, d).map_err(unencodable)?;
        tail.push(b']');
    }
    tail.extend_from_slice(b"]}");
    let tail = String::from_utf8(tail).map_err(|e| StoreError::Unencodable(e.to_string()))?;
    Ok((head, tail))
}

/// Decodes a channel payload; `None` for one this version does not understand.
pub(super) fn decode(payload: &[u8]) -> Option<LiveMessage> {
    match payload {
        [b'E', b' ', ..] => decode_ephemeral(payload).map(LiveMessage::Ephemeral),
        [b'{', b'"', ..] => decode_committed(payload),
        [b'D', b' ', sid @ ..] => {
            let sid = SessionId::parse(std::str::from_utf8(sid).ok()?).ok()?;
            Some(LiveMessage::Deleted { sid })
        }
        _ => None,
    }
}

fn decode_ephemeral(payload: &[u8]) -> Option<Ephemeral> {
    let end = payload.iter().position(|b| *b == b'\n')?;
    let header = std::str::from_utf8(&payload[..end]).ok()?;
    let body = std::str::from_utf8(&payload[end + 1..]).ok()?;
    let fields: Vec<&str> = header.split(' ').collect();
    let ["E", sid, agent, kind, turn, step, attempt] = fields.as_slice() else {
        return None;
    };
    let step = match *turn {
        NO_TURN => None,
        turn => Some(StepRef {
            turn: turn.to_owned(),
            step: step.parse().ok()?,
            attempt: attempt.parse().ok()?,
        }),
    };
    Some(Ephemeral {
        sid: SessionId::parse(sid).ok()?,
        agent: AgentId::parse(agent).ok()?,
        kind: Arc::from(*kind),
        step,
        body: Arc::from(body),
    })
}

/// A committed batch as `append.lua` publishes it.
#[derive(serde::Deserialize)]
struct Published {
    sid: String,
    first: u64,
    ms: serde_json::Value,
    events: Vec<(String, String, String)>,
}

fn decode_committed(payload: &[u8]) -> Option<LiveMessage> {
    let p: Published = serde_json::from_slice(payload).ok()?;
    let sid = SessionId::parse(&p.sid).ok()?;
    let ms = match &p.ms {
        serde_json::Value::String(s) => s.parse().ok()?,
        other => other.as_u64()?,
    };
    let mut events = Vec::with_capacity(p.events.len());
    for ((ty, agent, data), seq) in p.events.iter().zip(p.first..) {
        events.push(Recorded {
            id: EventId(seq),
            agent: AgentId::parse(agent).ok()?,
            kind: EventKind::from_parts(ty, data.as_bytes()).ok()?,
            committed_at: ms,
            v: SCHEMA_VERSION,
        });
    }
    Some(LiveMessage::Events { sid, events })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(step: Option<StepRef>, body: &str) -> Ephemeral {
        Ephemeral {
            sid: SessionId::parse("s1").unwrap(),
            agent: AgentId::parse("agent-7").unwrap(),
            kind: Arc::from("assistant/delta"),
            step,
            body: Arc::from(body),
        }
    }

    fn round_trip(msg: &Ephemeral) -> Ephemeral {
        let wire = encode_ephemeral(msg).unwrap();
        match decode(wire.as_bytes()) {
            Some(LiveMessage::Ephemeral(back)) => back,
            other => panic!("decoded {other:?} from {wire:?}"),
        }
    }

    #[test]
    fn an_ephemeral_round_trips_with_its_body_untouched() {
        let step = StepRef {
            turn: "turn-0a1b".into(),
            step: 3,
            attempt: 2,
        };
        // Not JSON on purpose: the body is opaque, newlines and spaces included.
        let msg = delta(Some(step), "{\"text\":\"a b\nc\"} not json");
        assert_eq!(round_trip(&msg), msg);
        let stepless = delta(None, "{}");
        assert_eq!(round_trip(&stepless), stepless);
    }

    #[test]
    fn the_header_is_what_routing_reads() {
        let msg = delta(
            Some(StepRef {
                turn: "turn-ff".into(),
                step: 1,
                attempt: 1,
            }),
            "{}",
        );
        assert_eq!(
            encode_ephemeral(&msg).unwrap(),
            "E s1 agent-7 assistant/delta turn-ff 1 1\n{}"
        );
    }

    #[test]
    fn fields_that_would_break_the_header_are_refused() {
        for turn in ["", "turn 1", "-", "turn\n1"] {
            let msg = delta(
                Some(StepRef {
                    turn: turn.into(),
                    step: 1,
                    attempt: 1,
                }),
                "{}",
            );
            assert!(
                matches!(encode_ephemeral(&msg), Err(StoreError::Unencodable(_))),
                "{turn:?}"
            );
        }
        let mut msg = delta(None, "{}");
        msg.kind = Arc::from("assistant delta");
        assert!(encode_ephemeral(&msg).is_err());
    }

    #[test]
    fn malformed_payloads_decode_to_nothing() {
        for payload in [
            &b"E s1 main assistant/delta - 0 0"[..],
            b"E s1 Main assistant/delta - 0 0\n{}",
            b"E s1 main assistant/delta turn-1 x 1\n{}",
            b"E s1 main assistant/delta turn-1 1 1 extra\n{}",
            b"{\"ephemeral\":{}}",
            b"hello",
        ] {
            assert!(
                decode(payload).is_none(),
                "{}",
                String::from_utf8_lossy(payload)
            );
        }
    }

    #[test]
    fn a_deletion_notice_names_its_session() {
        let Some(LiveMessage::Deleted { sid }) = decode(b"D s1") else {
            panic!("not a deletion");
        };
        assert_eq!(sid.as_str(), "s1");
        assert!(decode(b"D s 1").is_none());
        assert!(decode(b"D ").is_none());
    }

    #[test]
    fn a_committed_batch_decodes_with_dense_ids_from_first() {
        let payload = br#"{"sid":"s1","first":4,"ms":"1700000000000","events":[["plan/mode","main","{\"active\":true}"],["plan/select","main","{\"active\":false}"]]}"#;
        let Some(LiveMessage::Events { sid, events }) = decode(payload) else {
            panic!("not a batch");
        };
        assert_eq!(sid.as_str(), "s1");
        let ids: Vec<u64> = events.iter().map(Recorded::seq).collect();
        assert_eq!(ids, vec![4, 5]);
        assert_eq!(events[0].committed_at, 1_700_000_000_000);
    }

    #[test]
    fn a_batch_encoded_around_its_commit_time_decodes_to_the_same_events() {
        // The appending replica encodes the message, the script only puts the time in: any
        // payload (quotes, newlines, non-ASCII) must come back byte for byte.
        let agent = AgentId::parse("main").unwrap();
        let events: Vec<NewEvent> = [
            r#"{"text":"say \"hi\"\n✓ </script>"}"#,
            r#"{"active":true}"#,
        ]
        .iter()
        .zip(["user/message", "plan/mode"])
        .map(|(data, ty)| {
            NewEvent::new(&agent, EventKind::from_parts(ty, data.as_bytes()).unwrap())
        })
        .collect();
        let data = crate::store::encode(&events).unwrap();
        let sid = SessionId::parse("s1").unwrap();
        let (head, tail) = encode_committed(&sid, 7, &events, &data).unwrap();
        // Byte for byte what serde_json makes of the same message.
        let triples: Vec<_> = events
            .iter()
            .zip(&data)
            .map(|(e, d)| (e.kind.type_name(), e.agent.as_str(), d))
            .collect();
        let json = serde_json::to_string(&triples).unwrap();
        let payload = format!("{head}1700000000123{tail}");
        assert_eq!(
            payload,
            format!(r#"{{"sid":"s1","first":7,"ms":"1700000000123","events":{json}}}"#)
        );
        let Some(LiveMessage::Events {
            sid: got,
            events: decoded,
        }) = decode(payload.as_bytes())
        else {
            panic!("not a batch: {payload}");
        };
        assert_eq!(got, sid);
        let seqs: Vec<u64> = decoded.iter().map(Recorded::seq).collect();
        assert_eq!(seqs, vec![7, 8]);
        for (d, e) in decoded.iter().zip(&events) {
            assert_eq!(
                (&d.kind, &d.agent, d.committed_at),
                (&e.kind, &e.agent, 1_700_000_000_123)
            );
        }
    }

    #[test]
    fn a_large_batch_leaves_its_events_to_the_script() {
        let agent = AgentId::parse("main").unwrap();
        let text = "x".repeat(PREENCODED_MAX);
        let data = format!(r#"{{"text":"{text}"}}"#);
        let events = vec![NewEvent::new(
            &agent,
            EventKind::from_parts("user/message", data.as_bytes()).unwrap(),
        )];
        let data = crate::store::encode(&events).unwrap();
        let sid = SessionId::parse("s1").unwrap();
        let (head, tail) = encode_committed(&sid, 3, &events, &data).unwrap();
        assert!(tail.is_empty());
        // What the script appends then: `","events":` and cjson's array of the events.
        let events_json = serde_json::to_string(&[("user/message", "main", &data[0])]).unwrap();
        let payload = format!(r#"{head}5","events":{events_json}}}"#);
        let Some(LiveMessage::Events {
            events: decoded, ..
        }) = decode(payload.as_bytes())
        else {
            panic!("not a batch");
        };
        assert_eq!(decoded[0].kind, events[0].kind);
    }
}
