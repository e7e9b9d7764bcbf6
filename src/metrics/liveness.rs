//! What `/healthz` knows of the controllers: `Liveness` records every supervised controller's
//! passes, the beats of its loop and its panics in a row, and says why the process is not
//! healthy (a pass stuck past its deadline, a loop that stopped beating, a controller that keeps
//! panicking, a part that ended for good). Kept beside the metrics because every controller
//! already holds `Metrics`; `controllers::supervisor` records into it and re-exports it. No I/O
//! here: the deadline override is read by `config` and handed in.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The longest wait before a panicked controller starts again (`controllers::supervisor` backs
/// off up to it), so a panicked controller's loop beats again within it.
pub const RESTART_MAX: Duration = Duration::from_secs(60);
/// Panics in a row (no pass finished between them) after which `/healthz` fails: restarting
/// the controller does not help, so the process should be restarted, visibly.
pub const PANICS_UNTIL_UNHEALTHY: u32 = 5;

/// The deadline override that tests use to see a stall reported quickly.
pub mod deadline {
    use std::time::Duration;

    /// The environment variable that sets every deadline to its number of seconds, so that a
    /// test can see a stall reported without waiting minutes (never set by the chart).
    pub const OVERRIDE_ENV: &str = "KARPENTER_RS_LIVENESS_DEADLINE_SECONDS";

    /// The deadline a value of `KARPENTER_RS_LIVENESS_DEADLINE_SECONDS` sets: its seconds when
    /// it is a positive number, else none (the shipped deadlines stand).
    pub fn parse_override(value: &str) -> Option<Duration> {
        value.trim().parse::<u64>().ok().filter(|s| *s > 0).map(Duration::from_secs)
    }
}

/// What `/healthz` knows of every supervised controller and loop. Cheap to clone; shared by the
/// controllers (through `Metrics::liveness`) and the health endpoint.
#[derive(Clone, Default)]
pub struct Liveness(Arc<Mutex<Inner>>);

#[derive(Default)]
struct Inner {
    loops: BTreeMap<&'static str, LoopState>,
    /// Parts that ended for good (a watch whose stream ended), with why.
    broken: Vec<String>,
    /// The deadline every controller registered from now on gets instead of its own.
    deadline_override: Option<Duration>,
}

#[derive(Clone, Debug)]
struct LoopState {
    deadline: Duration,
    busy_since: Option<Instant>,
    /// The loop's last sign of life, and how soon it said the next one comes.
    last_beat: Instant,
    next_within: Duration,
    panics_in_a_row: u32,
}

impl Liveness {
    /// Starts tracking `controller`, whose passes may each take up to `deadline`. Until its
    /// first beat or pass, it counts as having beaten now and promised the next beat at once:
    /// a loop that never starts is reported `deadline` later.
    pub fn register(&self, controller: &'static str, deadline: Duration) {
        let mut inner = self.lock();
        let deadline = inner.deadline_override.unwrap_or(deadline);
        inner.loops.entry(controller).or_insert(LoopState {
            deadline,
            busy_since: None,
            last_beat: Instant::now(),
            next_within: Duration::ZERO,
            panics_in_a_row: 0,
        });
    }

    /// Gives every controller registered from now on `deadline` instead of its own (`None`: each
    /// keeps its own), so that a test can see a stall reported without waiting minutes.
    pub fn set_deadline_override(&self, deadline: Option<Duration>) {
        self.lock().deadline_override = deadline;
    }

    /// Stops tracking `controller`: it finished on its own (interruption handling with no queue).
    pub fn finished(&self, controller: &'static str) {
        self.lock().loops.remove(controller);
    }

    /// A sign of life from `controller`'s loop, which promises the next one within
    /// `next_within` (its longest wait between beats). A loop silent for `deadline` past its
    /// promise is reported.
    pub fn beat(&self, controller: &'static str, next_within: Duration) {
        if let Some(state) = self.lock().loops.get_mut(controller) {
            state.last_beat = Instant::now();
            state.next_within = next_within;
        }
    }

    /// Records that a part the controllers depend on ended for good; `/healthz` fails from now on.
    pub fn broken(&self, why: String) {
        self.lock().broken.push(why);
    }

    /// Marks a pass of `controller` as running until the returned guard is dropped. A pass that
    /// ends (with success or an error) clears the controller's panics in a row; one that unwinds
    /// does not. A pass is a beat when it starts and when it ends.
    pub fn pass(&self, controller: &'static str) -> Pass {
        if let Some(state) = self.lock().loops.get_mut(controller) {
            let now = Instant::now();
            state.busy_since = Some(now);
            state.last_beat = now;
        }
        Pass {
            liveness: self.clone(),
            controller,
        }
    }

    /// Records a panic of `controller`.
    pub fn panicked(&self, controller: &'static str) {
        if let Some(state) = self.lock().loops.get_mut(controller) {
            state.busy_since = None;
            state.panics_in_a_row = state.panics_in_a_row.saturating_add(1);
            // The supervisor's restart back-off is the next wait.
            state.last_beat = Instant::now();
            state.next_within = RESTART_MAX;
        }
    }

    /// Why the process is not healthy at `now`: a pass past its deadline, a loop silent past its
    /// promised beat by more than its deadline, a controller that keeps panicking, a part that
    /// ended. Empty when healthy.
    pub fn problems(&self, now: Instant) -> Vec<String> {
        let inner = self.lock();
        let loops = inner.loops.iter().filter_map(|(name, state)| {
            if let Some(since) = state.busy_since {
                let running = now.saturating_duration_since(since);
                if running > state.deadline {
                    return Some(format!(
                        "{name}: a pass has run for {} s, past its deadline of {} s",
                        running.as_secs(),
                        state.deadline.as_secs()
                    ));
                }
            } else {
                let silent = now.saturating_duration_since(state.last_beat);
                if silent > state.next_within.saturating_add(state.deadline) {
                    return Some(format!(
                        "{name}: its loop has not run for {} s (next run was due within {} s; deadline {} s)",
                        silent.as_secs(),
                        state.next_within.as_secs(),
                        state.deadline.as_secs()
                    ));
                }
            }
            (state.panics_in_a_row >= PANICS_UNTIL_UNHEALTHY)
                .then(|| format!("{name}: panicked {} times in a row", state.panics_in_a_row))
        });
        loops.chain(inner.broken.iter().cloned()).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running pass (see `Liveness::pass`).
pub struct Pass {
    liveness: Liveness,
    controller: &'static str,
}

impl Drop for Pass {
    fn drop(&mut self) {
        let unwinding = std::thread::panicking();
        if let Some(state) = self.liveness.lock().loops.get_mut(self.controller) {
            state.busy_since = None;
            state.last_beat = Instant::now();
            if !unwinding {
                state.panics_in_a_row = 0;
            }
        }
    }
}
