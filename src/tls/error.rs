//! `ConfigError`, the one error type of the TLS configuration: its own room because both
//! `config` (which builds) and `keys` (which reads the files) make it, and neither may import
//! the other's (the module graph test keeps `src/` free of circles).

use std::fmt;
use std::path::Path;

/// A configuration that cannot be used: one line naming the flag, the file and the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl ConfigError {
    pub fn new(flag: &str, path: &Path, problem: impl fmt::Display) -> ConfigError {
        ConfigError(format!("{flag} {}: {problem}", path.display()))
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}
