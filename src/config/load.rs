//! Reading the config: YAML text, then `KUBECAST_...` environment overrides.
//!
//! Entry point: [`load`]. Errors in the file name the field path and the line; errors in an
//! override name the variable. Unknown fields are rejected everywhere.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::Config;

/// Environment variables with this prefix override config fields: `__` separates path
/// segments, so `KUBECAST_WATCH__NAMESPACES='[a, b]'` sets `watch.namespaces`.
pub const ENV_PREFIX: &str = "KUBECAST_";

/// Variables with the prefix that are not config overrides.
const NOT_OVERRIDES: &[&str] = &[
    "KUBECAST_STACK_",
    "KUBECAST_CONFIG",
    "KUBECAST_CACHE",
    "KUBECAST_TEST_",
    // scripts/demo's settings (`KUBECAST_DEMO_METRICS`).
    "KUBECAST_DEMO_",
    // `kubecast replay`'s own (its SASL password).
    "KUBECAST_REPLAY_",
];

/// Why a config could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The YAML is malformed or does not fit the config's shape.
    #[error("{file}: {message}")]
    Parse { file: String, message: String },
    /// An environment override does not fit the config's shape.
    #[error("environment variable {var}: {message}")]
    Env { var: String, message: String },
    /// The values are well-formed but not acceptable.
    #[error("{file}: {source}")]
    Invalid {
        file: String,
        source: super::ValidationError,
    },
}

/// Reads `path`, applies the environment's overrides, and returns the config (not yet
/// validated).
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    load_str(&path.display().to_string(), &text, std::env::vars())
}

/// Parses `text` (named `file` in errors) and applies the overrides among `vars`.
pub fn load_str(
    file: &str,
    text: &str,
    vars: impl IntoIterator<Item = (String, String)>,
) -> Result<Config, ConfigError> {
    let config = parse_yaml(text).map_err(|message| ConfigError::Parse {
        file: file.to_string(),
        message,
    })?;
    let overrides = env_overrides(vars);
    if overrides.is_empty() {
        return Ok(config);
    }
    apply_overrides(config, &overrides)
}

fn parse_yaml(text: &str) -> Result<Config, String> {
    let mut path = String::new();
    let result = serde_saphyr::with_deserializer_from_str(text, |de| {
        serde_path_to_error::deserialize(de).map_err(|e| {
            path = e.path().to_string();
            e.into_inner()
        })
    });
    result.map_err(|e| {
        let message = e.to_string();
        if path.is_empty() || path == "." {
            message
        } else {
            format!("field `{path}`: {message}")
        }
    })
}

/// One `KUBECAST_A__B=value` variable, split into its lower-case path.
#[derive(Debug)]
struct Override {
    var: String,
    path: Vec<String>,
    value: String,
}

