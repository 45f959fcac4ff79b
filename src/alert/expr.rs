//! The condition of a user rule: comparisons of Pod fields joined by `and`, `or`, `not` and
//! parentheses, in the spirit of a Prometheus rule's `expr`:
//!
//! ```text
//! status.phase == "Pending" and status.containerStatuses[*].restartCount > 3
//! metadata.labels['tier'] =~ "front.*" or not status.podIP
//! ```
//!
//! Operators: `==`, `!=`, `<`, `<=`, `>`, `>=` (numbers with numbers, strings with strings),
//! `=~`, `!~` (a regular expression matched against the whole string). A path that reaches
//! several values (`[*]`) holds when one of them compares true; `!=` and `!~` are the
//! negations of `==` and `=~` (so a missing field is `!=` any value). A path alone holds when
//! it reaches a value other than `null`, `false`, `""` and `0`.
//!
//! Entry point: [`Expr::parse`], then [`Expr::eval`]; [`Expr::paths`] lists the fields it
//! reads (for the alert's evidence and for validation).

use serde_json::Value;

use crate::model::FieldPath;

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Match,
    NoMatch,
}

/// A parsed condition.
#[derive(Debug, Clone)]
pub enum Expr {
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    /// A path alone: it reaches a truthy value.
    Truthy(FieldPath),
    Compare(FieldPath, Op, Literal),
}

/// The right-hand side of a comparison.
#[derive(Debug, Clone)]
pub enum Literal {
    Value(Value),
    Regex(regex::Regex),
}

/// Why an expression does not parse: where and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at character {at}: {message}")]
pub struct ExprError {
    pub at: usize,
    pub message: String,
}

impl Expr {
    pub fn parse(text: &str) -> Result<Expr, ExprError> {
        let mut p = Parser {
            chars: text.chars().collect(),
            at: 0,
        };
        let e = p.or()?;
        p.blanks();
        if p.at < p.chars.len() {
            return Err(p.fail("expected `and`, `or` or the end"));
        }
        Ok(e)
    }

    /// Whether the condition holds for `pod`.
    pub fn eval(&self, pod: &Value) -> bool {
        match self {
            Expr::And(a, b) => a.eval(pod) && b.eval(pod),
            Expr::Or(a, b) => a.eval(pod) || b.eval(pod),
            Expr::Not(e) => !e.eval(pod),
            Expr::Truthy(p) => p.select(pod).into_iter().any(truthy),
            Expr::Compare(p, op, lit) => {
                let values = p.select(pod);
                match op {
                    Op::Ne => !values.iter().any(|v| compare(v, Op::Eq, lit)),
                    Op::NoMatch => !values.iter().any(|v| compare(v, Op::Match, lit)),
                    _ => values.iter().any(|v| compare(v, *op, lit)),
                }
            }
        }
    }

    /// The paths it reads, in order of appearance.
    pub fn paths(&self) -> Vec<&FieldPath> {
        match self {
            Expr::And(a, b) | Expr::Or(a, b) => {
                let mut out = a.paths();
                out.extend(b.paths());
                out
            }
            Expr::Not(e) => e.paths(),
            Expr::Truthy(p) | Expr::Compare(p, _, _) => vec![p],
        }
    }
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::String(s) => !s.is_empty(),
        Value::Number(n) => n.as_f64() != Some(0.0),
        _ => true,
    }
}

fn compare(v: &Value, op: Op, lit: &Literal) -> bool {
    use std::cmp::Ordering::*;
    let lit = match lit {
        Literal::Regex(re) => {
            return op == Op::Match && v.as_str().is_some_and(|s| re.is_match(s));
        }
        Literal::Value(l) => l,
    };
    let order = match (v, lit) {
        (Value::Number(a), Value::Number(b)) => a
            .as_f64()
            .zip(b.as_f64())
            .and_then(|(a, b)| a.partial_cmp(&b)),
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        (a, b) => (a == b).then_some(Equal),
    };
    match (op, order) {
        (Op::Eq, o) => o == Some(Equal),
        (Op::Lt, Some(o)) => o == Less,
        (Op::Le, Some(o)) => o != Greater,
        (Op::Gt, Some(o)) => o == Greater,
        (Op::Ge, Some(o)) => o != Less,
        _ => false,
    }
}

