//! Slash commands: parsing and the registry a composer autocompletes from. Commands are
//! registered by plugins; today `plan-mode` registers `/plan` when `commands` is composed.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CommandSpec {
    /// The name without the slash.
    #[schema(example = "plan")]
    pub name: String,
    #[schema(example = "/plan [off | <message>]")]
    pub usage: String,
    pub description: String,
}

pub fn plan_command() -> CommandSpec {
    CommandSpec {
        name: "plan".into(),
        usage: "/plan [off | <message>]".into(),
        description: "Select plan mode; with a message, also send it to be planned. `/plan off` leaves plan mode (and cancels a pending entry) without asking the model.".into(),
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CommandError {
    #[error("`{0}` is not a slash command: commands start with `/`, e.g. `/plan`")]
    NotACommand(String),
    #[error("unknown command `/{name}`; known commands: {}", if known.is_empty() { "none".to_owned() } else { known.iter().map(|k| format!("/{k}")).collect::<Vec<_>>().join(", ") })]
    Unknown { name: String, known: Vec<String> },
}

/// Splits `/name args` and checks the name against the registry.
pub fn parse<'a>(
    input: &'a str,
    registry: &[CommandSpec],
) -> Result<(&'a str, &'a str), CommandError> {
    let trimmed = input.trim();
    let Some(rest) = trimmed.strip_prefix('/') else {
        return Err(CommandError::NotACommand(
            trimmed.chars().take(40).collect(),
        ));
    };
    let (name, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    if !registry.iter().any(|c| c.name == name) {
        return Err(CommandError::Unknown {
            name: name.chars().take(40).collect(),
            known: registry.iter().map(|c| c.name.clone()).collect(),
        });
    }
    Ok((name, args.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_split_into_name_and_trimmed_args() {
        let reg = vec![plan_command()];
        assert_eq!(parse("/plan", &reg), Ok(("plan", "")));
        assert_eq!(
            parse("  /plan   fix the login bug ", &reg),
            Ok(("plan", "fix the login bug"))
        );
        assert_eq!(parse("/plan off", &reg), Ok(("plan", "off")));
        assert!(matches!(
            parse("plan", &reg),
            Err(CommandError::NotACommand(_))
        ));
        let e = parse("/deploy now", &reg).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown command `/deploy`; known commands: /plan"
        );
        assert!(parse("/plan", &[])
            .unwrap_err()
            .to_string()
            .ends_with("known commands: none"));
    }
}
