//! Continuous pod churn for the chaos tests: create, label, report Running, delete, at
//! random over a fixed set of pod names, until stopped. Bounded: it stops when told, and
//! each operation is one API call.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::task::JoinHandle;

use super::pods::Pods;

pub struct Churn {
    stop: Arc<AtomicBool>,
    ops: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Churn {
    /// Starts churning `slots` pods named `churn-N` in `ns`, pausing `pause` between calls.
    pub fn start(client: &kube::Client, ns: &str, slots: usize, pause: Duration) -> Churn {
        Churn::start_named(client, ns, "churn", slots, pause)
    }

    /// [`Churn::start`] over pods named `{prefix}-N` (a second churn beside the pods a
    /// first one left).
    pub fn start_named(
        client: &kube::Client,
        ns: &str,
        prefix: &str,
        slots: usize,
        pause: Duration,
    ) -> Churn {
        let prefix = prefix.to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let ops = Arc::new(AtomicUsize::new(0));
        let pods = Pods::new(client, ns);
        let (s, o) = (stop.clone(), ops.clone());
        let task = tokio::spawn(async move {
            let mut alive = vec![false; slots];
            let mut step = 0u32;
            while !s.load(Ordering::Relaxed) {
                let slot = fastrand::usize(..slots);
                let name = format!("{prefix}-{slot}");
                step += 1;
                if !alive[slot] {
                    pods.create(&name).await;
                    alive[slot] = true;
                } else {
                    match fastrand::u8(..10) {
                        0..=4 => drop(pods.label(&name, "step", &step.to_string()).await),
                        5..=7 => drop(pods.running(&name, fastrand::i32(0..5)).await),
                        _ => {
                            pods.delete(&name).await;
                            alive[slot] = false;
                        }
                    }
                }
                o.fetch_add(1, Ordering::Relaxed);
                if !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                }
            }
        });
        Churn { stop, ops, task }
    }

    /// Stops the churn and returns how many API operations it made.
    pub async fn stop(self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("the churn task");
        self.ops.load(Ordering::Relaxed)
    }
}
