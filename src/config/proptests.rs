//! Property tests of the config loader: arbitrary text, damaged valid configs and arbitrary
//! environment overrides never panic it, and every rejection names the file or the variable
//! and what is wrong.

use proptest::prelude::*;

use super::load_str;

const VALID: &str = "cluster: local
watch:
  namespaces: [a, b]
  label_selector: app=web
  page_size: 500
encoding:
  data: full
  redact: {env_values: true}
state:
  dir: /var/lib/kubecast
  fsync: interval
sinks:
  kafka:
    type: kafka
    brokers: 127.0.0.1:19092
    topic: 'k8s.{cluster}.pods'
    queue: {events: 10, bytes: 4096, when_full: coalesce}
    dead_letter: {topic: dead}
    librdkafka: {linger.ms: '5'}
  edge:
    type: mqtt
    url: mqtt://127.0.0.1:11883
    retain: true
    dead_letter: {file: /tmp/dead}
";

/// Ways to damage the valid config.
#[derive(Debug, Clone)]
enum Damage {
    Truncate(usize),
    Flip(usize, char),
    Insert(usize, String),
    /// A key given twice.
    DuplicateKey,
    /// A value nested very deep.
    Nest(usize),
    /// A number no integer type holds.
    HugeNumber,
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        any::<usize>().prop_map(Damage::Truncate),
        (any::<usize>(), any::<char>()).prop_map(|(i, c)| Damage::Flip(i, c)),
        (any::<usize>(), "[ -~\n\t]{1,12}").prop_map(|(i, s)| Damage::Insert(i, s)),
        Just(Damage::DuplicateKey),
        (1usize..5_000).prop_map(Damage::Nest),
        Just(Damage::HugeNumber),
    ]
}

/// The char boundary at or before `i` (mod the length).
fn boundary(s: &str, i: usize) -> usize {
    let mut i = i % (s.len() + 1);
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn apply(d: &Damage) -> String {
    let mut s = VALID.to_string();
    match d {
        Damage::Truncate(i) => s.truncate(boundary(&s, *i)),
        Damage::Flip(i, c) => {
            let at = boundary(&s, *i).min(s.len() - 1);
            let at = boundary(&s, at);
            let end = at + s[at..].chars().next().map_or(0, char::len_utf8);
            s.replace_range(at..end, &c.to_string());
        }
        Damage::Insert(i, text) => {
            let at = boundary(&s, *i);
            s.insert_str(at, text);
        }
        Damage::DuplicateKey => {
            s = s.replacen("cluster: local\n", "cluster: local\ncluster: other\n", 1)
        }
        Damage::Nest(depth) => {
            s = s.replacen(
                "page_size: 500",
                &format!("page_size: {}500{}", "[".repeat(*depth), "]".repeat(*depth)),
                1,
            )
        }
        Damage::HugeNumber => {
            s = s.replacen(
                "page_size: 500",
                "page_size: 99999999999999999999999999999",
                1,
            )
        }
    }
    s
}

fn no_vars() -> Vec<(String, String)> {
    Vec::new()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_text_is_a_config_or_an_error_naming_the_file(text in "\\PC{0,300}") {
        match load_str("cfg.yaml", &text, no_vars()) {
            Ok(c) => { let _ = c.validate(); }
            Err(e) => {
                let m = crate::error_chain(&e);
                prop_assert!(m.contains("cfg.yaml") && m.len() > "cfg.yaml: ".len(), "{m}");
            }
        }
    }

    #[test]
    fn a_damaged_config_is_loaded_or_rejected_with_the_file_and_the_problem(d in damage()) {
        let text = apply(&d);
        match load_str("cfg.yaml", &text, no_vars()) {
            Ok(c) => {
                if let Err(e) = c.validate() {
                    prop_assert!(!e.issues.is_empty());
                    for i in &e.issues {
                        prop_assert!(!i.field.is_empty() && !i.message.is_empty(), "{i:?}");
                    }
                }
            }
            Err(e) => {
                let m = crate::error_chain(&e);
                prop_assert!(m.contains("cfg.yaml") && m.len() > "cfg.yaml: ".len(), "{m}");
            }
        }
    }

    #[test]
    fn an_arbitrary_environment_override_applies_or_is_an_error_naming_the_variable(
        path in proptest::collection::vec("[A-Z_]{1,12}", 1..4),
        value in "\\PC{0,40}",
    ) {
        let var = format!("KUBECAST_{}", path.join("__"));
        match load_str("cfg.yaml", VALID, vec![(var.clone(), value)]) {
            Ok(c) => { let _ = c.validate(); }
            Err(e) => {
                let m = crate::error_chain(&e);
                prop_assert!(
                    m.contains(&var) || var.starts_with("KUBECAST_STACK_") || var.starts_with("KUBECAST_TEST_"),
                    "{m}"
                );
            }
        }
    }
}

#[test]
fn the_valid_config_of_these_tests_is_valid() {
    let c = load_str("cfg.yaml", VALID, no_vars()).unwrap();
    if let Err(e) = c.validate() {
        panic!("{e}");
    }
}
