//! Stream entries as Redis returns them, decoded into recorded events. No Redis commands here
//! (those are all in `redis.rs`): only the shape of the replies.

use redis::Value;

use super::{Anchor, StoreError, StoreResult};
use crate::domain::event::SCHEMA_VERSION;
use crate::domain::{AgentId, EventId, EventKind, Recorded};

pub(super) fn corrupt(id: &str, reason: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        id: id.to_owned(),
        reason: reason.into(),
    }
}

pub(super) fn bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

pub(super) fn int(v: &Value) -> Option<u64> {
    match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        other => std::str::from_utf8(bytes(other)?).ok()?.parse().ok(),
    }
}

/// Decodes one stream entry `[id, [field, value, ...]]`.
pub(super) fn decode_entry(entry: &Value) -> StoreResult<Recorded> {
    let Value::Array(parts) = entry else {
        return Err(corrupt("?", "entry is not an array"));
    };
    let [id, fields] = parts.as_slice() else {
        return Err(corrupt("?", "entry has no fields"));
    };
    let id = bytes(id)
        .and_then(|b| std::str::from_utf8(b).ok())
        .unwrap_or("?");
    let seq = EventId::parse(id).map_err(|e| corrupt(id, e))?;
    let Value::Array(fields) = fields else {
        return Err(corrupt(id, "fields are not an array"));
    };
    let (mut ty, mut agent, mut data, mut ts, mut v) = (None, None, None, None, None);
    for pair in fields.chunks(2) {
        let [name, value] = pair else {
            return Err(corrupt(id, "odd field list"));
        };
        match bytes(name).unwrap_or_default() {
            b"type" => ty = bytes(value),
            b"agent" => agent = bytes(value),
            b"data" => data = bytes(value),
            b"ts" => ts = int(value),
            b"v" => v = int(value),
            _ => {}
        }
    }
    let missing = |f: &str| corrupt(id, format!("field `{f}` is missing"));
    let ty = std::str::from_utf8(ty.ok_or_else(|| missing("type"))?)
        .map_err(|e| corrupt(id, e.to_string()))?;
    let agent = std::str::from_utf8(agent.ok_or_else(|| missing("agent"))?)
        .map_err(|e| corrupt(id, e.to_string()))?;
    let v = v.ok_or_else(|| missing("v"))?;
    if v != u64::from(SCHEMA_VERSION) {
        return Err(corrupt(id, format!("unknown schema version {v}")));
    }
    Ok(Recorded {
        id: seq,
        agent: AgentId::parse(agent).map_err(|e| corrupt(id, e))?,
        kind: EventKind::from_parts(ty, data.ok_or_else(|| missing("data"))?)
            .map_err(|e| corrupt(id, e))?,
        committed_at: ts.ok_or_else(|| missing("ts"))?,
        v: SCHEMA_VERSION,
    })
}

/// The seq and commit time of an entry, without decoding its event.
pub(super) fn entry_anchor(entry: &Value) -> Option<Anchor> {
    let Value::Array(parts) = entry else {
        return None;
    };
    let [id, Value::Array(fields)] = parts.as_slice() else {
        return None;
    };
    let seq = EventId::parse(std::str::from_utf8(bytes(id)?).ok()?)
        .ok()?
        .seq();
    let ts = fields
        .chunks(2)
        .find(|pair| pair.first().and_then(bytes) == Some(b"ts".as_slice()))
        .and_then(|pair| pair.get(1))
        .and_then(int)?;
    Some(Anchor { seq, ts })
}

pub(super) fn decode_entries(v: &Value) -> StoreResult<Vec<Recorded>> {
    match v {
        Value::Array(entries) => entries.iter().map(decode_entry).collect(),
        Value::Nil => Ok(Vec::new()),
        _ => Err(corrupt("?", "range reply is not an array")),
    }
}
