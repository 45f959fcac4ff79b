//! URLs as kubecast shows them, and the credentials a URL carries. Webhook URLs carry tokens
//! in their query (`?code=`, `?token=`) and passwords in their userinfo, so no log line,
//! metric label, readiness reason or error message holds a URL as written: [`shown`] keeps the
//! scheme, host, port and path and writes `?…` for a query. [`userinfo`] takes a URL's user
//! and password out of it (for basic authentication, as curl does).

/// `text` (a URL, or what was meant as one) without userinfo, with `?…` for its query and
/// without its fragment.
pub fn shown(text: &str) -> String {
    let (base, query) = match text.split_once('?') {
        Some((base, _)) => (base, true),
        None => (text, false),
    };
    let base = base.split_once('#').map_or(base, |(b, _)| b);
    let (scheme, rest) = match base.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, base),
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let mut out = String::with_capacity(text.len());
    if let Some(scheme) = scheme {
        out.push_str(scheme);
        out.push_str("://");
    }
    out.push_str(host);
    out.push_str(path);
    if query {
        out.push_str("?…");
    }
    out
}

/// `uri` without its userinfo, and the user and password it held (percent-decoded; the
/// password empty when there is none).
pub fn userinfo(uri: &http::Uri) -> (http::Uri, Option<(String, String)>) {
    let Some((info, host)) = uri.authority().and_then(|a| a.as_str().rsplit_once('@')) else {
        return (uri.clone(), None);
    };
    let (user, password) = info.split_once(':').unwrap_or((info, ""));
    let credentials = (decode(user), decode(password));
    let mut parts = uri.clone().into_parts();
    match host.parse::<http::uri::Authority>() {
        Ok(a) => parts.authority = Some(a),
        // The host part of a parsed authority parses on its own.
        Err(_) => return (uri.clone(), Some(credentials)),
    }
    (
        http::Uri::from_parts(parts).unwrap_or_else(|_| uri.clone()),
        Some(credentials),
    )
}

/// Percent-decoding (`%40` is `@`); a `%` not followed by two hex digits stays as it is.
pub(crate) fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shown_url_has_no_userinfo_query_or_fragment() {
        let cases = [
            (
                "https://user:p%40ss@events.example:8443/ingest?code=s3cr3t&x=1#frag",
                "https://events.example:8443/ingest?…",
            ),
            (
                "http://events.example/ingest",
                "http://events.example/ingest",
            ),
            (
                "https://tok@hooks.example?token=abc",
                "https://hooks.example?…",
            ),
            ("user:pass@host/path", "host/path"),
            ("http://[::1]:80/a@b", "http://[::1]:80/a@b"),
            ("", ""),
        ];
        for (text, want) in cases {
            assert_eq!(shown(text), want, "{text}");
        }
    }

    #[test]
    fn userinfo_is_taken_out_of_the_url_and_decoded() {
        let uri: http::Uri = "https://alice:p%40ss%3Aword@events.example:8443/in?x=1"
            .parse()
            .expect("a URL");
        let (clean, creds) = userinfo(&uri);
        assert_eq!(clean.to_string(), "https://events.example:8443/in?x=1");
        assert_eq!(creds, Some(("alice".to_string(), "p@ss:word".to_string())));
        let plain: http::Uri = "http://events.example/".parse().expect("a URL");
        assert_eq!(userinfo(&plain), (plain.clone(), None));
        let user_only: http::Uri = "http://bob@events.example/".parse().expect("a URL");
        assert_eq!(
            userinfo(&user_only).1,
            Some(("bob".to_string(), String::new()))
        );
        assert_eq!(decode("50%"), "50%");
    }
}
