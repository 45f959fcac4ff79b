//! Kubernetes label selectors as users write them (`app=web,tier in (a,b),!canary`),
//! parsed into kube's [`Selector`] (which matches a pod's labels and prints the string the
//! apiserver takes). The grammar is apimachinery's: requirements separated by commas, each
//! `key`, `!key`, `key=value`, `key==value`, `key!=value`, `key in (v,...)` or
//! `key notin (v,...)`; keys are qualified names (an optional DNS subdomain prefix and `/`),
//! values are label values (at most 63 characters, possibly empty). Entry point: [`parse`].

use std::collections::BTreeSet;

use kube::core::{Expression, Selector};

/// Why a selector does not parse: where (a character offset) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at character {at}: {message}")]
pub struct SelectorError {
    pub at: usize,
    pub message: String,
}

/// Parses `text`; the empty selector selects every pod.
pub fn parse(text: &str) -> Result<Selector, SelectorError> {
    let mut p = Parser {
        chars: text.chars().collect(),
        at: 0,
    };
    let mut exprs = Vec::new();
    p.skip_space();
    if p.at == p.chars.len() {
        return Ok(Selector::from_iter(exprs));
    }
    loop {
        exprs.push(p.requirement()?);
        p.skip_space();
        match p.next() {
            None => return Ok(Selector::from_iter(exprs)),
            Some(',') => {}
            c @ Some(found) => {
                return Err(p.error_at(c, format!("expected `,` or the end, found `{found}`")));
            }
        }
    }
}

struct Parser {
    chars: Vec<char>,
    at: usize,
}

impl Parser {
    fn error(&self, message: impl Into<String>) -> SelectorError {
        SelectorError {
            at: self.at,
            message: message.into(),
        }
    }

    /// An error about `taken`, the character just taken (`None`: the end of the text).
    fn error_at(&self, taken: Option<char>, message: String) -> SelectorError {
        SelectorError {
            at: if taken.is_some() {
                self.at - 1
            } else {
                self.at
            },
            message,
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    fn next(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.at += 1;
        Some(c)
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.at += 1;
        }
    }

    /// A run of characters that may be part of a key or value.
    fn word(&mut self) -> String {
        let start = self.at;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
        {
            self.at += 1;
        }
        self.chars[start..self.at].iter().collect()
    }

    fn requirement(&mut self) -> Result<Expression, SelectorError> {
        self.skip_space();
        if self.peek() == Some('!') {
            self.at += 1;
            self.skip_space();
            let key = self.key()?;
            return Ok(Expression::DoesNotExist(key));
        }
        let key = self.key()?;
        self.skip_space();
        match self.peek() {
            None | Some(',') => Ok(Expression::Exists(key)),
            Some('=') => {
                self.at += 1;
                if self.peek() == Some('=') {
                    self.at += 1;
                }
                Ok(Expression::Equal(key, self.value()?))
            }
            Some('!') => {
                self.at += 1;
                let c = self.next();
                if c != Some('=') {
                    return Err(self.error_at(c, "expected `!=`".into()));
                }
                Ok(Expression::NotEqual(key, self.value()?))
            }
            Some(_) => {
                let start = self.at;
                let op = self.word();
                let set = match op.as_str() {
                    "in" | "notin" => self.set()?,
                    _ => {
                        self.at = start;
                        return Err(self.error(format!(
                            "expected `=`, `==`, `!=`, `in` or `notin` after key `{key}`"
                        )));
                    }
                };
                Ok(if op == "in" {
                    Expression::In(key, set)
                } else {
                    Expression::NotIn(key, set)
                })
            }
        }
    }

    fn key(&mut self) -> Result<String, SelectorError> {
        let start = self.at;
        let key = self.word();
        if key.is_empty() {
            return Err(self.error("expected a label key"));
        }
        check_key(&key).map_err(|m| SelectorError {
            at: start,
            message: m,
        })?;
        Ok(key)
    }

    fn value(&mut self) -> Result<String, SelectorError> {
        self.skip_space();
        let start = self.at;
        let value = self.word();
        check_value(&value).map_err(|m| SelectorError {
            at: start,
            message: m,
        })?;
        Ok(value)
    }

    /// `( v, ... )`, at least one value.
    fn set(&mut self) -> Result<BTreeSet<String>, SelectorError> {
        self.skip_space();
        let c = self.next();
        if c != Some('(') {
            return Err(self.error_at(c, "expected `(` to open the set of values".into()));
        }
        let mut values = BTreeSet::new();
        loop {
            let v = self.value()?;
            self.skip_space();
            values.insert(v);
            match self.next() {
                Some(',') => {}
                Some(')') => break,
                c => {
                    let message = "expected `,` or `)` in the set of values".to_string();
                    return Err(self.error_at(c, message));
                }
            }
        }
        if values.iter().all(String::is_empty) && values.len() == 1 {
            return Err(SelectorError {
                at: self.at - 2,
                message: "the set of values is empty".into(),
            });
        }
        Ok(values)
    }
}

/// A qualified name: `[prefix/]name`, the prefix a DNS subdomain of at most 253 characters.
fn check_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix
        && (p.len() > 253 || !p.split('.').all(crate::vocab::is_dns_label))
    {
        return Err(format!(
            "`{p}` in key `{key}` is not a DNS subdomain prefix"
        ));
    }
    if name.is_empty() || name.len() > 63 || !name_chars(name) {
        return Err(format!(
            "key `{key}`: the name must be 1 to 63 of [A-Za-z0-9-_.], beginning and ending alphanumeric"
        ));
    }
    Ok(())
}

