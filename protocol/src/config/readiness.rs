//! How a started backend is recognised as ready: the setting (`readiness`), the mode the
//! supervisor uses, and why it chose it, as `status`, `/v1/models` and the log report it.

use serde::{Deserialize, Serialize};

use super::ConfigError;
use super::json_walk::Obj;

/// The `readiness` setting. One per config: `python` and `strata_dir`, the Strata installation
/// the mode describes, are one per config too.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Readiness {
    /// `"auto"` (the default): before the Strata directory's first start the supervisor asks
    /// `PYTHON -m serve.server --help` once and uses the ready file where it lists
    /// `--ready-file`, `/health` where it does not.
    #[default]
    Auto,
    /// `"ready_file"`: the backend writes a ready file (`--ready-file`, the router's extension
    /// of Strata) naming its pid, model and port.
    ReadyFile,
    /// `"health"`: for a Strata without the extension: the port's listener must belong to the
    /// child's process group and `/health` name the model, loaded.
    Health,
}

impl Readiness {
    pub fn as_str(self) -> &'static str {
        match self {
            Readiness::Auto => "auto",
            Readiness::ReadyFile => "ready_file",
            Readiness::Health => "health",
        }
    }

    /// The mode this setting fixes, or `None` for `auto` (decided by asking the Strata).
    pub fn fixed_mode(self) -> Option<ReadinessMode> {
        match self {
            Readiness::Auto => None,
            Readiness::ReadyFile => Some(ReadinessMode::ReadyFile),
            Readiness::Health => Some(ReadinessMode::Health),
        }
    }

    pub(super) fn parse(root: &Obj<'_>) -> Result<Readiness, ConfigError> {
        match root.opt_string("readiness")? {
            None | Some("auto") => Ok(Readiness::Auto),
            Some("ready_file") => Ok(Readiness::ReadyFile),
            Some("health") => Ok(Readiness::Health),
            Some(_) => Err(root
                .path()
                .field("readiness")
                .error("must be \"auto\", \"ready_file\" or \"health\"")),
        }
    }
}

/// The way starts are actually checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadinessMode {
    ReadyFile,
    Health,
}

impl ReadinessMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ReadinessMode::ReadyFile => "ready_file",
            ReadinessMode::Health => "health",
        }
    }
}

/// Why a mode was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadinessBasis {
    /// `readiness` names the mode.
    Configured,
    /// `auto`: the Strata's `--help` lists `--ready-file`.
    HelpListsReadyFile,
    /// `auto`: the Strata's `--help` has no `--ready-file` (a stock Strata).
    HelpLacksReadyFile,
    /// `auto`: `--help` could not be asked (it failed or timed out); the spec's ready file is
    /// used, and the next start asks again.
    HelpUnanswered,
}

/// The mode a start used and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadinessChoice {
    pub mode: ReadinessMode,
    pub basis: ReadinessBasis,
}

impl ReadinessChoice {
    /// One line for operators (status, `/v1/models`, the log, `check-config`).
    pub fn why(&self) -> &'static str {
        match self.basis {
            ReadinessBasis::Configured => "set by readiness in the config",
            ReadinessBasis::HelpListsReadyFile => {
                "auto: `python -m serve.server --help` lists --ready-file"
            }
            ReadinessBasis::HelpLacksReadyFile => {
                "auto: `python -m serve.server --help` has no --ready-file (a stock Strata), so /health decides"
            }
            ReadinessBasis::HelpUnanswered => {
                "auto: `python -m serve.server --help` did not answer; the ready file is tried and the next start asks again"
            }
        }
    }
}

/// `readiness` in `status` and `/v1/models`: the setting, the mode in use (`null` while `auto`
/// has not asked yet: it asks before the first start) and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadinessReport {
    pub configured: Readiness,
    pub mode: Option<ReadinessMode>,
    pub why: String,
}

impl ReadinessReport {
    /// What is known with `configured` and the last choice (if a start made one).
    pub fn new(configured: Readiness, chosen: Option<ReadinessChoice>) -> ReadinessReport {
        let chosen = chosen.or_else(|| {
            configured.fixed_mode().map(|mode| ReadinessChoice {
                mode,
                basis: ReadinessBasis::Configured,
            })
        });
        match chosen {
            Some(choice) => ReadinessReport {
                configured,
                mode: Some(choice.mode),
                why: choice.why().to_owned(),
            },
            None => ReadinessReport {
                configured,
                mode: None,
                why: "auto: `python -m serve.server --help` is asked before the first start".into(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_says_what_is_known() {
        let before = ReadinessReport::new(Readiness::Auto, None);
        assert_eq!(before.mode, None);
        let stock = ReadinessReport::new(
            Readiness::Auto,
            Some(ReadinessChoice {
                mode: ReadinessMode::Health,
                basis: ReadinessBasis::HelpLacksReadyFile,
            }),
        );
        assert_eq!(
            serde_json::to_value(&stock).unwrap()["mode"],
            serde_json::json!("health")
        );
        assert!(stock.why.contains("stock Strata"));
        let fixed = ReadinessReport::new(Readiness::ReadyFile, None);
        assert_eq!(fixed.mode, Some(ReadinessMode::ReadyFile));
        assert_eq!(fixed.why, "set by readiness in the config");
        assert_eq!(
            serde_json::to_value(&fixed).unwrap()["configured"],
            serde_json::json!("ready_file")
        );
    }
}
