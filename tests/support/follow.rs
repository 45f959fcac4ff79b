//! `kubecast replay --follow --format json` as a test runs it: the ids it prints and what it
//! says on standard error, collected as they come; and a writer of small CloudEvents records
//! (binary mode, ids `{prefix}-{n}`) to follow.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

use super::Stack;
use super::kubecast::replay_command;

/// A running `replay --follow`; killed when dropped.
pub struct Follow {
    child: Child,
    ids: Arc<Mutex<Vec<String>>>,
    said: Arc<Mutex<String>>,
}

impl Follow {
    /// Starts `kubecast replay --follow --format json --topic TOPIC ARGS` and waits until it
    /// says it follows.
    pub async fn start(stack: &Stack, topic: &str, args: &[&str]) -> Follow {
        let f = Follow::spawn(stack, topic, args);
        f.wait_said("following", Duration::from_secs(60)).await;
        f
    }

    /// Starts `kubecast replay --follow --format json --topic TOPIC ARGS`.
    pub fn spawn(stack: &Stack, topic: &str, args: &[&str]) -> Follow {
        let mut child = replay_command(stack, topic)
            .args(["--follow", "--format", "json"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("running kubecast replay --follow");
        let ids: Arc<Mutex<Vec<String>>> = Arc::default();
        let said: Arc<Mutex<String>> = Arc::default();
        let (out, into) = (child.stdout.take().expect("stdout is piped"), ids.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let id = serde_json::from_str::<serde_json::Value>(&line)
                    .ok()
                    .and_then(|v| v["id"].as_str().map(str::to_string))
                    .unwrap_or_else(|| format!("not an event: {line}"));
                into.lock().expect("the ids' lock").push(id);
            }
        });
        let (err, into) = (child.stderr.take().expect("stderr is piped"), said.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let mut s = into.lock().expect("the stderr lock");
                s.push_str(&line);
                s.push('\n');
            }
        });
        Follow { child, ids, said }
    }

    /// Stops the process (SIGSTOP) or lets it go on (SIGCONT): what it does not run, it
    /// cannot look for topics meanwhile.
    pub fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("running kill");
        assert!(status.success(), "kill {signal} of replay --follow failed");
    }

    /// The ids printed so far, in order.
    pub fn ids(&self) -> Vec<String> {
        self.ids.lock().expect("the ids' lock").clone()
    }

    /// What it said on standard error so far.
    pub fn said(&self) -> String {
        self.said.lock().expect("the stderr lock").clone()
    }

    /// Whether it still runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits until standard error holds `needle`.
    pub async fn wait_said(&self, needle: &str, limit: Duration) {
        let found =
            super::consume::wait_for(limit, needle, || self.said().contains(needle).then_some(()))
                .await;
        assert!(
            found.is_some(),
            "replay --follow did not say `{needle}` within {limit:?}; it said:\n{}",
            self.said()
        );
    }

    /// Waits until every id of `want` was printed; `Err` names those missing.
    pub async fn wait_for_ids(&self, want: &[String], limit: Duration) -> Result<(), String> {
        let missing = || {
            let have: std::collections::HashSet<String> = self.ids().into_iter().collect();
            want.iter()
                .filter(|id| !have.contains(*id))
                .cloned()
                .collect::<Vec<_>>()
        };
        match super::consume::wait_for(limit, "the ids", || missing().is_empty().then_some(()))
            .await
        {
            Some(()) => Ok(()),
            None => {
                let m = missing();
                Err(format!(
                    "replay --follow never printed {} of {} ids (first {:?}); it said:\n{}",
                    m.len(),
                    want.len(),
                    &m[..m.len().min(5)],
                    self.said()
                ))
            }
        }
    }

    /// Ends it with SIGINT, as Ctrl-C does; its exit code and what it said.
    pub async fn interrupt(mut self) -> (Option<i32>, String) {
        let pid = self.child.id().to_string();
        let _ = std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                // Its stderr reader may still hold the last lines.
                tokio::time::sleep(Duration::from_millis(100)).await;
                return (status.code(), self.said());
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "replay --follow still runs 30 s after SIGINT; it said:\n{}",
                self.said()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Follow {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes small CloudEvents (binary mode) to the stack's Kafka.
pub struct EventWriter {
    producer: ThreadedProducer<DefaultProducerContext>,
}

impl EventWriter {
    pub fn new(stack: &Stack) -> EventWriter {
        EventWriter {
            producer: ClientConfig::new()
                .set("bootstrap.servers", &stack.kafka_bootstrap)
                .set("linger.ms", "0")
                .create()
                .expect("a Kafka producer"),
        }
    }

    /// Queues the event `id` to `topic` (its partition chosen by the key `id`).
    pub fn send(&self, topic: &str, id: &str) {
        self.send_at(topic, id, None);
    }

    /// Queues the event `id` to `topic`, with the record's timestamp `at_ms` (else now).
    pub fn send_at(&self, topic: &str, id: &str, at_ms: Option<i64>) {
        let time = jiff::Timestamp::now().to_string();
        let headers = [
            ("ce_specversion", "1.0"),
            ("ce_id", id),
            ("ce_source", "k8s://follow-test/api/v1/namespaces/ns/pods"),
            ("ce_type", "io.k8s.core.v1.pod.modified"),
            ("ce_time", time.as_str()),
            ("content-type", "application/json"),
        ]
        .into_iter()
        .fold(OwnedHeaders::new(), |h, (key, value)| {
            h.insert(Header {
                key,
                value: Some(value),
            })
        });
        let data = format!(r#"{{"metadata":{{"name":"{id}"}}}}"#);
        let mut record = BaseRecord::to(topic)
            .key(id)
            .payload(&data)
            .headers(headers);
        if let Some(ms) = at_ms {
            record = record.timestamp(ms);
        }
        self.producer
            .send(record)
            .map_err(|(e, _)| e)
            .expect("queueing a record");
    }

    /// Waits until everything queued was acknowledged.
    pub fn flush(&self) {
        self.producer
            .flush(Duration::from_secs(30))
            .expect("flushing the producer");
    }
}
