//! The initial list at the peak: each bridge started afresh, alone, on the full cluster, and
//! what its list cost it and the apiserver.

use std::path::Path;
use std::time::Instant;

use super::support::Stack;
use super::watch::Peaks;
use super::{RESOURCES, cpu};

/// One bridge's initial list.
pub struct List {
    pub bridge: &'static str,
    pub secs: f64,
    /// The bridge's CPU seconds and peak resident memory (MiB) until it was ready.
    pub cpu: f64,
    pub rss: f64,
    /// The apiserver's CPU seconds and peak resident memory (MiB) meanwhile.
    pub api_cpu: f64,
    pub api_rss: f64,
    /// LIST requests completed and WATCH requests open, for the watched resources.
    pub lists: f64,
    pub watches: f64,
    pub streamed: String,
}

/// The watched resources' sum of `metric` for `verb` in the apiserver's /metrics.
async fn count(client: &kube::Client, metric: &str, verb: &str) -> f64 {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("a request");
    let text = client.request_text(req).await.unwrap_or_default();
    let verb = format!("verb=\"{verb}\"");
    text.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")) && l.contains(&verb))
        .filter(|l| {
            RESOURCES
                .iter()
                .any(|(_, r)| l.contains(&format!("resource=\"{r}\",")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Starts kubecast (as it runs in the bench; with paginated lists; with the bench's
/// namespaces listed), then the baseline, each afresh and alone, and measures each list.
pub async fn measure(
    stack: &Stack,
    client: &kube::Client,
    dir: &Path,
    prefix: &str,
    peaks: &Peaks,
    apiserver: u32,
    namespaces: &[&str],
) -> Vec<List> {
    let mut unique: Vec<&str> = namespaces.to_vec();
    unique.sort_unstable();
    unique.dedup();
    let listed = format!("  namespaces: [{}]\n", unique.join(", "));
    let bridges: [(&'static str, String); 4] = [
        ("kubecast", String::new()),
        (
            "kubecast, `streaming_list: off`",
            "  streaming_list: off\n".into(),
        ),
        ("kubecast, the namespaces listed", listed),
        ("baseline (client-go)", String::new()),
    ];
    let mut out = Vec::new();
    for (i, (bridge, watch)) in bridges.into_iter().enumerate() {
        let lists = count(client, "apiserver_request_total", "LIST").await;
        let watches = count(client, "apiserver_longrunning_requests", "WATCH").await;
        let api_cpu = cpu(apiserver);
        peaks.take(apiserver);
        let started = Instant::now();
        let kubecast = bridge.starts_with("kubecast");
        let (mut child, log) = if kubecast {
            super::kubecast(stack, dir, &format!("{prefix}-list{i}"), &watch)
        } else {
            super::baseline(stack, dir, &format!("{prefix}-list-baseline"))
        };
        // kubecast says "list complete" once per scope: per namespace for the namespaced
        // resources when namespaces are listed.
        let (ready, n) = if !kubecast {
            ("synced", 1)
        } else if watch.contains("namespaces") {
            ("list complete", 1 + (RESOURCES.len() - 1) * unique.len())
        } else {
            ("list complete", RESOURCES.len())
        };
        let pid = child.id().expect("the bridge's pid");
        peaks.watch(pid);
        super::wait_for_text(&log, ready, n, &mut child).await;
        let secs = started.elapsed().as_secs_f64();
        let own = cpu(pid);
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let streamed = if kubecast {
            format!(
                "{} of {n} streamed",
                text.matches("list complete (streamed)").count()
            )
        } else {
            "see LISTs".into()
        };
        let list = List {
            bridge,
            secs,
            cpu: own,
            rss: peaks.take(pid),
            api_cpu: cpu(apiserver) - api_cpu,
            api_rss: peaks.take(apiserver),
            lists: count(client, "apiserver_request_total", "LIST").await - lists,
            watches: count(client, "apiserver_longrunning_requests", "WATCH").await - watches,
            streamed,
        };
        eprintln!(
            "scale: {bridge}'s list: {secs:.1} s, {} LISTs, {} WATCHes",
            list.lists, list.watches
        );
        super::bridges::stop(child).await;
        out.push(list);
    }
    out
}
