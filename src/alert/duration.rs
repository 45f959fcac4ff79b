//! Durations as Prometheus writes them (`500ms`, `30s`, `5m`, `1h30m`, `1d`): parsed from the
//! config and the command line ([`parse_duration`], [`duration`] for a config field) and written
//! back ([`show_duration`], in alert evidence).

use crate::vocab::Issue;

/// Parses a Prometheus-style duration (`500ms`, `30s`, `5m`, `1h30m`, `1d`) into milliseconds;
/// a bad one is reported at `field`.
pub fn duration(text: &str, field: &str, issues: &mut Vec<Issue>) -> i64 {
    match parse_duration(text) {
        Some(ms) => ms,
        None => {
            issues.push(Issue::new(
                field,
                format!("`{text}` is not a duration (such as `30s`, `5m`, `1h30m`)"),
            ));
            0
        }
    }
}

/// A Prometheus-style duration in milliseconds; `None` when `text` is not one.
pub fn parse_duration(text: &str) -> Option<i64> {
    let mut total: i64 = 0;
    let mut rest = text;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let n: i64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, ms) = [
            ("ms", 1),
            ("s", 1_000),
            ("m", 60_000),
            ("h", 3_600_000),
            ("d", 86_400_000),
        ]
        .into_iter()
        .find(|(u, _)| rest.starts_with(u) && !(*u == "m" && rest.starts_with("ms")))?;
        rest = &rest[unit.len()..];
        total = total.checked_add(n.checked_mul(ms)?)?;
    }
    Some(total)
}

/// A duration in milliseconds as Prometheus writes one (`10m`, `1h30m`, `2s500ms`, `0s`).
pub fn show_duration(ms: i64) -> String {
    if ms <= 0 {
        return "0s".into();
    }
    let mut out = String::new();
    let mut rest = ms;
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ] {
        if rest >= size {
            out.push_str(&format!("{}{unit}", rest / size));
            rest %= size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_prometheus_ones() {
        for (t, ms) in [
            ("0s", Some(0)),
            ("500ms", Some(500)),
            ("30s", Some(30_000)),
            ("5m", Some(300_000)),
            ("1h30m", Some(5_400_000)),
            ("1d", Some(86_400_000)),
            ("5", None),
            ("m", None),
            ("", None),
            ("5x", None),
        ] {
            assert_eq!(parse_duration(t), ms, "{t}");
        }
    }

    #[test]
    fn durations_are_written_as_prometheus_writes_them() {
        for (ms, text) in [
            (0, "0s"),
            (600_000, "10m"),
            (5_400_000, "1h30m"),
            (2_500, "2s500ms"),
        ] {
            assert_eq!(show_duration(ms), text);
        }
    }
}