struct Parser {
    chars: Vec<char>,
    at: usize,
}

impl Parser {
    fn fail(&self, message: &str) -> ExprError {
        ExprError {
            at: self.at,
            message: message.to_string(),
        }
    }

    fn blanks(&mut self) {
        while self.chars.get(self.at).is_some_and(|c| c.is_whitespace()) {
            self.at += 1;
        }
    }

    /// Takes `word` if it comes next as a whole word.
    fn keyword(&mut self, word: &str) -> bool {
        self.blanks();
        let end = self.at + word.len();
        let here: String = self.chars[self.at..end.min(self.chars.len())]
            .iter()
            .collect();
        let boundary = self
            .chars
            .get(end)
            .is_none_or(|c| c.is_whitespace() || *c == '(');
        if here == word && boundary {
            self.at = end;
            return true;
        }
        false
    }

    fn or(&mut self) -> Result<Expr, ExprError> {
        let mut e = self.and()?;
        while self.keyword("or") {
            e = Expr::Or(Box::new(e), Box::new(self.and()?));
        }
        Ok(e)
    }

    fn and(&mut self) -> Result<Expr, ExprError> {
        let mut e = self.unary()?;
        while self.keyword("and") {
            e = Expr::And(Box::new(e), Box::new(self.unary()?));
        }
        Ok(e)
    }

    fn unary(&mut self) -> Result<Expr, ExprError> {
        if self.keyword("not") {
            return Ok(Expr::Not(Box::new(self.unary()?)));
        }
        self.blanks();
        if self.chars.get(self.at) == Some(&'(') {
            self.at += 1;
            let e = self.or()?;
            self.blanks();
            if self.chars.get(self.at) != Some(&')') {
                return Err(self.fail("expected `)`"));
            }
            self.at += 1;
            return Ok(e);
        }
        self.comparison()
    }

    fn comparison(&mut self) -> Result<Expr, ExprError> {
        let start = self.at;
        let path = self.path_text();
        if path.is_empty() {
            return Err(self.fail("expected a field path, `not` or `(`"));
        }
        let path = FieldPath::parse(&path).map_err(|e| ExprError {
            at: start + e.at,
            message: e.message,
        })?;
        self.blanks();
        let Some(op) = self.op() else {
            return Ok(Expr::Truthy(path));
        };
        self.blanks();
        let lit_at = self.at;
        let value = self.literal()?;
        let lit = match op {
            Op::Match | Op::NoMatch => {
                let Value::String(s) = &value else {
                    return Err(ExprError {
                        at: lit_at,
                        message: "`=~` and `!~` take a quoted regular expression".into(),
                    });
                };
                // Anchored, as Prometheus anchors its label matchers.
                let re = regex::Regex::new(&format!("^(?:{s})$")).map_err(|e| ExprError {
                    at: lit_at,
                    message: format!("not a regular expression: {e}"),
                })?;
                Literal::Regex(re)
            }
            _ => Literal::Value(value),
        };
        Ok(Expr::Compare(path, op, lit))
    }

    /// A path runs to a blank, an operator or a parenthesis, except inside `[...]`.
    fn path_text(&mut self) -> String {
        let mut out = String::new();
        let mut bracket = false;
        while let Some(&c) = self.chars.get(self.at) {
            if !bracket && (c.is_whitespace() || "=!<>()".contains(c)) {
                break;
            }
            match c {
                '[' => bracket = true,
                ']' => bracket = false,
                _ => {}
            }
            out.push(c);
            self.at += 1;
        }
        out
    }

    fn op(&mut self) -> Option<Op> {
        for (text, op) in [
            ("==", Op::Eq),
            ("!=", Op::Ne),
            ("=~", Op::Match),
            ("!~", Op::NoMatch),
            ("<=", Op::Le),
            (">=", Op::Ge),
            ("<", Op::Lt),
            (">", Op::Gt),
        ] {
            let end = self.at + text.len();
            if end <= self.chars.len() && self.chars[self.at..end].iter().copied().eq(text.chars())
            {
                self.at = end;
                return Some(op);
            }
        }
        None
    }

