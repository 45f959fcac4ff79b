//! Two or more kubecast replicas electing a leader on a Lease of the test's own, with an
//! exactly-once Kafka sink and an MQTT sink, for the high-availability tests. Which replica
//! leads is read from its log: a term starts with `leading: taking over` and ends with
//! `stepped down`.

use std::path::PathBuf;
use std::time::Duration;

use super::consume::KafkaTopic;
use super::kubecast::{Kubecast, scratch_dir};
use super::observer::check_received;
use super::scene::{Scene, exactly_once};
use super::unique_name;

/// The lease settings of the tests: a 2 s Lease renewed every 250 ms.
pub const LEASE_DURATION_MS: u64 = 2_000;
pub const RETRY_PERIOD_MS: u64 = 250;

/// The replicas of one group: what they share (sinks, Lease) and the running processes.
pub struct Replicas {
    /// The config without `leader_election.identity`, which each replica adds.
    shared: String,
    pub lease: String,
    pub procs: Vec<Kubecast>,
    /// Each process's `leader_election.identity`.
    pub identities: Vec<String>,
    dirs: Vec<PathBuf>,
    started: usize,
    /// The replicas killed by [`Replicas::kill`].
    killed: Vec<usize>,
    /// More environment for every replica (`KUBECONFIG` of another apiserver).
    env: Vec<(String, String)>,
}

impl Replicas {
    /// `n` replicas watching `scene`'s namespace into Kafka `topic` (exactly-once) and MQTT
    /// topics under `prefix`.
    pub fn start(scene: &Scene, n: usize, topic: &str, prefix: &str) -> Replicas {
        Replicas::start_with(scene, n, topic, prefix, "")
    }

    /// As [`Replicas::start`], with more top-level config lines in `settings` (routes,
    /// alerts).
    pub fn start_with(
        scene: &Scene,
        n: usize,
        topic: &str,
        prefix: &str,
        settings: &str,
    ) -> Replicas {
        Replicas::start_env(scene, n, topic, prefix, settings, &[])
    }

    /// As [`Replicas::start_with`], with more environment for every replica.
    pub fn start_env(
        scene: &Scene,
        n: usize,
        topic: &str,
        prefix: &str,
        settings: &str,
        env: &[(&str, &str)],
    ) -> Replicas {
        Replicas::start_edited(scene, n, topic, prefix, settings, env, |c| c)
    }

