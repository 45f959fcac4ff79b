//! Running the real `kubecast` binary against the local stack: a config file of the test's
//! own, the process's log lines kept for waiting and for failure messages, and signals.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::{Stack, unique_name};

/// A running kubecast. Killed when dropped.
pub struct Kubecast {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
    reader: Option<tokio::task::JoinHandle<()>>,
    pub config_path: PathBuf,
}

/// A scratch directory under `target/test-tmp` (kept after the run, for post-mortems).
pub fn scratch_dir(prefix: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/test-tmp")
        .join(unique_name(prefix));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    dir
}

/// The kubecast binary `run` starts: this build's, or `KUBECAST_TEST_BINARY` (another
/// build's, to measure it the same way: BENCHMARKS.md's before-and-after figures).
pub fn binary() -> PathBuf {
    std::env::var_os("KUBECAST_TEST_BINARY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_kubecast")))
}

impl Kubecast {
    /// Writes `config` (YAML) into `dir` and starts `kubecast run` with it, as the stack's
    /// admin.
    pub fn start(stack: &Stack, dir: &Path, config: &str) -> Kubecast {
        Kubecast::start_with(stack, dir, config, &[])
    }

    /// [`Kubecast::start`] with more arguments to `kubecast run`.
    pub fn start_with(stack: &Stack, dir: &Path, config: &str, args: &[&str]) -> Kubecast {
        Kubecast::start_env(stack, dir, config, args, &[])
    }

