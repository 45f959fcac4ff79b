//! Property tests of the watch's input: arbitrary and mutated bytes fed to the watch-line and
//! list-page parsers, and to a watch response. Nothing panics, every rejection is an error
//! that says what is wrong, and a line that cannot be read never moves the resume position.

use bytes::Bytes;
use proptest::prelude::*;

use super::parse::{parse_list_page, parse_watch_line};
use super::stream::{LineOutcome, Stream};

const POD: &str = r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"ns","uid":"u-1","resourceVersion":"17","labels":{"a":"b"}},"spec":{"containers":[{"name":"c","image":"i"}]},"status":{"phase":"Running"}}"#;

fn line(kind: &str, rv: u32) -> String {
    let pod = POD.replace("\"17\"", &format!("\"{rv}\""));
    format!(r#"{{"type":"{kind}","object":{pod}}}"#)
}

fn bookmark(rv: u32) -> String {
    format!(
        r#"{{"type":"BOOKMARK","object":{{"kind":"Pod","metadata":{{"resourceVersion":"{rv}"}}}}}}"#
    )
}

/// Ways to damage a valid line.
#[derive(Debug, Clone)]
enum Damage {
    Truncate(usize),
    /// Overwrite a byte (may make invalid UTF-8).
    Flip(usize, u8),
    /// Insert bytes at a position.
    Insert(usize, Vec<u8>),
    /// Repeat `"metadata":` so the key appears twice.
    DuplicateKey,
    /// Wrap the object deep in arrays.
    Nest(usize),
    /// Replace the resourceVersion by a huge number.
    HugeNumber,
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        any::<usize>().prop_map(Damage::Truncate),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Damage::Flip(i, b)),
        (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(i, b)| Damage::Insert(i, b)),
        Just(Damage::DuplicateKey),
        (1usize..20_000).prop_map(Damage::Nest),
        Just(Damage::HugeNumber),
    ]
}

fn apply(text: &str, d: &Damage) -> Vec<u8> {
    let mut b = text.as_bytes().to_vec();
    match d {
        Damage::Truncate(i) => b.truncate(i % b.len()),
        Damage::Flip(i, x) => {
            let i = i % b.len();
            b[i] = *x;
        }
        Damage::Insert(i, bytes) => {
            let i = i % (b.len() + 1);
            b.splice(i..i, bytes.iter().copied());
        }
        Damage::DuplicateKey => {
            b = text
                .replacen(
                    r#""metadata":{"#,
                    r#""metadata":{"name":"x"},"metadata":{"#,
                    1,
                )
                .into_bytes()
        }
        Damage::Nest(depth) => {
            let mut s = String::with_capacity(text.len() + 2 * depth);
            s.push_str(&"[".repeat(*depth));
            s.push_str(text);
            s.push_str(&"]".repeat(*depth));
            b = s.into_bytes();
        }
        Damage::HugeNumber => {
            b = text
                .replacen(
                    r#""resourceVersion":"17""#,
                    r#""resourceVersion":1e999999"#,
                    1,
                )
                .into_bytes()
        }
    }
    b
}

/// One line of a response: valid, or damaged.
#[derive(Debug, Clone)]
enum Input {
    Good(String),
    Bad(String, Damage),
    Noise(Vec<u8>),
}

fn input() -> impl Strategy<Value = Input> {
    let good = prop_oneof![
        (1u32..1000).prop_map(|rv| line("ADDED", rv)),
        (1u32..1000).prop_map(|rv| line("MODIFIED", rv)),
        (1u32..1000).prop_map(|rv| line("DELETED", rv)),
        (1u32..1000).prop_map(bookmark),
    ];
    prop_oneof![
        3 => good.clone().prop_map(Input::Good),
        3 => (good, damage()).prop_map(|(g, d)| Input::Bad(g, d)),
        1 => proptest::collection::vec(any::<u8>(), 0..256).prop_map(Input::Noise),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic_the_parsers_and_errors_say_what_is_wrong(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        if let Err(e) = parse_watch_line(Bytes::from(bytes.clone())) {
            prop_assert!(!crate::error_chain(&e).is_empty());
        }
        if let Err(e) = parse_list_page(Bytes::from(bytes)) {
            prop_assert!(!crate::error_chain(&e).is_empty());
        }
    }

    #[test]
    fn damaged_list_pages_are_errors_or_keep_only_whole_pods(d in damage()) {
        let body = format!(r#"{{"kind":"PodList","metadata":{{"resourceVersion":"50"}},"items":[{POD},{POD}]}}"#);
        match parse_list_page(Bytes::from(apply(&body, &d))) {
            Ok((page, bad)) => {
                prop_assert!(page.objects.len() + bad.len() <= 2);
                for p in &page.objects {
                    prop_assert!(!p.uid.is_empty() && !p.rv.is_empty());
                }
            }
            Err(e) => {
                let text = crate::error_chain(&e);
                prop_assert!(
                    text.contains("JSON") || text.contains("UTF-8") || text.contains("has no"),
                    "unclear error: {text}"
                );
            }
        }
    }

    #[test]
    fn a_line_that_cannot_be_read_never_moves_the_resume_position(
        start in proptest::option::of(1u32..1000),
        lines in proptest::collection::vec(input(), 1..40),
    ) {
        let mut position = start.map(|rv| rv.to_string());
        let mut stream = Stream::new(crate::classify::Scope::all_pods(), &mut position, false);
        let mut expected = start.map(|rv| rv.to_string());
        for l in lines {
            let bytes = match &l {
                Input::Good(t) => t.clone().into_bytes(),
                Input::Bad(t, d) => apply(t, d),
                Input::Noise(b) => b.clone(),
            };
            let outcome = stream.on_line(Bytes::from(bytes));
            match outcome {
                LineOutcome::Skipped(e) => {
                    prop_assert!(!crate::error_chain(&e).is_empty());
                }
                LineOutcome::Emit(super::Observed::Applied { object: pod, .. } | super::Observed::Deleted { object: pod, .. }) => {
                    expected = Some(pod.rv.clone());
                }
                LineOutcome::Emit(super::Observed::Bookmark { rv, .. }) => expected = Some(rv),
                LineOutcome::Emit(other) => prop_assert!(false, "a plain watch emitted {other:?}"),
                LineOutcome::Nothing | LineOutcome::Gone | LineOutcome::Failed { .. } => {}
            }
            // What the stream holds is exactly what the last line passed on says.
            let held: Option<String> = stream_position(&stream);
            prop_assert_eq!(held, expected.clone());
        }
    }
}

fn stream_position(s: &Stream<'_>) -> Option<String> {
    s.position().map(str::to_string)
}
