//! Headless Chromium (Debian's `chromium`) for pages that must stay on this machine: no
//! background requests, and no host name resolves to anything, so nothing could leave even if
//! a page asked. Entry point: [`chromium`].

use std::path::Path;
use std::process::{Command, Output};

/// Runs headless Chromium on `url` with its profile in `profile` and `extra` flags
/// (`--dump-dom`, `--screenshot=...`); an error when Chromium cannot be started.
pub fn chromium(profile: &Path, extra: &[&str], url: &str) -> std::io::Result<Output> {
    Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--host-resolver-rules=MAP * ~NOTFOUND",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .output()
}
