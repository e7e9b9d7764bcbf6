//! The batching window: pending pods are collected until no new one has arrived for the idle
//! duration (1 s by default) or the window has been open for the max duration (10 s), so that
//! a Deployment's replicas land on few, well-packed nodes instead of one node each. Triggers
//! coalesce; the window runs on `tokio::time`, so tests can pause time.

use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::{sleep_until, Instant};

/// The batching windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchWindows {
    /// The batch closes when no trigger arrived for this long.
    pub idle: Duration,
    /// The batch closes at the latest after this long.
    pub max: Duration,
}

/// The batch closes when no trigger arrived for this long, by default (`BATCH_IDLE_DURATION`).
pub const DEFAULT_IDLE: Duration = Duration::from_secs(1);
/// The batch closes at the latest after this long, by default (`BATCH_MAX_DURATION`).
pub const DEFAULT_MAX: Duration = Duration::from_secs(10);

impl Default for BatchWindows {
    fn default() -> Self {
        BatchWindows {
            idle: DEFAULT_IDLE,
            max: DEFAULT_MAX,
        }
    }
}

/// Collects triggers into batches.
#[derive(Debug, Default)]
pub struct Batcher {
    notify: Notify,
}

impl Batcher {
    /// A pending pod was seen. Never blocks; several triggers before `wait` collects them count once.
    pub fn trigger(&self) {
        self.notify.notify_one();
    }

    /// Waits for a first trigger, then for the batch to close; returns the window's length.
    pub async fn wait(&self, windows: BatchWindows) -> Duration {
        self.notify.notified().await;
        let opened = Instant::now();
        let deadline = opened + windows.max;
        loop {
            let idle_deadline = (Instant::now() + windows.idle).min(deadline);
            tokio::select! {
                _ = self.notify.notified() => {
                    if Instant::now() >= deadline {
                        break;
                    }
                }
                _ = sleep_until(idle_deadline) => break,
            }
        }
        opened.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test(start_paused = true)]
    async fn closes_after_the_idle_window_without_new_pods() {
        let batcher = Batcher::default();
        batcher.trigger();
        let took = batcher.wait(BatchWindows::default()).await;
        assert_eq!(took, Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn each_new_pod_extends_the_idle_window_up_to_the_max() {
        let batcher = Arc::new(Batcher::default());
        let b = batcher.clone();
        tokio::spawn(async move {
            // A pod every 500 ms, for 30 s: the window never goes idle.
            for _ in 0..60 {
                b.trigger();
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        tokio::task::yield_now().await;
        let took = batcher.wait(BatchWindows::default()).await;
        assert_eq!(took, Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_then_quiet_closes_one_idle_window_after_the_last_pod() {
        let batcher = Arc::new(Batcher::default());
        let b = batcher.clone();
        tokio::spawn(async move {
            for _ in 0..5 {
                b.trigger();
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        tokio::task::yield_now().await;
        let took = batcher.wait(BatchWindows::default()).await;
        assert_eq!(took, Duration::from_millis(1800));
    }

    #[tokio::test(start_paused = true)]
    async fn waits_for_a_first_trigger() {
        let batcher = Batcher::default();
        let waited = tokio::time::timeout(Duration::from_secs(60), batcher.wait(BatchWindows::default())).await;
        assert!(waited.is_err(), "no pods, no batch");
    }
}