    fn literal(&mut self) -> Result<Value, ExprError> {
        match self.chars.get(self.at).copied() {
            Some(q @ ('"' | '\'')) => {
                self.at += 1;
                let mut s = String::new();
                loop {
                    match self.chars.get(self.at).copied() {
                        None => return Err(self.fail("a string without its closing quote")),
                        Some('\\') => {
                            if let Some(&c) = self.chars.get(self.at + 1) {
                                s.push(c);
                            }
                            self.at += 2;
                        }
                        Some(c) if c == q => {
                            self.at += 1;
                            return Ok(Value::String(s));
                        }
                        Some(c) => {
                            s.push(c);
                            self.at += 1;
                        }
                    }
                }
            }
            _ => {
                let start = self.at;
                while self
                    .chars
                    .get(self.at)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || "+-.".contains(*c))
                {
                    self.at += 1;
                }
                let word: String = self.chars[start..self.at].iter().collect();
                match word.as_str() {
                    "true" => Ok(Value::Bool(true)),
                    "false" => Ok(Value::Bool(false)),
                    "null" => Ok(Value::Null),
                    w => serde_json::from_str::<serde_json::Number>(w)
                        .map(Value::Number)
                        .map_err(|_| ExprError {
                            at: start,
                            message: format!(
                                "expected a quoted string, a number, true, false or null, found `{w}`"
                            ),
                        }),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod() -> Value {
        json!({
            "metadata": {"name": "web-1", "labels": {"tier": "frontend", "app.kubernetes.io/name": "web"}},
            "status": {
                "phase": "Pending",
                "qosClass": "BestEffort",
                "containerStatuses": [{"name": "a", "restartCount": 1}, {"name": "b", "restartCount": 4}]
            }
        })
    }

    fn holds(text: &str) -> bool {
        Expr::parse(text)
            .unwrap_or_else(|e| panic!("{text}: {e}"))
            .eval(&pod())
    }

    #[test]
    fn comparisons_follow_their_operators() {
        assert!(holds(r#"status.phase == "Pending""#));
        assert!(holds(r#"status.phase != 'Running'"#));
        assert!(!holds(r#"status.phase == "Running""#));
        assert!(
            holds("status.containerStatuses[*].restartCount > 3"),
            "one of them"
        );
        assert!(!holds("status.containerStatuses[*].restartCount > 4"));
        assert!(holds("status.containerStatuses[0].restartCount <= 1"));
        assert!(holds(
            r#"metadata.labels['app.kubernetes.io/name'] =~ "we.*""#
        ));
        assert!(!holds(r#"metadata.labels.tier =~ "front""#), "anchored");
        assert!(holds(r#"metadata.labels.tier !~ "back.*""#));
        assert!(
            holds(r#"status.nominatedNodeName != "x""#),
            "missing is != anything"
        );
        assert!(
            !holds(r#"status.nominatedNodeName == null"#),
            "missing is not null"
        );
    }

    #[test]
    fn and_binds_tighter_than_or_and_parentheses_and_not_work() {
        assert!(holds(
            r#"status.phase == "Running" and status.qosClass == "Guaranteed" or status.phase == "Pending""#
        ));
        assert!(!holds(
            r#"status.phase == "Running" and (status.qosClass == "Guaranteed" or status.phase == "Pending")"#
        ));
        assert!(holds("not status.podIP"));
        assert!(holds("status.qosClass and not(status.podIP)"));
        let e = Expr::parse(r#"status.phase == "a" or metadata.name"#).expect("parses");
        let paths: Vec<&str> = e.paths().iter().map(|p| p.as_str()).collect();
        assert_eq!(paths, vec!["status.phase", "metadata.name"]);
    }

    #[test]
    fn bad_expressions_name_the_place_and_the_problem() {
        for (text, at, words) in [
            ("status.phase ==", 15, "expected a quoted string"),
            ("status.phase == Pending", 16, "expected a quoted string"),
            (r#"status.phase == "x" and"#, 23, "expected a field path"),
            (r#"(status.phase == "x""#, 20, "expected `)`"),
            (r#"status..phase == "x""#, 7, "field name"),
            (r#"status.phase =~ "(""#, 16, "regular expression"),
            (r#"status.phase == "x" extra"#, 20, "expected `and`"),
        ] {
            let e = Expr::parse(text).expect_err(text);
            assert_eq!(e.at, at, "{text}: {e}");
            assert!(e.message.contains(words), "{text}: {e}");
        }
    }
}