/// A label value: empty, or up to 63 of [A-Za-z0-9-_.] beginning and ending alphanumeric.
fn check_value(value: &str) -> Result<(), String> {
    if value.is_empty() || (value.len() <= 63 && name_chars(value)) {
        Ok(())
    } else {
        Err(format!(
            "`{value}` is not a label value (up to 63 of [A-Za-z0-9-_.], beginning and ending alphanumeric)"
        ))
    }
}

fn name_chars(s: &str) -> bool {
    let b = s.as_bytes();
    b.iter()
        .all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(c))
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kube::core::SelectorExt;
    use proptest::prelude::*;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn every_operator_selects_as_kubernetes_does() {
        let pod = labels(&[("app", "web"), ("tier", "front"), ("example.com/team", "a")]);
        for (selector, selected) in [
            ("", true),
            ("app", true),
            ("!app", false),
            ("!canary", true),
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app != db", true),
            ("tier in (front, back)", true),
            ("tier notin (front)", false),
            ("missing notin (x)", true),
            ("missing in (x)", false),
            ("example.com/team=a, app in (web), !canary", true),
            ("app=web,tier=back", false),
        ] {
            let s = parse(selector).unwrap_or_else(|e| panic!("`{selector}`: {e}"));
            assert_eq!(s.matches(&pod), selected, "`{selector}`");
        }
    }

    #[test]
    fn bad_selectors_name_the_place_and_the_problem() {
        for (selector, at, words) in [
            ("app=", 4, ""),
            ("app in (a,", 10, "`,` or `)`"),
            ("app in a", 7, "`(`"),
            ("app like x", 4, "`in` or `notin`"),
            ("Bad_/x=y", 0, "DNS subdomain"),
            ("app=-web", 4, "label value"),
            (",app", 0, "label key"),
            ("app=web;", 7, "`,` or the end"),
            ("app in ()", 7, "empty"),
        ] {
            match parse(selector) {
                Ok(s) if words.is_empty() => {
                    // `app=` is an empty value, which Kubernetes allows.
                    assert_eq!(s.to_string(), "app=", "`{selector}`");
                }
                Ok(s) => panic!("`{selector}` parsed as `{s}`"),
                Err(e) => {
                    assert_eq!(e.at, at, "`{selector}`: {e}");
                    assert!(e.message.contains(words), "`{selector}`: {e}");
                }
            }
        }
    }

    fn key() -> impl Strategy<Value = String> {
        "([a-z]{1,5}\\.)?[a-z]{1,5}/?[A-Za-z][A-Za-z0-9._-]{0,5}[a-z]"
            .prop_filter("a qualified name", |k| check_key(k).is_ok())
    }

    fn value() -> impl Strategy<Value = String> {
        "([A-Za-z0-9]([A-Za-z0-9._-]{0,6}[A-Za-z0-9])?)?"
    }

    fn expression() -> impl Strategy<Value = Expression> {
        prop_oneof![
            key().prop_map(Expression::Exists),
            key().prop_map(Expression::DoesNotExist),
            (key(), value()).prop_map(|(k, v)| Expression::Equal(k, v)),
            (key(), value()).prop_map(|(k, v)| Expression::NotEqual(k, v)),
            (key(), prop::collection::btree_set("[a-z0-9]{1,4}", 1..4))
                .prop_map(|(k, v)| Expression::In(k, v)),
            (key(), prop::collection::btree_set("[a-z0-9]{1,4}", 1..4))
                .prop_map(|(k, v)| Expression::NotIn(k, v)),
        ]
    }

    proptest! {
        #[test]
        fn what_kube_prints_parses_back_to_the_same_selector(
            exprs in prop::collection::vec(expression(), 1..5)
        ) {
            let selector = Selector::from_iter(exprs);
            let text = selector.to_string();
            let parsed = parse(&text).map_err(|e| TestCaseError::fail(format!("`{text}`: {e}")))?;
            prop_assert_eq!(parsed.to_string(), text);
        }

        #[test]
        fn arbitrary_text_is_parsed_or_refused_without_panicking(text in ".{0,40}") {
            if let Err(e) = parse(&text) {
                prop_assert!(e.at <= text.chars().count());
            }
        }
    }
}
