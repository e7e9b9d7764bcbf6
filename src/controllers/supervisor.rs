//! Supervision of the controllers: each runs under `supervise`, which catches a panic, logs it
//! (the panic hook of `telemetry::log_panics` has already logged its backtrace), counts it in
//! `karpenter_controller_panics_total{controller}` and starts the controller again after a
//! back-off, while the others go on. `Liveness` records every controller's passes and the beats
//! of its loop; `/healthz` fails while one of them is stuck in a pass past its deadline, has
//! stopped beating (its loop no longer runs: a wait that never ends, a task gone), keeps
//! panicking, or a watch of the shared cluster view has ended, so the kubelet restarts the
//! process (and another replica takes over the lease meanwhile).
//!
//! Karpenter's controller-runtime recovers a reconciler's panic the same way
//! (`RecoverPanic`) and its manager's health check fails when a controller stops; the deadlines
//! here are our own, sized to each controller's longest legitimate pass.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use futures::FutureExt;
use tokio_util::sync::CancellationToken;
use tracing::{error, warn};

use crate::metrics::Metrics;

// `Liveness` lives beside the metrics (which every controller holds); these paths stay for its users.
pub use crate::metrics::liveness::{Liveness, Pass, PANICS_UNTIL_UNHEALTHY, RESTART_MAX};

/// The first wait before a panicked controller starts again; it doubles with every panic in a
/// row, up to `RESTART_MAX`.
pub const RESTART_BASE: Duration = Duration::from_secs(1);
/// How long one pass of each controller may run before `/healthz` reports it stuck: the longest
/// legitimate pass with room to spare.
pub mod deadline {
    use std::time::Duration;

    pub use crate::metrics::liveness::deadline::{parse_override, OVERRIDE_ENV};

    /// A provisioning pass: the catalogue, a simulation and launches (each launch bounded by the
    /// cloud client's retries, the Node's appearance in the cache by 30 s).
    pub const PROVISIONING: Duration = Duration::from_secs(10 * 60);
    /// A deprovisioning pass waits for a replacement to initialise (up to its 10-min timeout).
    pub const DEPROVISIONING: Duration = Duration::from_secs(20 * 60);
    /// A termination pass: one step for every deleting node.
    pub const TERMINATION: Duration = Duration::from_secs(10 * 60);
    /// A garbage-collection pass: one listing of instances and nodes, bounded deletions.
    pub const GARBAGE_COLLECTION: Duration = Duration::from_secs(10 * 60);
    /// An interruption pass: a long poll of 20 s and the handling of its messages.
    pub const INTERRUPTION: Duration = Duration::from_secs(10 * 60);
    /// A tick of the binder: the bindings of at most a few nodes' pods.
    pub const BINDER: Duration = Duration::from_secs(5 * 60);
    /// A tick of node lifecycle: labelling and deleting nodes (initialisation, registration TTL).
    pub const NODE_LIFECYCLE: Duration = Duration::from_secs(10 * 60);
    /// A tick of status: the Provisioners' `status.resources` and the gauges.
    pub const STATUS: Duration = Duration::from_secs(10 * 60);
}

/// The wait before starting a controller again after its `panics_in_a_row`-th panic in a row.
pub fn restart_delay(panics_in_a_row: u32) -> Duration {
    let doublings = panics_in_a_row.saturating_sub(1).min(16);
    RESTART_BASE.saturating_mul(1 << doublings).min(RESTART_MAX)
}

/// Runs the controller that `start` makes until `shutdown`: a panic is logged, counted and the
/// controller made anew by `start` after `restart_delay`. A controller that returns on its own
/// (interruption handling with no queue configured) is done.
pub async fn supervise<F, Fut>(controller: &'static str, deadline: Duration, metrics: Metrics, shutdown: CancellationToken, mut start: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    metrics.liveness.register(controller, deadline);
    metrics.controller_panics.with_label_values(&[controller]);
    let mut in_a_row = 0u32;
    loop {
        let started = Instant::now();
        // Every log line of the controller carries its name (`controller` in JSON logs).
        let span = tracing::info_span!("controller", controller);
        let outcome = AssertUnwindSafe(tracing::Instrument::instrument(start(), span))
            .catch_unwind()
            .await;
        if shutdown.is_cancelled() {
            return;
        }
        let Err(panic) = outcome else {
            metrics.liveness.finished(controller);
            return;
        };
        // A controller that ran a while before this panic starts again at once-ish.
        in_a_row = if started.elapsed() > RESTART_MAX {
            1
        } else {
            in_a_row.saturating_add(1)
        };
        // Jittered within it: controllers that panic on the same bad value do not restart together.
        let delay = crate::retry::jittered(restart_delay(in_a_row));
        metrics.controller_panics.with_label_values(&[controller]).inc();
        metrics.liveness.panicked(controller);
        error!(
            controller,
            panic = %panic_message(panic.as_ref()),
            restart_in_ms = delay.as_millis() as u64,
            "controller panicked; starting it again (the other controllers go on)"
        );
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
        warn!(controller, "starting the controller again after a panic");
    }
}

