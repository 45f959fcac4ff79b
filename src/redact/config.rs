//! What is redacted (`encoding.redact`): the settings of the redaction pass, kept with it.
//! Entry point: [`RedactConfig`]; `config` re-exports it for the config file.

use serde::{Deserialize, Serialize};

/// What is redacted, in every output (`full` data, summaries, alert evidence and messages).
/// A redacted value is replaced by `"<redacted>"`. Whatever this says, every value of a
/// Secret's `data` and `stringData` is redacted, and the
/// `kubectl.kubernetes.io/last-applied-configuration` annotation is parsed and redacted by
/// the same rules as the object it copies (redacted whole when it does not parse). The lists
/// below add to that.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedactConfig {
    /// Replace the `value` of every env var of every container (in any `containers`,
    /// `initContainers` or `ephemeralContainers` list of any object of any kind: Pods, pod
    /// templates, custom resources). Default: true.
    #[serde(default = "yes")]
    pub env_values: bool,
    /// Annotations whose values are replaced whole, in addition to the defaults above.
    /// Default: none.
    #[serde(default)]
    pub annotations: Vec<String>,
    /// Labels whose values are replaced, in addition to the defaults (none). Default: none.
    #[serde(default)]
    pub labels: Vec<String>,
}

fn yes() -> bool {
    true
}

impl Default for RedactConfig {
    fn default() -> Self {
        RedactConfig {
            env_values: true,
            annotations: Vec::new(),
            labels: Vec::new(),
        }
    }
}
