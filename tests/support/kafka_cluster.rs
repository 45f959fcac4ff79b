//! The stack's three-node Kafka cluster (`scripts/stack kafka-cluster`): SCRAM-SHA-512 logins,
//! ACLs, replication factor 3, min.insync.replicas 2, no auto-created topics. Its admin
//! creates topics and grants ACLs; `kubecast` (the user kubecast logs in as) may do only
//! what it is granted. Nodes are stopped (controlled shutdown), started and killed by number.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;

use super::consume::{KafkaTopic, create_topic_through};
use super::{Stack, repo};

/// The cluster's address and users, from the stack's exports.
pub struct Cluster {
    pub bootstrap: String,
    admin: (String, String),
    user: (String, String),
    stack_dir: std::path::PathBuf,
}

impl Cluster {
    /// Brings the cluster up if it is not (a no-op when it is) and reads its exports.
    pub fn up(stack: &Stack) -> Cluster {
        stack.script(&["kafka-cluster", "up"]);
        let vars = stack.vars();
        let get = |key: &str| {
            vars.get(key)
                .cloned()
                .unwrap_or_else(|| panic!("the stack's env has no {key}"))
        };
        Cluster {
            bootstrap: get("KUBECAST_STACK_KAFKA_CLUSTER_BOOTSTRAP"),
            admin: (
                get("KUBECAST_STACK_KAFKA_CLUSTER_ADMIN"),
                get("KUBECAST_STACK_KAFKA_CLUSTER_ADMIN_PASSWORD"),
            ),
            user: (
                get("KUBECAST_STACK_KAFKA_CLUSTER_USER"),
                get("KUBECAST_STACK_KAFKA_CLUSTER_PASSWORD"),
            ),
            stack_dir: stack.dir.clone(),
        }
    }