    /// As [`Replicas::start_env`], with the shared config passed through `edit` first (more
    /// namespaces and resources to watch).
    pub fn start_edited(
        scene: &Scene,
        n: usize,
        topic: &str,
        prefix: &str,
        settings: &str,
        env: &[(&str, &str)],
        edit: impl FnOnce(String) -> String,
    ) -> Replicas {
        let lease = unique_name("kubecast-lease");
        let eos = exactly_once(&lease);
        let eos: Vec<&str> = eos.iter().map(String::as_str).collect();
        let shared = scene.config(
            &format!(
                "{settings}leader_election:\n  enabled: true\n  lease: {lease}\n  namespace: {}\n  lease_duration_ms: {LEASE_DURATION_MS}\n  retry_period_ms: {RETRY_PERIOD_MS}\n",
                scene.ns
            ),
            &[
                scene.kafka_sink("kafka", topic, &eos),
                scene.mqtt_sink("mqtt", prefix, &format!("{prefix}/{{name}}"), &[]),
            ],
        );
        let mut r = Replicas {
            shared: edit(shared),
            lease,
            procs: Vec::new(),
            identities: Vec::new(),
            dirs: Vec::new(),
            started: 0,
            killed: Vec::new(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        for _ in 0..n {
            r.add(scene);
        }
        r
    }

    /// One more replica; returns its index.
    pub fn add(&mut self, scene: &Scene) -> usize {
        self.add_env(scene, &[])
    }

    /// One more replica with more environment of its own (`KUBECONFIG` through a proxy);
    /// returns its index.
    pub fn add_env(&mut self, scene: &Scene, env: &[(&str, &str)]) -> usize {
        self.add_edited(scene, env, |c| c.to_string())
    }

    /// One more replica whose config is the shared one passed through `edit` (another
    /// `sharding.shards`, as a rolling update brings); returns its index.
    pub fn add_edited(
        &mut self,
        scene: &Scene,
        env: &[(&str, &str)],
        edit: impl FnOnce(&str) -> String,
    ) -> usize {
        let shared = std::mem::take(&mut self.shared);
        self.shared = edit(&shared);
        let (dir, k) = self.spawn(scene, env);
        self.shared = shared;
        self.dirs.push(dir);
        self.procs.push(k);
        self.identities.push(format!("replica-{}", self.started));
        self.procs.len() - 1
    }

    /// `kill -9` of replica `i`, nothing in its place; returns its log. Its index stays, for
    /// its log; [`Replicas::alive`] no longer names it.
    pub async fn kill(&mut self, i: usize) -> String {
        self.procs[i].signal("KILL");
        self.killed.push(i);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while self.procs[i].running() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "replica {i} still runs 10 s after kill -9"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.procs[i].log()
    }

    /// Stops replica `i` with SIGTERM, as a rolling update does; it must exit 0 within
    /// `limit`. Its index stays, for its log; [`Replicas::alive`] no longer names it.
    pub async fn stop_one(&mut self, i: usize, limit: Duration) {
        self.procs[i].signal("TERM");
        self.killed.push(i);
        let deadline = tokio::time::Instant::now() + limit;
        while self.procs[i].running() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "replica {i} still runs {limit:?} after SIGTERM:\n{}",
                self.procs[i].log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The identities of the replicas not killed.
    pub fn alive(&self) -> Vec<String> {
        (0..self.procs.len())
            .filter(|i| !self.killed.contains(i))
            .map(|i| self.identities[i].clone())
            .collect()
    }

    /// A new replica process with an identity never used before (a restarted Pod has a
    /// new name).
    fn spawn(&mut self, scene: &Scene, extra: &[(&str, &str)]) -> (PathBuf, Kubecast) {
        self.started += 1;
        let identity = format!("replica-{}", self.started);
        let config = self.shared.replacen(
            "leader_election:\n",
            &format!("leader_election:\n  identity: {identity}\n"),
            1,
        );
        let dir = scratch_dir(&identity);
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .chain(extra.iter().copied())
            .collect();
        let k = Kubecast::start_env(&scene.stack, &dir, &config, &[], &env);
        (dir, k)
    }

    /// `kill -9` of replica `i` and a fresh process in its place; returns the old log.
    pub async fn kill_and_replace(&mut self, scene: &Scene, i: usize) -> String {
        let (dir, fresh) = self.spawn(scene, &[]);
        let old = std::mem::replace(&mut self.procs[i], fresh);
        self.dirs[i] = dir;
        self.identities[i] = format!("replica-{}", self.started);
        old.kill().await
    }

    /// Terms started (takeovers) by replica `i`'s current process.
    pub fn terms(&self, i: usize) -> usize {
        self.procs[i].count_in_log("took over the exactly-once sink")
    }

    /// Whether replica `i` is in a term, by its log.
    pub fn leading(&self, i: usize) -> bool {
        let k = &self.procs[i];
        k.count_in_log("leading: taking over") > k.count_in_log("stepped down")
    }

    /// Waits until exactly one replica leads and has taken over; returns its index.
    pub async fn leader(&self, limit: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let leading: Vec<usize> = (0..self.procs.len())
                .filter(|&i| self.leading(i) && self.terms(i) > 0)
                .collect();
            if let [one] = leading[..] {
                return one;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "no single leader after {limit:?} (leading: {leading:?}); logs:\n{}",
                    self.logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until `committed` (read_committed) holds every change of `want`, failing with the
    /// changes still missing and every replica's log; returns how many records repeat one.
    pub async fn committed_once(
        &self,
        committed: &KafkaTopic,
        want: &std::collections::BTreeSet<String>,
        limit: Duration,
    ) -> usize {
        if let Err(e) = committed.wait_for_ids(want, limit).await {
            let records = committed.records();
            let have: std::collections::BTreeSet<&str> =
                records.iter().map(|r| r.ce("id")).collect();
            let missing: Vec<&String> =
                want.iter().filter(|w| !have.contains(w.as_str())).collect();
            panic!(
                "{} changes missing: {missing:?}\n{e}\n{}",
                missing.len(),
                self.logs()
            );
        }
        let records = committed.records();
        let ids: Vec<&str> = records.iter().map(|r| r.ce("id")).collect();
        check_received(want, &ids, "read_committed Kafka")
    }

    /// Every replica's log, labelled.
    pub fn logs(&self) -> String {
        self.procs
            .iter()
            .enumerate()
            .map(|(i, k)| format!("---- replica {i}:\n{}", k.log()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Stops every replica (SIGTERM); each must exit 0 with its sinks done within the grace
    /// period.
    pub async fn stop(self, limit: Duration) {
        for (i, k) in self.procs.into_iter().enumerate() {
            if self.killed.contains(&i) {
                continue;
            }
            // A term that lost its Lease stops at once and says so (ha_zombie's frozen
            // leader); only what this stop logs is checked.
            let before = k.log().len();
            let (code, log) = k.stop(limit).await;
            assert_eq!(code, Some(0), "a replica did not stop cleanly:\n{log}");
            assert!(
                !log.get(before..)
                    .unwrap_or_default()
                    .contains("did not deliver everything in time"),
                "a replica's sinks did not finish within the grace period:\n{log}"
            );
        }
    }
}