    /// [`Kubecast::start_with`] with more environment variables (`K_SINK`, ...).
    pub fn start_env(
        stack: &Stack,
        dir: &Path,
        config: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Kubecast {
        Kubecast::start_in(Command::new(binary()), stack, dir, config, args, env)
    }

    /// [`Kubecast::start`] with no file it writes larger than `kib` KiB (`RLIMIT_FSIZE`, with
    /// SIGXFSZ ignored): a write past it fails part-way with EFBIG, as a real one does.
    pub fn start_with_file_limit(stack: &Stack, dir: &Path, config: &str, kib: u64) -> Kubecast {
        let mut limited = Command::new("bash");
        limited
            .arg("-c")
            .arg(format!("trap '' XFSZ; ulimit -f {kib}; exec \"$0\" \"$@\""))
            .arg(binary());
        Kubecast::start_in(limited, stack, dir, config, &[], &[])
    }

    /// Starts `kubecast run` through `command` (the binary, or a wrapper that execs it with
    /// the arguments given after it).
    fn start_in(
        mut command: Command,
        stack: &Stack,
        dir: &Path,
        config: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Kubecast {
        let config_path = dir.join("kubecast.yaml");
        std::fs::write(&config_path, config)
            .unwrap_or_else(|e| panic!("writing {}: {e}", config_path.display()));
        let mut child = command
            .arg("run")
            .arg("--config")
            .arg(&config_path)
            .args(args)
            .env("KUBECONFIG", &stack.kubeconfig)
            .env("RUST_LOG", "kubecast=debug,info")
            // kubecast reads every KUBECAST_* variable as config; these are the benches' and tests'.
            .env_remove("KUBECAST_BENCH_BASELINE")
            .env_remove("KUBECAST_PARTITION_LIMIT_S")
            .env_remove("KUBECAST_TEST_BINARY")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("starting target/debug/kubecast");
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().expect("stderr is piped");
        let sink = log.clone();
        let reader = tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(mut l) = sink.lock() {
                    l.push(line);
                }
            }
        });
        Kubecast {
            child,
            log,
            reader: Some(reader),
            config_path,
        }
    }

    /// The process id, for signals.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("kubecast is running")
    }

    /// Whether the process is still running (it neither exited nor was restarted).
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Every log line so far.
    pub fn log(&self) -> String {
        self.log.lock().map(|l| l.join("\n")).unwrap_or_default()
    }

    /// How many log lines contain `needle`.
    pub fn count_in_log(&self, needle: &str) -> usize {
        self.log
            .lock()
            .map(|l| l.iter().filter(|s| s.contains(needle)).count())
            .unwrap_or(0)
    }

    /// Waits until at least `n` log lines contain `needle`; fails with the log otherwise.
    pub async fn wait_for_log(&mut self, needle: &str, n: usize, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        while self.count_in_log(needle) < n {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "kubecast exited ({status}) before logging `{needle}`; its log:\n{}",
                    self.log()
                );
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "timed out after {limit:?} waiting for kubecast to log `{needle}` {n} time(s); its log:\n{}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The value of `r`, or a failure that shows `r`'s error and kubecast's log.
    pub fn check<T>(&self, r: Result<T, String>) -> T {
        r.unwrap_or_else(|e| panic!("{e}\nkubecast's log:\n{}", self.log()))
    }

    /// Sends a signal (`STOP`, `CONT`, `TERM`, `KILL`).
    pub fn signal(&self, name: &str) {
        let status = std::process::Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid().to_string())
            .status()
            .expect("running kill");
        assert!(status.success(), "kill -{name} {} failed", self.pid());
    }

    /// `kill -9`, waits for the process to be gone, and returns its log.
    pub async fn kill(mut self) -> String {
        self.signal("KILL");
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
        if let Some(reader) = self.reader.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), reader).await;
        }
        self.log()
    }

    /// The whole log of a kubecast that has exited: waits (up to 5 s) for the reader to take
    /// the last lines at the end of its stderr.
    pub async fn log_to_end(&mut self) -> String {
        if let Some(reader) = self.reader.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), reader).await;
        }
        self.log()
    }

    /// Waits for kubecast to exit on its own; returns the exit code and the log, or fails
    /// with the log if it is still running after `limit`.
    pub async fn exited(self, limit: Duration) -> (Option<i32>, String) {
        self.wait_exit(limit, "it started").await
    }

    /// SIGTERM, then waits for the exit; returns the exit code and the log.
    pub async fn stop(self, limit: Duration) -> (Option<i32>, String) {
        self.signal("TERM");
        self.wait_exit(limit, "SIGTERM").await
    }

    async fn wait_exit(mut self, limit: Duration, since: &str) -> (Option<i32>, String) {
        let status = match tokio::time::timeout(limit, self.child.wait()).await {
            Ok(s) => s.expect("waiting for kubecast"),
            Err(_) => panic!(
                "kubecast was still running {limit:?} after {since}; its log:\n{}",
                self.log()
            ),
        };
        // The reader ends at the end of stderr, with the last lines taken.
        if let Some(reader) = self.reader.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), reader).await;
        }
        (status.code(), self.log())
    }
}

/// `kubecast replay --brokers (the stack's) --topic TOPIC`, this build's binary, to add to.
pub fn replay_command(stack: &Stack, topic: &str) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_kubecast"));
    command.args([
        "replay",
        "--brokers",
        &stack.kafka_bootstrap,
        "--topic",
        topic,
    ]);
    command
}

/// Runs `kubecast ARGS` to completion; returns the exit code, stdout and stderr.
pub fn run_to_end(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kubecast"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("running kubecast");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

impl Kubecast {
    /// `kill -9` at `rounds` random moments (0.3 to 2.5 s apart: the chaos itself, not a
    /// wait for anything), each time starting kubecast again with `config` and waiting until
    /// it logs `restored`, where `check` looks at it. Returns the last process and the
    /// killed ones' logs.
    pub async fn kill_at_random(
        mut self,
        stack: &Stack,
        dir: &Path,
        config: &str,
        rounds: usize,
        restored: &str,
        check: impl Fn(usize, &Kubecast),
    ) -> (Kubecast, Vec<String>) {
        let mut logs = Vec::new();
        for round in 0..rounds {
            tokio::time::sleep(Duration::from_millis(fastrand::u64(300..2500))).await;
            logs.push(self.kill().await);
            self = Kubecast::start(stack, dir, config);
            self.wait_for_log(restored, 1, Duration::from_secs(120))
                .await;
            check(round, &self);
        }
        (self, logs)
    }
}
