//! A report page (`kubecast replay --html`) opened in headless Chromium and read back: its
//! DOM after the script ran, with the console checked for requests and script errors;
//! screenshots; the elements, attributes and table rows the tests look at. Entry point:
//! [`open`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What headless Chromium printed for `url`: the DOM after the page's script ran, and its
/// log (console messages included).
pub struct Opened {
    pub dom: String,
    pub log: String,
}

/// Headless Chromium with the page's console on stderr, virtual time to let its script
/// finish, and a fixed window.
pub fn chromium(profile: &Path, extra: &[&str], url: &str) -> std::process::Output {
    let mut flags = vec![
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=5000",
        "--window-size=1400,900",
    ];
    flags.extend_from_slice(extra);
    super::browser::chromium(profile, &flags, url)
        .expect("running chromium (Debian's package; scripts/test installs it)")
}

pub fn open(dir: &Path, file: &Path, fragment: &str) -> Opened {
    let url = format!("file://{}#{fragment}", file.display());
    let out = chromium(&dir.join("chromium-profile"), &["--dump-dom"], &url);
    let opened = Opened {
        dom: String::from_utf8_lossy(&out.stdout).into_owned(),
        log: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        out.status.success() && opened.dom.contains("data-ready=\"true\""),
        "the page did not finish drawing ({:?}):\n{}",
        out.status,
        opened.log
    );
    for bad in ["Content Security Policy", "Uncaught", "net::ERR_"] {
        assert!(
            !opened.log.contains(bad),
            "the page logged `{bad}` (a request or a script error):\n{}",
            opened.log
        );
    }
    opened
}

/// A screenshot of `file#fragment` in `target/test-artifacts/NAME.png`.
pub fn screenshot(dir: &Path, file: &Path, fragment: &str, name: &str) -> PathBuf {
    let artifacts = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/test-artifacts");
    std::fs::create_dir_all(&artifacts).expect("the artifacts directory");
    let png = artifacts.join(format!("{name}.png"));
    let shot = format!("--screenshot={}", png.display());
    let url = format!("file://{}#{fragment}", file.display());
    let out = chromium(&dir.join("chromium-shots"), &[&shot], &url);
    let bytes = std::fs::read(&png).unwrap_or_else(|e| {
        panic!(
            "no screenshot {} ({e}):\n{}",
            png.display(),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(
        bytes.starts_with(b"\x89PNG"),
        "{} is not a PNG",
        png.display()
    );
    png
}

/// The elements of `dom` that open with `<TAG` and carry `class="CLASS..."`: their attributes.
pub fn elements(dom: &str, tag: &str, class: &str) -> Vec<BTreeMap<String, String>> {
    let open = format!("<{tag} ");
    let mut out = Vec::new();
    for piece in dom.split(&open).skip(1) {
        let head = &piece[..piece.find('>').unwrap_or(piece.len())];
        let attrs = attributes(head);
        if attrs
            .get("class")
            .is_some_and(|c| c.split(' ').next() == Some(class))
        {
            out.push(attrs);
        }
    }
    out
}

fn attributes(head: &str) -> BTreeMap<String, String> {
    let mut attrs = BTreeMap::new();
    let mut rest = head;
    while let Some(eq) = rest.find("=\"") {
        let name = rest[..eq].trim().to_string();
        let after = &rest[eq + 2..];
        let end = after.find('"').unwrap_or(after.len());
        attrs.insert(name, unescape(&after[..end]));
        rest = &after[(end + 1).min(after.len())..];
    }
    attrs
}

fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// The text of each cell of each `<tr class="CLASS">` of `dom`.
pub fn rows(dom: &str, class: &str) -> Vec<Vec<String>> {
    let marker = format!("<tr class=\"{class}\"");
    dom.split(&marker)
        .skip(1)
        .map(|piece| {
            let row = &piece[..piece.find("</tr>").unwrap_or(piece.len())];
            row.split("<td>")
                .skip(1)
                .map(|c| unescape(&c[..c.find("</td>").unwrap_or(c.len())]))
                .collect()
        })
        .collect()
}
