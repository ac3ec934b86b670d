//! The configuration of `repairbench run`: one TOML file, embedded by default.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::tasks::prompt::Retrieval;

/// The embedded default (`harness/run.toml`).
pub const DEFAULT_RUN_CONFIG: &str = include_str!("../../harness/run.toml");

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    pub model: String,
    pub out: PathBuf,
    pub seed: u64,
    pub repair: RepairConfig,
    pub humaneval: HumanEvalConfig,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepairConfig {
    pub dataset: PathBuf,
    pub retrieval: Retrieval,
    pub max_files: usize,
    pub max_file_chars: usize,
    pub max_tokens: usize,
    pub timeout_s: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HumanEvalConfig {
    pub limit: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{origin}: {message}")]
    Invalid { origin: String, message: String },
}

impl RunConfig {
    pub fn embedded() -> Self {
        Self::parse(DEFAULT_RUN_CONFIG, "embedded harness/run.toml")
            .expect("the embedded run config is valid")
    }

    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses TOML; errors name the origin and the line and column of the offending field.
    pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| {
            let at = e.span().map(|span| {
                let line = text[..span.start].matches('\n').count() + 1;
                let col = span.start - text[..span.start].rfind('\n').map_or(0, |i| i + 1) + 1;
                format!(":{line}:{col}")
            });
            ConfigError::Invalid {
                origin: format!("{origin}{}", at.unwrap_or_default()),
                message: e.message().to_string(),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_config_parses() {
        let config = RunConfig::embedded();
        assert_eq!(config.repair.dataset, PathBuf::from("issues"));
        assert!(config.humaneval.limit > 0);
    }

    #[test]
    fn unknown_field_names_the_line() {
        let text = DEFAULT_RUN_CONFIG.replace("limit = 5", "limit = 5\nlimt = 3");
        let err = RunConfig::parse(&text, "run.toml").unwrap_err().to_string();
        let line = text.lines().position(|l| l.starts_with("limt")).unwrap() + 1;
        assert!(err.starts_with(&format!("run.toml:{line}:")), "{err}");
        assert!(err.contains("limt"), "{err}");
    }
}
