//! Crash points for the crash-safety tests: when the environment variable
//! `KARPENTER_RS_CRASH_AT` names a point the process reaches, the process exits there at once,
//! without shutting anything down, as a killed controller would. Unset (always, in production),
//! `hit` is one comparison against a value read once.
//!
//! The points: `after-launch` (an instance exists, its Node does not yet), `during-drain` (the node
//! is cordoned and evictions have been sent), `after-terminate` (the instance is terminated, the
//! Node still holds its finalizer), `consolidation-after-cordon` (a consolidation command has
//! cordoned and marked its nodes, nothing is launched yet), `consolidation-before-delete` (its
//! replacement is initialised, the old nodes are not deleted yet), `replacement-after-cordon` (an
//! expired or drifted node is cordoned and marked, nothing is launched yet),
//! `replacement-before-delete` (its replacement is Ready, the node is not deleted yet),
//! `interruption-before-delete` (an interruption message was acted on, it is not deleted from the
//! queue yet).
//!
//! `KARPENTER_RS_PANIC_IN=<controller>[:<passes>]` makes a controller's passes panic (every
//! one, or its first `<passes>`), for the supervision tests: `panic_point` is called at the start
//! of each pass of `provisioning`, `deprovisioning`, `termination`, `garbagecollection` and
//! `interruption`.
//!
//! `KARPENTER_RS_BUSY_IN=<controller>:<seconds>` makes each pass of a controller start with that
//! long a stretch of blocking work, run as the controllers run their CPU-bound work (the
//! simulation, the consolidation search: on the blocking pool, `cpu`), for the test
//! that one busy controller holds up no other. `pass_point` is both.

use std::sync::OnceLock;

/// The environment variable naming the point to crash at.
pub const CRASH_AT_ENV: &str = "KARPENTER_RS_CRASH_AT";
/// The exit status of a crash at a failpoint.
pub const CRASH_EXIT_CODE: i32 = 86;

/// Exits the process with `CRASH_EXIT_CODE` if `KARPENTER_RS_CRASH_AT` is `point`.
pub fn hit(point: &str) {
    static CRASH_AT: OnceLock<Option<String>> = OnceLock::new();
    let crash_at = CRASH_AT.get_or_init(|| std::env::var(CRASH_AT_ENV).ok().filter(|v| !v.is_empty()));
    if crash_at.as_deref() == Some(point) {
        eprintln!("{CRASH_AT_ENV}={point}: exiting here");
        std::process::exit(CRASH_EXIT_CODE);
    }
}

/// The environment variable naming a controller whose passes panic.
pub const PANIC_IN_ENV: &str = "KARPENTER_RS_PANIC_IN";

/// Panics if `KARPENTER_RS_PANIC_IN` names `controller` and its panics are not used up.
pub fn panic_point(controller: &str) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static PANIC_IN: OnceLock<Option<(String, Option<u64>)>> = OnceLock::new();
    static PANICKED: AtomicU64 = AtomicU64::new(0);
    let Some((name, passes)) = PANIC_IN.get_or_init(|| std::env::var(PANIC_IN_ENV).ok().and_then(|v| parse_panic_in(&v))) else {
        return;
    };
    if name != controller {
        return;
    }
    if passes.is_some_and(|n| PANICKED.fetch_add(1, Ordering::SeqCst) >= n) {
        return;
    }
    panic!("{PANIC_IN_ENV}={name}: a failpoint panics this pass of {controller}");
}

/// The environment variable naming a controller whose passes start with blocking work.
pub const BUSY_IN_ENV: &str = "KARPENTER_RS_BUSY_IN";

/// Where every pass of `controller` starts: `panic_point`, then `busy_point`.
pub async fn pass_point(controller: &str) {
    panic_point(controller);
    busy_point(controller).await;
}

/// Blocks for the seconds `KARPENTER_RS_BUSY_IN` gives when it names `controller`, on the
/// blocking pool as the controllers' own CPU-bound work runs.
pub async fn busy_point(controller: &str) {
    static BUSY_IN: OnceLock<Option<(String, u64)>> = OnceLock::new();
    let busy = BUSY_IN.get_or_init(|| std::env::var(BUSY_IN_ENV).ok().and_then(|v| parse_busy_in(&v)));
    if let Some((name, seconds)) = busy {
        if name == controller {
            tracing::warn!(controller, seconds, "{BUSY_IN_ENV}: a failpoint keeps this pass busy");
            let busy = std::time::Duration::from_secs(*seconds);
            crate::cpu::run(move |_| std::thread::sleep(busy)).await;
        }
    }
}

/// `<controller>:<seconds>`; None for anything else.
pub fn parse_busy_in(value: &str) -> Option<(String, u64)> {
    let (name, seconds) = value.split_once(':')?;
    let name = name.trim();
    if name.is_empty() {
        return None;
    }
    Some((name.to_string(), seconds.trim().parse().ok()?))
}

/// The environment variable naming a loop that stalls (stops at an await that never ends).
pub const STALL_IN_ENV: &str = "KARPENTER_RS_STALL_IN";

/// Never returns when `KARPENTER_RS_STALL_IN` names `loop_name`: the loop stops as one waiting on
/// a call that never answers would, without a panic and outside any pass.
pub async fn stall_point(loop_name: &str) {
    static STALL_IN: OnceLock<Option<String>> = OnceLock::new();
    let stall = STALL_IN.get_or_init(|| std::env::var(STALL_IN_ENV).ok().map(|v| v.trim().to_string()));
    if stall.as_deref() == Some(loop_name) {
        tracing::warn!(loop_name, "{STALL_IN_ENV}: a failpoint stalls this loop for good");
        std::future::pending::<()>().await;
    }
}

/// `<controller>` (every pass) or `<controller>:<passes>`; None for an empty or unreadable value.
pub fn parse_panic_in(value: &str) -> Option<(String, Option<u64>)> {
    let (name, passes) = match value.split_once(':') {
        Some((name, n)) => (name, Some(n.trim().parse().ok()?)),
        None => (value, None),
    };
    let name = name.trim();
    (!name.is_empty()).then(|| (name.to_string(), passes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_in_names_a_controller_and_optionally_a_count() {
        assert_eq!(parse_panic_in("deprovisioning"), Some(("deprovisioning".into(), None)));
        assert_eq!(parse_panic_in("termination:3"), Some(("termination".into(), Some(3))));
        assert_eq!(parse_panic_in(""), None);
        assert_eq!(parse_panic_in("termination:x"), None);
    }

    #[test]
    fn busy_in_names_a_controller_and_its_seconds() {
        assert_eq!(parse_busy_in("deprovisioning:90"), Some(("deprovisioning".into(), 90)));
        assert_eq!(parse_busy_in("deprovisioning"), None);
        assert_eq!(parse_busy_in(":5"), None);
        assert_eq!(parse_busy_in("termination:x"), None);
    }
}