/// The message a panic carried.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_pass_past_its_deadline_is_a_problem_and_a_finished_one_is_not() {
        let liveness = Liveness::default();
        liveness.register("deprovisioning", Duration::from_secs(60));
        let start = Instant::now();
        let pass = liveness.pass("deprovisioning");
        assert!(liveness.problems(start + Duration::from_secs(59)).is_empty());
        let problems = liveness.problems(start + Duration::from_secs(120));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("deprovisioning: a pass has run for"), "{problems:?}");
        drop(pass);
        liveness.beat("deprovisioning", Duration::from_secs(10));
        assert!(liveness.problems(Instant::now() + Duration::from_secs(69)).is_empty());
    }

    #[test]
    fn a_loop_silent_past_its_promised_beat_and_deadline_is_a_problem_until_it_beats() {
        let liveness = Liveness::default();
        liveness.register("binder", Duration::from_secs(60));
        liveness.beat("binder", Duration::from_secs(10));
        let now = Instant::now();
        assert!(liveness.problems(now + Duration::from_secs(69)).is_empty());
        let problems = liveness.problems(now + Duration::from_secs(71));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("binder: its loop has not run for 7"), "{problems:?}");
        liveness.beat("binder", Duration::from_secs(10));
        assert!(liveness.problems(Instant::now() + Duration::from_secs(69)).is_empty());
    }

    #[test]
    fn a_loop_that_never_beats_is_reported_after_its_deadline() {
        let liveness = Liveness::default();
        liveness.register("termination", Duration::from_secs(60));
        let now = Instant::now();
        assert!(liveness.problems(now + Duration::from_secs(59)).is_empty());
        assert_eq!(liveness.problems(now + Duration::from_secs(61)).len(), 1);
    }

    #[test]
    fn a_finished_controller_is_not_tracked_and_a_broken_part_always_is() {
        let liveness = Liveness::default();
        liveness.register("interruption", Duration::from_secs(60));
        liveness.finished("interruption");
        assert!(liveness.problems(Instant::now() + Duration::from_secs(3600)).is_empty());
        liveness.broken("the watch of Pod ended".to_string());
        assert_eq!(liveness.problems(Instant::now()), vec!["the watch of Pod ended".to_string()]);
    }

    #[test]
    fn panics_in_a_row_make_it_unhealthy_until_a_pass_finishes() {
        let liveness = Liveness::default();
        liveness.register("termination", Duration::from_secs(60));
        for _ in 0..PANICS_UNTIL_UNHEALTHY - 1 {
            liveness.panicked("termination");
        }
        assert!(liveness.problems(Instant::now()).is_empty());
        liveness.panicked("termination");
        assert_eq!(
            liveness.problems(Instant::now()),
            vec!["termination: panicked 5 times in a row".to_string()]
        );
        drop(liveness.pass("termination"));
        assert!(liveness.problems(Instant::now()).is_empty());
    }

    #[test]
    fn a_pass_that_unwinds_does_not_clear_the_panics() {
        let liveness = Liveness::default();
        liveness.register("provisioning", Duration::from_secs(60));
        for _ in 0..PANICS_UNTIL_UNHEALTHY - 1 {
            liveness.panicked("provisioning");
        }
        let l = liveness.clone();
        let _ = std::panic::catch_unwind(move || {
            let _pass = l.pass("provisioning");
            panic!("a pass panics");
        });
        liveness.panicked("provisioning");
        assert_eq!(liveness.problems(Instant::now()).len(), 1);
    }

    #[test]
    fn restarts_back_off_to_a_minute() {
        assert_eq!(restart_delay(1), Duration::from_secs(1));
        assert_eq!(restart_delay(2), Duration::from_secs(2));
        assert_eq!(restart_delay(4), Duration::from_secs(8));
        assert_eq!(restart_delay(7), RESTART_MAX);
        assert_eq!(restart_delay(u32::MAX), RESTART_MAX);
    }

    #[tokio::test]
    async fn a_panicking_controller_is_started_again_and_counted() {
        tokio::time::pause();
        let metrics = Metrics::new();
        let shutdown = CancellationToken::new();
        let starts = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let (s, stop) = (starts.clone(), shutdown.clone());
        supervise(
            "garbagecollection",
            Duration::from_secs(60),
            metrics.clone(),
            shutdown.clone(),
            move || {
                let (s, stop) = (s.clone(), stop.clone());
                async move {
                    if s.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < 3 {
                        panic!("failpoint");
                    }
                    // The fourth start runs until shutdown.
                    stop.cancel();
                }
            },
        )
        .await;
        assert_eq!(starts.load(std::sync::atomic::Ordering::SeqCst), 4);
        assert_eq!(metrics.controller_panics.with_label_values(&["garbagecollection"]).get(), 3);
    }

    #[tokio::test]
    async fn a_controller_that_returns_on_its_own_is_no_longer_tracked() {
        let metrics = Metrics::new();
        supervise(
            "interruption",
            Duration::from_secs(60),
            metrics.clone(),
            CancellationToken::new(),
            || async {},
        )
        .await;
        assert!(metrics.liveness.problems(Instant::now() + Duration::from_secs(3600)).is_empty());
    }
}