fn env_overrides(vars: impl IntoIterator<Item = (String, String)>) -> Vec<Override> {
    let mut out: Vec<Override> = vars
        .into_iter()
        .filter(|(k, _)| {
            k.starts_with(ENV_PREFIX) && !NOT_OVERRIDES.iter().any(|p| k.starts_with(p))
        })
        .map(|(var, value)| {
            let path = var[ENV_PREFIX.len()..]
                .split("__")
                .map(str::to_ascii_lowercase)
                .collect();
            Override { var, path, value }
        })
        .collect();
    // Deterministic order: a parent override first, then the fields under it.
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

fn apply_overrides(config: Config, overrides: &[Override]) -> Result<Config, ConfigError> {
    let mut tree = serde_json::to_value(&config).map_err(|e| ConfigError::Env {
        var: overrides[0].var.clone(),
        message: format!("internal: the config does not serialize: {e}"),
    })?;
    for o in overrides {
        if o.path.iter().any(String::is_empty) {
            return Err(ConfigError::Env {
                var: o.var.clone(),
                message: "an empty field name (`__` at the start or end, or `___`): use `__` only between field names".to_string(),
            });
        }
        let value = scalar_or_yaml(&o.value);
        set_path(&mut tree, &o.path, value).map_err(|message| ConfigError::Env {
            var: o.var.clone(),
            message,
        })?;
    }
    match serde_path_to_error::deserialize::<_, Config>(tree.clone()) {
        Ok(config) => Ok(config),
        Err(e) => {
            let path = e.path().to_string();
            // A value such as `1234` for a string field parses as a number: retry that
            // override as a plain string before reporting.
            let culprit = overrides.iter().find(|o| o.path.join(".") == path);
            if let Some(o) = culprit {
                let mut retry = tree;
                if set_path(&mut retry, &o.path, Value::String(o.value.clone())).is_ok()
                    && let Ok(config) = serde_json::from_value::<Config>(retry)
                {
                    return Ok(config);
                }
            }
            // Not one variable's own field: name every override, since together they made it.
            let var = culprit.map(|o| o.var.clone()).unwrap_or_else(|| {
                overrides
                    .iter()
                    .map(|o| o.var.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            });
            Err(ConfigError::Env {
                var,
                message: format!("field `{path}`: {}", e.into_inner()),
            })
        }
    }
}

/// An override's value: YAML flow syntax (`[a, b]`, `{k: v}`, `true`, `5`), else the string.
fn scalar_or_yaml(raw: &str) -> Value {
    serde_saphyr::from_str::<Value>(raw).unwrap_or_else(|_| Value::String(raw.to_string()))
}

fn set_path(tree: &mut Value, path: &[String], value: Value) -> Result<(), String> {
    let mut node = tree;
    for (i, segment) in path.iter().enumerate() {
        if node.is_null() {
            *node = Value::Object(Default::default());
        }
        let Value::Object(map) = node else {
            return Err(format!(
                "`{}` is not a section, so `{segment}` cannot be set under it",
                path[..i].join(".")
            ));
        };
        if i + 1 == path.len() {
            map.insert(segment.clone(), value);
            return Ok(());
        }
        node = map.entry(segment.clone()).or_insert(Value::Null);
    }
    Err("empty override path".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "cluster: local\nsinks:\n  out:\n    type: stdout\n";

    fn none() -> Vec<(String, String)> {
        Vec::new()
    }

    #[test]
    fn a_minimal_file_gets_the_documented_defaults() {
        let c = load_str("t.yaml", MINIMAL, none()).unwrap();
        assert_eq!(c.cluster, "local");
        assert_eq!(c.watch.page_size, 500);
        assert!(c.encoding.redact.env_values);
        assert_eq!(c.sinks.len(), 1);
    }

    #[test]
    fn an_unknown_field_is_rejected_with_its_path_and_line() {
        let text = "cluster: local\nwatch:\n  namespace: [a]\nsinks:\n  out:\n    type: stdout\n";
        let e = load_str("t.yaml", text, none()).unwrap_err().to_string();
        assert!(e.contains("namespace"), "{e}");
        assert!(e.contains("watch"), "{e}");
        assert!(e.contains("line 3") || e.contains("3:"), "{e}");
    }

    #[test]
    fn a_wrong_type_names_the_field_and_what_was_expected() {
        let text = "cluster: local\nwatch:\n  page_size: many\nsinks:\n  out:\n    type: stdout\n";
        let e = load_str("t.yaml", text, none()).unwrap_err().to_string();
        assert!(e.contains("watch.page_size"), "{e}");
    }

    #[test]
    fn environment_overrides_set_nested_fields_and_lists() {
        let vars = vec![
            (
                "KUBECAST_WATCH__NAMESPACES".to_string(),
                "[a, b]".to_string(),
            ),
            ("KUBECAST_CLUSTER".to_string(), "1234".to_string()),
            ("KUBECAST_STACK_DIR".to_string(), "/ignored".to_string()),
        ];
        let c = load_str("t.yaml", MINIMAL, vars).unwrap();
        assert_eq!(c.watch.namespaces, vec!["a", "b"]);
        assert_eq!(
            c.cluster, "1234",
            "a number for a string field stays a string"
        );
    }

    #[test]
    fn an_override_with_an_empty_field_name_names_the_variable() {
        for var in [
            "KUBECAST___",
            "KUBECAST_WATCH____PAGE_SIZE",
            "KUBECAST_LOG__",
        ] {
            let vars = vec![(var.to_string(), "1".to_string())];
            let e = load_str("t.yaml", MINIMAL, vars).unwrap_err().to_string();
            assert!(e.contains(var) && e.contains("empty field name"), "{e}");
        }
    }

    #[test]
    fn a_bad_environment_override_names_the_variable() {
        let vars = vec![("KUBECAST_WATCH__PAGE_SIZE".to_string(), "lots".to_string())];
        let e = load_str("t.yaml", MINIMAL, vars).unwrap_err().to_string();
        assert!(e.contains("KUBECAST_WATCH__PAGE_SIZE"), "{e}");
        let vars = vec![("KUBECAST_WATCH__BOGUS".to_string(), "1".to_string())];
        let e = load_str("t.yaml", MINIMAL, vars).unwrap_err().to_string();
        assert!(e.contains("KUBECAST_WATCH__BOGUS"), "{e}");
    }
}
