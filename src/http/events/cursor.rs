//! The composite cursor of a stream of many sessions: each followed session's last event.

use std::collections::BTreeMap;
use std::fmt;

use crate::domain::{EventId, SessionId};

/// Each followed session's last event delivered: `<sid>:<seq>` entries joined by `,`, sorted by
/// session id (e.g. `3f9c…:12,7ab0…:4`). A session it does not name starts from its first
/// event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cursor(BTreeMap<SessionId, u64>);

impl Cursor {
    /// Parses a composite cursor naming at most `max` sessions (a seq may also be written
    /// `<seq>-0`).
    pub fn parse(raw: &str, max: usize) -> Result<Self, String> {
        let mut out = BTreeMap::new();
        for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (sid, seq) = entry.split_once(':').ok_or_else(|| {
                format!("cursor entry `{entry}` is not `<session>:<seq>` (GET /v1/events takes a composite cursor)")
            })?;
            let sid = SessionId::parse(sid)?;
            if out.insert(sid, EventId::parse(seq)?.seq()).is_some() {
                return Err(format!(
                    "cursor entry `{entry}` names a session an earlier entry named already"
                ));
            }
            if out.len() > max {
                return Err(format!(
                    "the cursor names more than {max} sessions, the most one stream follows"
                ));
            }
        }
        Ok(Self(out))
    }

    /// Where `sid` resumes: after this event (from its first event when `None`).
    pub fn get(&self, sid: &SessionId) -> Option<EventId> {
        self.0.get(sid).map(|seq| EventId(*seq))
    }

    /// `sid` was delivered (or passed over) up to `seq`.
    pub fn set(&mut self, sid: &SessionId, seq: u64) {
        self.0.insert(sid.clone(), seq);
    }

    pub fn remove(&mut self, sid: &SessionId) {
        self.0.remove(sid);
    }

    /// The sessions it names.
    pub fn sessions(&self) -> impl Iterator<Item = &SessionId> {
        self.0.keys()
    }

    /// Keeps only the sessions in `following`.
    pub fn keep(&mut self, following: &[SessionId]) {
        self.0.retain(|sid, _| following.contains(sid));
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (sid, seq)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{sid}:{seq}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_composite_cursor_round_trips_sorted_by_session() {
        let c = Cursor::parse("b:4, a:12-0,,", 10).unwrap();
        assert_eq!(c.to_string(), "a:12,b:4");
        assert_eq!(c.get(&SessionId::parse("a").unwrap()), Some(EventId(12)));
        assert_eq!(Cursor::parse("", 10).unwrap(), Cursor::default());
    }

    #[test]
    fn a_malformed_or_oversized_composite_cursor_is_refused() {
        assert!(Cursor::parse("12-0", 10)
            .unwrap_err()
            .contains("<session>:<seq>"));
        assert!(Cursor::parse("a:x", 10).is_err());
        assert!(Cursor::parse("a b:1", 10).is_err());
        assert!(Cursor::parse("a:1,b:2,c:3", 2)
            .unwrap_err()
            .contains("more than 2"));
        // One session twice is ambiguous (which entry wins?), not silently the last one.
        assert!(Cursor::parse("a:999,a:1", 10)
            .unwrap_err()
            .contains("named already"));
    }
}
