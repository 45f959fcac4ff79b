//! Exponential backoff with jitter, for every retry in kubecast. Entry point: [`Backoff`].

use std::time::Duration;

/// Delays that double from `base` up to `cap`, each drawn uniformly from the upper half of
/// the current step so that many clients retrying together spread out.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    step: Duration,
}

impl Backoff {
    pub fn new(base: Duration, cap: Duration) -> Backoff {
        Backoff {
            base,
            cap,
            step: base,
        }
    }

    /// The next delay; the one after is up to twice as long, up to the cap.
    pub fn next_delay(&mut self) -> Duration {
        let step = self.step.min(self.cap);
        self.step = (self.step * 2).min(self.cap);
        let half = step / 2;
        half + half.mul_f64(fastrand::f64())
    }

    /// Back to `base` after a success.
    pub fn reset(&mut self) {
        self.step = self.base;
    }
}

/// Sleeps until `at`, or forever without one: a timer arm of a `select!` that is off when
/// there is nothing to wait for.
pub async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_are_capped_and_reset() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let first = b.next_delay();
        assert!(first >= Duration::from_millis(50) && first <= Duration::from_millis(100));
        for _ in 0..10 {
            assert!(b.next_delay() <= Duration::from_secs(1));
        }
        assert!(
            b.next_delay() >= Duration::from_millis(500),
            "at the cap, delays stay in its upper half"
        );
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }
}
