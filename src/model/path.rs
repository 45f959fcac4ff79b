//! Field paths into a Pod, JSONPath-like: `status.qosClass`, `spec.containers[0].image`,
//! `spec.containers[*].image`, `metadata.labels['app.kubernetes.io/name']` (a leading `.` or
//! `$.` is allowed). Entry point: [`FieldPath::parse`]; [`FieldPath::select`] gives the values
//! it reaches (none when a step is missing).

use serde_json::Value;

/// One step of a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Key(String),
    Index(usize),
    Every,
}

/// A parsed field path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPath {
    text: String,
    steps: Vec<Step>,
}

/// Why a path does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field path `{path}`, at character {at}: {message}")]
pub struct PathError {
    pub path: String,
    pub at: usize,
    pub message: String,
}

impl FieldPath {
    pub fn parse(text: &str) -> Result<FieldPath, PathError> {
        let chars: Vec<char> = text.chars().collect();
        let fail = |at: usize, message: &str| PathError {
            path: text.to_string(),
            at,
            message: message.to_string(),
        };
        let mut at = 0;
        if chars.starts_with(&['$']) {
            at = 1;
        }
        let mut steps = Vec::new();
        let mut first = true;
        while at < chars.len() {
            match chars[at] {
                '.' => {
                    at += 1;
                    let start = at;
                    while at < chars.len() && !matches!(chars[at], '.' | '[') {
                        at += 1;
                    }
                    if at == start {
                        return Err(fail(start, "expected a field name after `.`"));
                    }
                    steps.push(Step::Key(chars[start..at].iter().collect()));
                }
                '[' => {
                    let close = chars[at..]
                        .iter()
                        .position(|c| *c == ']')
                        .map(|p| at + p)
                        .ok_or_else(|| fail(at, "`[` is not closed by `]`"))?;
                    let inner: String = chars[at + 1..close].iter().collect();
                    let step = if inner == "*" {
                        Step::Every
                    } else if let Ok(i) = inner.parse::<usize>() {
                        Step::Index(i)
                    } else if inner.len() >= 2
                        && (inner.starts_with('\'') && inner.ends_with('\'')
                            || inner.starts_with('"') && inner.ends_with('"'))
                    {
                        Step::Key(inner[1..inner.len() - 1].to_string())
                    } else {
                        return Err(fail(
                            at + 1,
                            "expected `*`, an index or a quoted key in `[...]`",
                        ));
                    };
                    steps.push(step);
                    at = close + 1;
                }
                _ if first => {
                    // A path may start with a bare name: `status.phase`.
                    let start = at;
                    while at < chars.len() && !matches!(chars[at], '.' | '[') {
                        at += 1;
                    }
                    steps.push(Step::Key(chars[start..at].iter().collect()));
                }
                c => return Err(fail(at, &format!("unexpected `{c}`"))),
            }
            first = false;
        }
        if steps.is_empty() {
            return Err(fail(0, "the path is empty"));
        }
        Ok(FieldPath {
            text: text.to_string(),
            steps,
        })
    }

    /// The path as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Its steps, from the root.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// The values the path reaches in `root`, in document order.
    pub fn select<'a>(&self, root: &'a Value) -> Vec<&'a Value> {
        let mut now = vec![root];
        for step in &self.steps {
            now = now
                .into_iter()
                .flat_map(|v| -> Vec<&'a Value> {
                    match step {
                        Step::Key(k) => v.get(k).into_iter().collect(),
                        Step::Index(i) => v.get(i).into_iter().collect(),
                        Step::Every => match v {
                            Value::Array(items) => items.iter().collect(),
                            Value::Object(map) => map.values().collect(),
                            _ => Vec::new(),
                        },
                    }
                })
                .collect();
        }
        now
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn paths_reach_fields_elements_and_every_element() {
        let pod = json!({
            "metadata": {"labels": {"app.kubernetes.io/name": "web"}},
            "spec": {"containers": [{"image": "a"}, {"image": "b"}]},
            "status": {"qosClass": "Burstable"}
        });
        let got = |p: &str| -> Vec<Value> {
            FieldPath::parse(p)
                .unwrap_or_else(|e| panic!("{e}"))
                .select(&pod)
                .into_iter()
                .cloned()
                .collect()
        };
        assert_eq!(got("status.qosClass"), vec![json!("Burstable")]);
        assert_eq!(got(".status.qosClass"), vec![json!("Burstable")]);
        assert_eq!(got("$.spec.containers[1].image"), vec![json!("b")]);
        assert_eq!(
            got("spec.containers[*].image"),
            vec![json!("a"), json!("b")]
        );
        assert_eq!(
            got("metadata.labels['app.kubernetes.io/name']"),
            vec![json!("web")]
        );
        assert_eq!(got("status.missing.deeper"), Vec::<Value>::new());
    }

    #[test]
    fn bad_paths_say_where() {
        for (path, at) in [
            ("status..phase", 7),
            ("spec.containers[x]", 16),
            ("spec[0", 4),
            ("", 0),
        ] {
            let e = FieldPath::parse(path).expect_err(path);
            assert_eq!(e.at, at, "{e}");
        }
    }
}
