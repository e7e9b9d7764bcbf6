//! Crash points for the crash-safety tests: when the environment variable
//! `KARPENTER_RS_CRASH_AT` names a point the process reaches, the process exits there at once,
//! without shutting anything down, as a killed controller would. Unset (always, in production),
//! `hit` is one comparison against a value read once.
//!
//! The points: `after-launch` (an instance exists, its Node does not yet), `during-drain` (the node
//! is cordoned and evictions have been sent), `after-terminate` (the instance is terminated, the
//! Node still holds its finalizer), `consolidation-after-cordon` (a consolidation command has
//! cordoned and marked its nodes, nothing is launched yet), `consolidation-before-delete` (its
//! replacement is initialised, the old nodes are not deleted yet), `interruption-before-delete`
//! (an interruption message was acted on, it is not deleted from the queue yet).

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
