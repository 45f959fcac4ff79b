//! Writes the timeline as one HTML file: the page's style and script inline, the data as a
//! JSON island the script reads, and a Content-Security-Policy that forbids any request, so
//! the file opens offline and cannot leak what it shows. Entry point: [`Timeline::write`].

use std::io::{self, Write};

use serde::Serialize;

use super::{Lane, Timeline, in_page_order};

/// What the header says about the replay.
#[derive(Debug, Clone, Serialize)]
pub struct Header {
    /// The topics read, as the command line named them.
    pub topic: String,
    /// The range as selected (`--since`, offsets), in words.
    pub range: String,
    /// `--verify`'s summary line and whether it passed.
    pub verdict: Option<(bool, String)>,
}

/// The data island.
#[derive(Serialize)]
struct Doc<'a> {
    header: &'a Header,
    counts: std::collections::BTreeMap<&'static str, u64>,
    /// The counts per cluster.
    clusters: std::collections::BTreeMap<String, std::collections::BTreeMap<&'static str, u64>>,
    /// The first and last event's time, in milliseconds.
    span: Option<(i64, i64)>,
    lanes: Vec<Lane>,
}

const STYLE: &str = include_str!("page.css");
const SCRIPT: &str = include_str!("page.js");

/// Nothing may be fetched: no `connect-src`, `img-src` only inline images, no forms.
const POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'";

impl Timeline {
    /// Writes the report to `out`.
    pub fn write(self, out: &mut dyn Write, header: &Header) -> io::Result<()> {
        let Timeline {
            lanes,
            clusters,
            span,
        } = self;
        let mut counts = std::collections::BTreeMap::new();
        for (ty, n) in clusters.values().flatten() {
            *counts.entry(*ty).or_default() += n;
        }
        let lanes = in_page_order(lanes);
        let title = escape(&format!("kubecast replay: {}", header.topic));
        write!(
            out,
            "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
             <meta http-equiv=\"Content-Security-Policy\" content=\"{POLICY}\">\n\
             <title>{title}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n\
             <noscript>This report needs JavaScript (inline, nothing is fetched).</noscript>\n\
             <script type=\"application/json\" id=\"timeline-data\">"
        )?;
        let doc = Doc {
            header,
            counts,
            clusters,
            span,
            lanes,
        };
        serde_json::to_writer(ScriptSafe(&mut *out), &doc).map_err(io::Error::other)?;
        write!(
            out,
            "</script>\n<script>\n{SCRIPT}</script>\n</body>\n</html>\n"
        )
    }
}

/// Writes the report of `timeline` to the file `path`.
pub fn write_file(timeline: Timeline, path: &std::path::Path, header: &Header) -> io::Result<()> {
    let mut out = io::BufWriter::new(std::fs::File::create(path)?);
    timeline.write(&mut out, header)?;
    out.flush()
}

/// Text for HTML.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Writes JSON into a `<script>` element: every `<` becomes `\u003c`, so no `</script>` or
/// `<!--` in the data can end the element. In JSON a `<` can only be inside a string, where
/// the escape means the same character.
struct ScriptSafe<'a>(&'a mut dyn Write);

impl Write for ScriptSafe<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut rest = buf;
        while let Some(at) = rest.iter().position(|&b| b == b'<') {
            self.0.write_all(&rest[..at])?;
            self.0.write_all(b"\\u003c")?;
            rest = &rest[at + 1..];
        }
        self.0.write_all(rest)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}
