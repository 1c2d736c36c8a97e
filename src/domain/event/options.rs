//! The answer options of a question (DESIGN §6): a stable `id` that an answer names, a `kind`
//! that decisions read (a plan review approves by kind, never by wording), and a `label` that
//! is display text only, so a UI may show it in any language.
//!
//! Logs written before options had ids recorded plain label strings. They still fold: a string
//! becomes an option whose id is derived from its label (`Keep planning` → `keep_planning`) and
//! whose kind is inferred for the two plan-review labels (`other` for anything else). New events
//! always record the object form.

use serde::{Deserialize, Deserializer, Serialize};
use utoipa::ToSchema;

/// What choosing an option means, whatever its label says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OptionKind {
    /// Approves what the question asks about (a plan review's `Approve`).
    Approve,
    /// Sends the agent back to planning (a plan review's `Keep planning`).
    KeepPlanning,
    /// Any other choice; its meaning is its label.
    Other,
}

/// One answer a question offers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QuestionOption {
    /// Stable within its question: an answer names it (`{"option": "approve"}`).
    #[schema(example = "approve")]
    pub id: String,
    pub kind: OptionKind,
    /// Display text; a UI may show its own translation instead.
    #[schema(example = "Approve")]
    pub label: String,
}

/// The id and label of a plan review's approving option.
pub const APPROVE: (&str, &str) = ("approve", "Approve");
/// The id and label of a plan review's "revise it" option.
pub const KEEP_PLANNING: (&str, &str) = ("keep_planning", "Keep planning");

/// The kind of the option `answer` chose among `options`: named by id, or (in logs older than
/// option ids) by label; `None` for a text-only answer.
pub fn chosen_kind(
    options: &[QuestionOption],
    answer: &super::QuestionAnswered,
) -> Option<OptionKind> {
    let chosen = match (&answer.option, &answer.label) {
        (Some(id), _) => options.iter().find(|o| &o.id == id),
        (None, Some(label)) => options.iter().find(|o| &o.label == label),
        (None, None) => None,
    };
    chosen.map(|o| o.kind)
}

impl QuestionOption {
    pub fn new(id: &str, kind: OptionKind, label: &str) -> Self {
        Self {
            id: id.to_owned(),
            kind,
            label: label.to_owned(),
        }
    }

    /// The option an old log's plain label stands for (its id made unique by the caller).
    fn from_label(label: String) -> Self {
        let kind = match label.as_str() {
            l if l == APPROVE.1 => OptionKind::Approve,
            l if l == KEEP_PLANNING.1 => OptionKind::KeepPlanning,
            _ => OptionKind::Other,
        };
        Self {
            id: slug(&label),
            kind,
            label,
        }
    }
}

/// An id derived from a label: lowercase ASCII letters and digits, runs of anything else as
/// one `_`, at most 64 bytes; `option` when nothing is left.
fn slug(label: &str) -> String {
    let mut out = String::new();
    for c in label.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('_') {
            out.push('_');
        }
        if out.len() >= 64 {
            break;
        }
    }
    let out = out.trim_end_matches('_');
    if out.is_empty() {
        "option".to_owned()
    } else {
        out.to_owned()
    }
}

/// An option as stored: an object, or a plain label in logs older than option ids.
#[derive(Deserialize)]
#[serde(untagged)]
enum Stored {
    Label(String),
    Full(QuestionOption),
}

/// Reads a question's options in either stored form. Ids derived from labels are made unique
/// (`_2`, `_3`…), so every option of a question can be named.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<QuestionOption>, D::Error> {
    let stored = Vec::<Stored>::deserialize(d)?;
    let mut out: Vec<QuestionOption> = Vec::with_capacity(stored.len());
    for s in stored {
        let option = match s {
            Stored::Full(option) => option,
            Stored::Label(label) => {
                let mut option = QuestionOption::from_label(label);
                let base = option.id.clone();
                let mut n = 1;
                while out.iter().any(|o| o.id == option.id) {
                    n += 1;
                    option.id = format!("{base}_{n}");
                }
                option
            }
        };
        if out.iter().any(|o| o.id == option.id) {
            return Err(serde::de::Error::custom(format!(
                "two options with id `{}`",
                option.id
            )));
        }
        out.push(option);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: serde_json::Value) -> Result<Vec<QuestionOption>, serde_json::Error> {
        deserialize(json)
    }

    #[test]
    fn plain_labels_of_an_old_log_become_options_with_derived_ids_and_inferred_kinds() {
        let options = read(serde_json::json!([
            "Approve",
            "Keep planning",
            "Use Redis 7.0!"
        ]));
        assert_eq!(
            options.unwrap(),
            vec![
                QuestionOption::new("approve", OptionKind::Approve, "Approve"),
                QuestionOption::new("keep_planning", OptionKind::KeepPlanning, "Keep planning"),
                QuestionOption::new("use_redis_7_0", OptionKind::Other, "Use Redis 7.0!"),
            ]
        );
    }

    #[test]
    fn derived_ids_are_unique_and_never_empty() {
        let options = read(serde_json::json!(["Yes", "yes!", "¿?", "…"])).unwrap();
        let ids: Vec<&str> = options.iter().map(|o| o.id.as_str()).collect();
        assert_eq!(ids, ["yes", "yes_2", "option", "option_2"]);
        assert_eq!(slug(&"x".repeat(200)).len(), 64);
    }

    #[test]
    fn the_object_form_reads_back_as_written_and_rejects_duplicates_and_unknown_fields() {
        let written = vec![
            QuestionOption::new("approve", OptionKind::Approve, "Genehmigen"),
            QuestionOption::new("keep_planning", OptionKind::KeepPlanning, "Weiter planen"),
        ];
        let json = serde_json::to_value(&written).unwrap();
        assert_eq!(
            json[0],
            serde_json::json!({"id": "approve", "kind": "approve", "label": "Genehmigen"})
        );
        assert_eq!(read(json).unwrap(), written);
        let twice = serde_json::json!([
            {"id": "a", "kind": "other", "label": "A"},
            {"id": "a", "kind": "other", "label": "B"}
        ]);
        assert!(read(twice).is_err());
        let extra = serde_json::json!([{"id": "a", "kind": "other", "label": "A", "x": 1}]);
        assert!(read(extra).is_err());
    }
}
