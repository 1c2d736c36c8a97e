//! Plugin composition from a YAML manifest (`DSH_CONFIG`, or the built-in default):
//! `plan-mode` (with its policy `section`), `commands` and `questions`. Unknown keys, unknown
//! plugins, duplicates and an empty section fail at start with a message naming the file.
//! Every entry may carry a `name` (the package's display name, as in the seed's
//! `name: '@deepseek-ai/dsh-plan-mode'`); it must be a string and nothing reads it.

use serde::Deserialize;

/// The built-in manifest.
pub const DEFAULT_MANIFEST: &str = include_str!("default-manifest.yaml");

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanModeConfig {
    /// The `plan:policy` system-prompt section.
    pub section: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    plugins: Vec<Plugin>,
}

/// One manifest entry. `name` is repeated per variant because `deny_unknown_fields` cannot be
/// combined with a flattened common part; the underscore says nothing reads it.
#[derive(Debug, Deserialize)]
#[serde(tag = "id", deny_unknown_fields)]
enum Plugin {
    #[serde(rename = "plan-mode")]
    PlanMode {
        #[serde(rename = "name")]
        _name: Option<String>,
        config: PlanModeConfig,
    },
    #[serde(rename = "commands")]
    Commands {
        #[serde(rename = "name")]
        _name: Option<String>,
    },
    #[serde(rename = "questions")]
    Questions {
        #[serde(rename = "name")]
        _name: Option<String>,
    },
}

/// What is composed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Composition {
    pub plan_mode: Option<PlanModeConfig>,
    pub commands: bool,
    pub questions: bool,
}

impl Composition {
    pub fn builtin() -> Self {
        Self::parse(DEFAULT_MANIFEST, "the built-in manifest")
            .expect("the built-in manifest is valid")
    }

    /// Reads `path`, or the built-in manifest when `None`.
    pub fn load(path: Option<&str>) -> Result<Self, String> {
        match path {
            None => Ok(Self::builtin()),
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|e| format!("cannot read manifest {p}: {e}"))?;
                Self::parse(&text, p)
            }
        }
    }

    pub fn parse(text: &str, source: &str) -> Result<Self, String> {
        let manifest: Manifest =
            serde_norway::from_str(text).map_err(|e| format!("invalid manifest {source}: {e}"))?;
        let mut c = Composition {
            plan_mode: None,
            commands: false,
            questions: false,
        };
        let mut seen = std::collections::HashSet::new();
        for plugin in manifest.plugins {
            let id = match &plugin {
                Plugin::PlanMode { .. } => "plan-mode",
                Plugin::Commands { .. } => "commands",
                Plugin::Questions { .. } => "questions",
            };
            if !seen.insert(id) {
                return Err(format!(
                    "invalid manifest {source}: plugin `{id}` is listed twice"
                ));
            }
            match plugin {
                Plugin::PlanMode { config, .. } => {
                    if config.section.trim().is_empty() {
                        return Err(format!("invalid manifest {source}: plugin `plan-mode`: `config.section` must not be empty"));
                    }
                    c.plan_mode = Some(config);
                }
                Plugin::Commands { .. } => c.commands = true,
                Plugin::Questions { .. } => c.questions = true,
            }
        }
        Ok(c)
    }

    pub fn plan_policy(&self) -> Option<String> {
        self.plan_mode.as_ref().map(|p| p.section.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_manifest_composes_everything_with_a_policy() {
        let c = Composition::builtin();
        assert!(c.commands && c.questions);
        let policy = c.plan_policy().unwrap();
        for words in [
            "Inspect first",
            "no changes while planning",
            "Find discoverable facts",
            "complete enough to decide",
            "exit_plan_mode",
        ] {
            assert!(policy.contains(words), "policy says: {words}");
        }
    }

    #[test]
    fn the_seed_entry_with_a_package_name_loads() {
        // The seed's entry verbatim (000, "配置"), listed under `plugins:`.
        let seed = "\
- id: plan-mode
  name: '@deepseek-ai/dsh-plan-mode'
  config:
    section: |
      You are in plan mode. Explore and design before presenting the complete
      plan through exit_plan_mode.
";
        let manifest = format!("plugins:\n{seed}");
        let c = Composition::parse(&manifest, "seed.yaml").unwrap();
        assert_eq!(
            c,
            Composition {
                plan_mode: Some(PlanModeConfig {
                    section: "You are in plan mode. Explore and design before presenting the \
                              complete\nplan through exit_plan_mode.\n"
                        .into()
                }),
                commands: false,
                questions: false
            }
        );
    }

    #[test]
    fn every_plugin_may_be_named_but_the_name_must_be_a_string() {
        let c = Composition::parse(
            "plugins:\n  - id: commands\n    name: '@acme/commands'\n  - id: questions\n    name: q\n",
            "m.yaml",
        )
        .unwrap();
        assert!(c.commands && c.questions, "{c:?}");
        let e = Composition::parse("plugins:\n  - id: commands\n    name: [a]\n", "m.yaml")
            .unwrap_err();
        assert!(
            e.contains("m.yaml") && e.contains("expected a string"),
            "{e}"
        );
    }

    #[test]
    fn an_unknown_key_is_named_with_the_file() {
        let e = Composition::parse(
            "plugins:\n  - id: plan-mode\n    config:\n      sectoin: x\n",
            "/etc/dsh.yaml",
        )
        .unwrap_err();
        assert!(
            e.contains("/etc/dsh.yaml") && e.contains("unknown field `sectoin`"),
            "{e}"
        );
        let e = Composition::parse("plugins:\n  - id: commands\n    config: {}\n", "m.yaml")
            .unwrap_err();
        assert!(
            e.contains("m.yaml") && e.contains("unknown field `config`"),
            "{e}"
        );
        let e = Composition::parse("plugins: []\nextra: 1\n", "m.yaml").unwrap_err();
        assert!(e.contains("unknown field `extra`"), "{e}");
    }

    #[test]
    fn an_unknown_plugin_or_a_duplicate_fails() {
        let e = Composition::parse("plugins:\n  - id: sandbox\n", "m.yaml").unwrap_err();
        assert!(e.contains("unknown variant `sandbox`"), "{e}");
        let e = Composition::parse("plugins:\n  - id: commands\n  - id: commands\n", "m.yaml")
            .unwrap_err();
        assert!(e.contains("listed twice"), "{e}");
    }

    #[test]
    fn the_plan_section_is_required_and_not_empty() {
        let e = Composition::parse(
            "plugins:\n  - id: plan-mode\n    config:\n      section: '  '\n",
            "m.yaml",
        )
        .unwrap_err();
        assert!(e.contains("`config.section` must not be empty"), "{e}");
        let e = Composition::parse("plugins:\n  - id: plan-mode\n    config: {}\n", "m.yaml")
            .unwrap_err();
        assert!(e.contains("missing field `section`"), "{e}");
        let e = Composition::parse("plugins:\n  - id: plan-mode\n", "m.yaml").unwrap_err();
        assert!(e.contains("missing field `config`"), "{e}");
    }

    #[test]
    fn omitted_plugins_are_not_composed() {
        let c = Composition::parse("plugins:\n  - id: commands\n", "m.yaml").unwrap();
        assert_eq!(
            c,
            Composition {
                plan_mode: None,
                commands: true,
                questions: false
            }
        );
    }
}