    /// Client settings logging in as the admin.
    pub fn admin_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap)
            .set("security.protocol", "SASL_PLAINTEXT")
            .set("sasl.mechanism", "SCRAM-SHA-512")
            .set("sasl.username", &self.admin.0)
            .set("sasl.password", &self.admin.1);
        c
    }

    /// A Kafka sink `name` on the cluster, logging in as `kubecast`, writing `topic`.
    pub fn sink(&self, name: &str, topic: &str, extra: &[&str]) -> String {
        let mut lines = vec![
            format!("type: kafka\nbrokers: {}\ntopic: {topic}", self.bootstrap),
            format!(
                "sasl: {{mechanism: SCRAM-SHA-512, username: {}, password: {}}}",
                self.user.0, self.user.1
            ),
        ];
        lines.extend(extra.iter().map(|s| s.to_string()));
        let body: String = lines
            .join("\n")
            .lines()
            .map(|l| format!("    {l}\n"))
            .collect();
        format!("  {name}:\n{body}")
    }

    /// A sink's `sasl` line logging in as the admin (benchmarks, where ACLs are not measured).
    pub fn admin_sasl(&self) -> String {
        format!(
            "sasl: {{mechanism: SCRAM-SHA-512, username: {}, password: {}}}",
            self.admin.0, self.admin.1
        )
    }

    /// `kubecast replay`'s login flags, as the admin.
    pub fn replay_args(&self) -> Vec<String> {
        vec![
            "--brokers".into(),
            self.bootstrap.clone(),
            "--sasl-mechanism".into(),
            "SCRAM-SHA-512".into(),
            "--sasl-username".into(),
            self.admin.0.clone(),
            "--sasl-password".into(),
            self.admin.1.clone(),
        ]
    }

    /// Creates `topic` with `partitions` partitions and the cluster's replication (3).
    pub async fn create_topic(&self, topic: &str, partitions: i32) {
        create_topic_through(self.admin_config(), topic, partitions, 3, &[]).await;
    }

    /// A `read_committed` reader of `topic` (with `partitions` partitions), as the admin.
    pub fn read(&self, topic: &str, partitions: i32) -> KafkaTopic {
        KafkaTopic::read_with(self.admin_config(), topic, partitions, "read_committed")
    }

    /// The node that leads `partition` of `topic`.
    pub fn leader_of(&self, topic: &str, partition: i32) -> i32 {
        let admin: AdminClient<DefaultClientContext> =
            self.admin_config().create().expect("Kafka admin client");
        let md = admin
            .inner()
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("metadata of {topic}: {e}"));
        md.topics()
            .first()
            .and_then(|t| t.partitions().iter().find(|p| p.id() == partition))
            .map(|p| p.leader())
            .unwrap_or_else(|| panic!("{topic} has no partition {partition}"))
    }

    /// The node that coordinates the transactions of `transactional_id`: the leader of its
    /// partition of `__transaction_state` (Java's String hash, 50 partitions by default).
    pub fn coordinator_of(&self, transactional_id: &str) -> i32 {
        let hash = transactional_id
            .encode_utf16()
            .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)));
        self.leader_of("__transaction_state", (hash & 0x7fff_ffff) % 50)
    }

    /// The cgroup (v2) node `node` runs in, as iptables' cgroup match names it; the stack
    /// makes one per node when it runs as root.
    pub fn cgroup_of(&self, node: i32) -> String {
        let port = self
            .bootstrap
            .split(',')
            .nth(usize::try_from(node - 1).unwrap_or(0))
            .and_then(|hp| hp.rsplit_once(':'))
            .map(|(_, p)| p.to_string())
            .unwrap_or_else(|| panic!("no node {node} in {}", self.bootstrap));
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
        let root = mounts
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|f| f.get(2) == Some(&"cgroup2"))
            .and_then(|f| f.get(1).map(|r| r.to_string()))
            .expect("a cgroup v2 mount (the black-hole test drops a node's packets by its cgroup)");
        let path = format!("kubecast-kafka-{port}");
        let procs =
            std::fs::read_to_string(format!("{root}/{path}/cgroup.procs")).unwrap_or_default();
        assert!(
            !procs.trim().is_empty(),
            "node {node} does not run in cgroup {root}/{path} (the stack makes one per node when run as root)"
        );
        path
    }

    /// `scripts/stack kafka-cluster ARGS`.
    pub fn script(&self, args: &[&str]) {
        let mut argv = vec!["kafka-cluster"];
        argv.extend_from_slice(args);
        let out = Command::new(repo().join("scripts/stack"))
            .args(&argv)
            .env("KUBECAST_STACK_DIR", &self.stack_dir)
            .output()
            .expect("running scripts/stack");
        assert!(
            out.status.success(),
            "scripts/stack {} failed:\n{}",
            argv.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Grants (or with `revoke`, revokes) the ACLs of `kubecast kafka-acls --format json`.
    pub fn acls(&self, op: &str, json: &str) {
        let mut child = Command::new(repo().join("scripts/stack"))
            .args(["kafka-cluster", "acls", op])
            .env("KUBECAST_STACK_DIR", &self.stack_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("running scripts/stack kafka-cluster acls");
        child
            .stdin
            .take()
            .expect("stdin is piped")
            .write_all(json.as_bytes())
            .expect("writing the ACLs");
        let out = child
            .wait_with_output()
            .expect("waiting for the ACL change");
        assert!(
            out.status.success(),
            "kafka-cluster acls {op} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Removes every ACL of the `kubecast` user, so a test starts with none.
    pub fn revoke_all(&self) {
        let out = Command::new(repo().join("scripts/stack"))
            .args([
                "kafka-cluster",
                "acls",
                "list",
                &format!("User:{}", self.user.0),
            ])
            .env("KUBECAST_STACK_DIR", &self.stack_dir)
            .output()
            .expect("listing ACLs");
        let entries: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect();
        if !entries.is_empty() {
            self.acls("revoke", &format!("[{}]", entries.join(",")));
        }
    }
}

/// `kubecast kafka-acls --config PATH --format json`.
pub fn kafka_acls_json(config: &std::path::Path) -> String {
    let (code, out, err) = super::kubecast::run_to_end(
        &[
            "kafka-acls",
            "--config",
            config.to_str().unwrap_or_default(),
            "--format",
            "json",
        ],
        &[],
    );
    assert_eq!(code, Some(0), "kubecast kafka-acls: {err}");
    out
}
