//! Reading the shards of replicas that share them: who holds each shard's Lease, waiting
//! until they are balanced, and each replica's terms per shard from its log (a term starts
//! with `holding the shard` and ends with `the shard's bridge stopped`).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

/// Each shard's holder by its Lease (`None`: free, or no Lease yet).
pub async fn holders(client: &kube::Client, ns: &str, lease: &str, n: u32) -> Vec<Option<String>> {
    let api: Api<Lease> = Api::namespaced(client.clone(), ns);
    let mut out = Vec::new();
    for i in 0..n {
        let l = api
            .get_opt(&format!("{lease}-shard-{i}"))
            .await
            .ok()
            .flatten();
        out.push(
            l.and_then(|l| l.spec?.holder_identity)
                .filter(|h| !h.is_empty()),
        );
    }
    out
}

/// How many shards each of `alive` holds in `holders`.
pub fn counts(holders: &[Option<String>], alive: &[String]) -> BTreeMap<String, usize> {
    alive
        .iter()
        .map(|a| {
            let n = holders.iter().filter(|h| h.as_deref() == Some(a)).count();
            (a.clone(), n)
        })
        .collect()
}

/// Waits until every shard is held by one of `alive` and they hold within one of each other,
/// and stays so for a second; returns the holders.
pub async fn wait_balanced(
    client: &kube::Client,
    ns: &str,
    lease: &str,
    n: u32,
    alive: &[String],
    limit: Duration,
) -> Result<Vec<Option<String>>, String> {
    let deadline = tokio::time::Instant::now() + limit;
    let mut since: Option<tokio::time::Instant> = None;
    loop {
        let h = holders(client, ns, lease, n).await;
        let c = counts(&h, alive);
        let all_held = h
            .iter()
            .all(|x| x.as_ref().is_some_and(|x| alive.contains(x)));
        let (lo, hi) = (
            c.values().min().copied().unwrap_or(0),
            c.values().max().copied().unwrap_or(0),
        );
        if all_held && hi - lo <= 1 {
            let at = *since.get_or_insert_with(tokio::time::Instant::now);
            if at.elapsed() >= Duration::from_secs(1) {
                return Ok(h);
            }
        } else {
            since = None;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "the shards were not held by {alive:?} within one of each other after {limit:?}: holders {h:?}, counts {c:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One replica's term on one shard, by its log's timestamps: from `holding the shard` to
/// `the shard's bridge stopped` (`None`: still running, or killed).
#[derive(Debug, Clone)]
pub struct Term {
    pub shard: u32,
    pub start: jiff::Timestamp,
    pub end: Option<jiff::Timestamp>,
}

/// The shard terms in a replica's log.
pub fn terms(log: &str) -> Vec<Term> {
    let mut open: BTreeMap<u32, jiff::Timestamp> = BTreeMap::new();
    let mut out = Vec::new();
    for line in log.lines() {
        let Some(at) = line
            .split_whitespace()
            .next()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        else {
            continue;
        };
        let Some(shard) = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("shard="))
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if line.contains("holding the shard") {
            open.insert(shard, at);
        } else if line.contains("the shard's bridge stopped")
            && let Some(start) = open.remove(&shard)
        {
            out.push(Term {
                shard,
                start,
                end: Some(at),
            });
        }
    }
    out.extend(open.into_iter().map(|(shard, start)| Term {
        shard,
        start,
        end: None,
    }));
    out
}

/// Waits until `replicas` hold their `n` shards balanced and each shard's bridge has listed,
/// then starts a churn of `slots` pods
/// every `pause` in the scene's namespace and waits until `events` more of its changes are
/// in `committed`; fails with the replicas' logs.
pub async fn balanced_then_churning(
    scene: &super::scene::Scene,
    replicas: &super::replicas::Replicas,
    n: u32,
    committed: &super::consume::KafkaTopic,
    (slots, pause): (usize, Duration),
    events: usize,
    limit: Duration,
) -> super::churn::Churn {
    let alive = replicas.alive();
    if let Err(e) = wait_balanced(&scene.client, &scene.ns, &replicas.lease, n, &alive, limit).await
    {
        panic!("{e}\n{}", replicas.logs());
    }
    // A shard's Lease is held before its bridge has listed: a pod the churn made before that
    // list would be published as listed, not as the changes the observer saw.
    let deadline = tokio::time::Instant::now() + limit;
    let listed = || -> usize {
        replicas
            .procs
            .iter()
            .map(|k| k.count_in_log("list complete"))
            .sum()
    };
    while listed() < n as usize {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the {n} shards' bridges had not listed after {limit:?}:\n{}",
            replicas.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let churn = super::churn::Churn::start(&scene.client, &scene.ns, slots, pause);
    if let Err(e) = committed
        .wait_for_more("the churn's events", events, limit)
        .await
    {
        panic!("{e}\n{}", replicas.logs());
    }
    churn
}
