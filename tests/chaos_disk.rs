//! The state directory fails: it is not writable at all (a clear error at start), or the
//! disk fills up while kubecast runs. A full disk stops kubecast with an error naming the
//! file, and nothing is written after the failed write (no snapshot claims it), so after
//! space is freed a restart resumes before it and delivers every change.
//!
//! A full disk cannot be had on demand from the machine's own disk; the test mounts a small
//! tmpfs (this needs root, as CI and the development machines run) and grows it afterwards.
//! A write cut short part-way is had from the kernel too: kubecast runs with a file size
//! limit (`RLIMIT_FSIZE`), so a write past it stores what fits and fails with EFBIG.

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use support::churn::Churn;
use support::consume::KafkaTopic;
use support::kubecast::{Kubecast, run_to_end};
use support::observer::{Observer, check_received};
use support::scene::Scene;
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(120);

/// A tmpfs mounted for the test, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).expect("creating the mount point");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .expect("running mount");
        assert!(
            out.status.success(),
            "mounting a tmpfs at {} (needs root): {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs(dir.to_path_buf())
    }

    fn grow(&self, size: &str) {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .output()
            .expect("running mount");
        assert!(
            out.status.success(),
            "growing the tmpfs: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_state_directory_that_cannot_be_created_is_a_clear_error_at_start() {
    let scene_dir = support::kubecast::scratch_dir("badstate");
    let blocker = scene_dir.join("a-file");
    std::fs::write(&blocker, "not a directory").expect("writing a file");
    let cfg = scene_dir.join("c.yaml");
    std::fs::write(
        &cfg,
        format!(
            "cluster: c\nstate:\n  dir: {}/state\nsinks:\n  out:\n    type: stdout\n",
            blocker.display()
        ),
    )
    .expect("writing the config");
    let stack = support::Stack::load();
    let (code, _, err) = run_to_end(
        &["run", "--config", &cfg.display().to_string()],
        &[("KUBECONFIG", &stack.kubeconfig.display().to_string())],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("state directory") && err.contains(&blocker.display().to_string()),
        "names the path: {err}"
    );
}

/// A scene whose kubecast keeps a state directory and publishes to a Kafka topic of its own,
/// with an observer of the truth.
struct Case {
    scene: Scene,
    kafka: KafkaTopic,
    observer: Observer,
    state: PathBuf,
}

impl Case {
    async fn new(label: &str) -> Case {
        let scene = Scene::new(label).await;
        let kafka = KafkaTopic::create(&scene.stack, &unique_name(label)).await;
        let observer = Observer::start(&scene.client, &scene.ns).await;
        let state = scene.dir.join("state");
        Case {
            scene,
            kafka,
            observer,
            state,
        }
    }

    /// The config with `state` (YAML lines under `state:`, after `dir`).
    fn config(&self, state: &str) -> String {
        self.scene.config(
            &format!("state:\n  dir: {}\n{state}", self.state.display()),
            &[self.scene.kafka_sink("kafka", &self.kafka.topic, &[])],
        )
    }

    /// Churns until `kubecast` logs `fault`, then expects it to stop with exit 1 naming the
    /// state directory; returns the API operations made and its log.
    async fn churn_until_it_fails(&self, mut kubecast: Kubecast, fault: &str) -> (usize, String) {
        kubecast.wait_for_log("list complete", 1, LIMIT).await;
        let churn = Churn::start(
            &self.scene.client,
            &self.scene.ns,
            30,
            Duration::from_millis(10),
        );
        kubecast.wait_for_log(fault, 1, LIMIT).await;
        let ops = churn.stop().await;
        let (code, log) = kubecast.stop(LIMIT).await;
        assert_eq!(code, Some(1), "a failed write is fatal:\n{log}");
        assert!(
            log.contains("state directory") && log.contains(&self.state.display().to_string()),
            "the error names the state directory:\n{log}"
        );
        (ops, log)
    }

    /// Starts kubecast with `config` again and expects every change the observer saw in Kafka.
    async fn restart_delivers_every_change(&self, config: &str, what: &str, ops: usize) {
        let kubecast = Kubecast::start(&self.scene.stack, &self.scene.dir, config);
        self.observer.catch_up(&self.scene.pods, LIMIT).await;
        let truth: BTreeSet<String> = self.observer.changes().iter().map(|c| c.id()).collect();
        let records = kubecast.check(self.kafka.wait_for_ids(&truth, LIMIT).await);
        let (code, log) = kubecast.stop(LIMIT).await;
        assert_eq!(code, Some(0), "{log}");
        let dups = check_received(
            &truth,
            &records.iter().map(|r| r.ce("id")).collect::<Vec<_>>(),
            "Kafka",
        );
        println!(
            "chaos_disk ({what}): {ops} API operations, {} changes, lost 0, {dups} duplicates (same ids)",
            truth.len()
        );
    }
}

#[tokio::test]
async fn a_full_disk_stops_kubecast_without_losing_anything_and_a_restart_delivers_it_all() {
    let case = Case::new("chaos-disk").await;
    let disk = Tmpfs::mount(&case.state, "192k");
    let config = case.config("");
    let kubecast = Kubecast::start(&case.scene.stack, &case.scene.dir, &config);
    let (ops, _) = case
        .churn_until_it_fails(kubecast, "No space left on device")
        .await;
    disk.grow("64m");
    case.restart_delivers_every_change(&config, "full disk", ops)
        .await;
}

#[tokio::test]
async fn a_write_cut_short_leaves_no_snapshot_claiming_it_and_a_restart_delivers_every_change() {
    let case = Case::new("chaos-fsize").await;
    // Every batch written before its events go anywhere: the one that fails reached no sink.
    let config = case.config("  log: always\n");
    let kubecast = Kubecast::start_with_file_limit(&case.scene.stack, &case.scene.dir, &config, 96);
    let (ops, log) = case.churn_until_it_fails(kubecast, "File too large").await;
    assert!(
        log.contains("the state is not saved at shutdown"),
        "no snapshot after the failed write:\n{log}"
    );
    case.restart_delivers_every_change(&config, "file size limit", ops)
        .await;
}
