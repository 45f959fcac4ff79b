//! The setting most bridge tests share: the stack, an admin client, a namespace of the
//! test's own (so tests running side by side never see each other's pods), a scratch
//! directory, and kubecast configs that watch just that namespace.

use std::path::PathBuf;

use super::kubecast::scratch_dir;
use super::pods::{Pods, namespace};
use super::{Stack, unique_name};

pub struct Scene {
    pub stack: Stack,
    pub client: kube::Client,
    pub ns: String,
    pub pods: Pods,
    pub dir: PathBuf,
}

impl Scene {
    /// Creates a fresh namespace named after `label`.
    pub async fn new(label: &str) -> Scene {
        let stack = Stack::load();
        let client = stack.kube_client().await;
        let ns = unique_name(label);
        namespace(&client, &ns).await;
        let pods = Pods::new(&client, &ns);
        Scene {
            dir: scratch_dir(label),
            stack,
            client,
            ns,
            pods,
        }
    }

    /// A kubecast config for cluster `test` watching this scene's namespace. `settings` are
    /// further top-level YAML lines; `sinks` are blocks from the `*_sink` helpers.
    pub fn config(&self, settings: &str, sinks: &[String]) -> String {
        format!(
            "cluster: test\nwatch:\n  namespaces: [{}]\n{settings}sinks:\n{}",
            self.ns,
            sinks.concat()
        )
    }

    /// Runs `kubecast replay --brokers B --topic T ARGS` (the binary): exit code, stdout,
    /// stderr.
    pub fn replay(&self, topic: &str, args: &[&str]) -> (Option<i32>, String, String) {
        let mut argv = vec![
            "replay",
            "--brokers",
            &self.stack.kafka_bootstrap,
            "--topic",
            topic,
        ];
        argv.extend_from_slice(args);
        super::kubecast::run_to_end(&argv, &[])
    }

    /// A Kafka sink `name` writing to `topic`; `extra` holds more of its fields (`"mode: structured"`).
    pub fn kafka_sink(&self, name: &str, topic: &str, extra: &[&str]) -> String {
        sink(
            name,
            &[&format!(
                "type: kafka\nbrokers: {}\ntopic: {topic}",
                self.stack.kafka_bootstrap
            )],
            extra,
        )
    }

    /// An MQTT sink `name` (its client id is `client_id`) with the topic template `topic`.
    pub fn mqtt_sink(&self, name: &str, client_id: &str, topic: &str, extra: &[&str]) -> String {
        let base = format!(
            "type: mqtt\nurl: mqtt://{}:{}\nclient_id: {client_id}\ntopic: '{topic}'",
            self.stack.mqtt_host, self.stack.mqtt_port
        );
        sink(name, &[&base], extra)
    }
}

/// kubecast running in this process (`pipeline::run`) on a config text.
pub struct InProcess {
    stop: tokio::sync::oneshot::Sender<()>,
    run: tokio::task::JoinHandle<
        Result<kubecast::pipeline::Stats, kubecast::pipeline::PipelineError>,
    >,
}

impl InProcess {
    /// Validates `text` and runs the pipeline with the scene's client until [`InProcess::stop`].
    pub fn start(scene: &Scene, text: &str) -> InProcess {
        let config = kubecast::config::load_str("test.yaml", text, Vec::new())
            .unwrap_or_else(|e| panic!("the test's config: {e}"))
            .validate()
            .unwrap_or_else(|e| panic!("the test's config: {e}"));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(kubecast::pipeline::run(
            config,
            scene.client.clone(),
            async {
                let _ = stopped.await;
            },
        ));
        InProcess { stop, run }
    }

    /// Stops it as SIGTERM would and checks that it ended cleanly within `limit`.
    pub async fn stop(self, limit: std::time::Duration) {
        let _ = self.stop.send(());
        let outcome = tokio::time::timeout(limit, self.run)
            .await
            .expect("kubecast stopped in time");
        assert!(matches!(outcome, Ok(Ok(_))), "{outcome:?}");
    }
}

/// The `exactly_once` lines of a Kafka sink whose transactional id and topics are the
/// test's own (`label` names them), created by kubecast (`create_topics`).
pub fn exactly_once(label: &str) -> Vec<String> {
    vec![
        "exactly_once: true".to_string(),
        "create_topics: {}".to_string(),
        format!(
            "transactions: {{id: {}, checkpoint_topic: {}, state_topic: {}, max_ms: 50}}",
            unique_name(&format!("{label}-txn")),
            unique_name(&format!("{label}-checkpoints")),
            unique_name(&format!("{label}-state")),
        ),
    ]
}

/// A file sink `name` writing to `path`.
pub fn file_sink(name: &str, path: &std::path::Path) -> String {
    sink(
        name,
        &[&format!("type: file\npath: {}", path.display())],
        &[],
    )
}

fn sink(name: &str, base: &[&str], extra: &[&str]) -> String {
    let mut out = format!("  {name}:\n");
    for line in base.iter().chain(extra).flat_map(|b| b.lines()) {
        out.push_str("    ");
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The structured events a file sink wrote, in order. Only whole lines count (the sink may
/// be writing the next one); each must be JSON.
pub fn file_events(path: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let whole = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
    whole
        .lines()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{}: a line is not JSON: {e}", path.display()))
        })
        .collect()
}

/// `"{kind} {name} inferred={..} initial={..}"`: what the checks compare of an event.
pub fn describe(e: &serde_json::Value) -> String {
    let kind = e["type"]
        .as_str()
        .unwrap_or_default()
        .rsplit('.')
        .next()
        .unwrap_or_default();
    format!(
        "{kind} {} inferred={} initial={}",
        e["k8sname"].as_str().unwrap_or_default(),
        e["k8sinferred"],
        e["k8sinitial"]
    )
}
