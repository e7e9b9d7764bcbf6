//! Where the controllers' CPU-bound work runs: the catalogue translation, the scheduling
//! simulation, the consolidation search and explain's answers take from milliseconds to seconds
//! (a consolidation evaluation is bounded only by its 60 s + 180 s timeouts), so they run on
//! tokio's blocking pool, never on a runtime worker. A controller awaiting one holds no worker:
//! the drains, the binder and the interruption loop are polled all the while.
//!
//! The work owns what it reads (`'static`), so a controller moves its snapshot in and gets it
//! back with the result. A controller task that is aborted (a lost lease) while its work runs
//! sets the work's `Abandoned` flag, which a long search reads to stop early.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Set once nobody awaits the work's result any more.
#[derive(Clone, Debug, Default)]
pub struct Abandoned(Arc<AtomicBool>);

impl Abandoned {
    /// Whether the work's result is no longer awaited.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Sets the flag when the awaiting future is dropped before the work returned.
struct SetOnDrop(Abandoned, bool);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        if !self.1 {
            self.0 .0.store(true, Ordering::Relaxed);
        }
    }
}

/// Runs `work` on the blocking pool and returns its result. A panic in `work` goes on in the
/// caller, as if `work` had run there (the supervisor then restarts the controller).
pub async fn run<T, F>(work: F) -> T
where
    F: FnOnce(&Abandoned) -> T + Send + 'static,
    T: Send + 'static,
{
    let abandoned = Abandoned::default();
    let mut guard = SetOnDrop(abandoned.clone(), false);
    let joined = tokio::task::spawn_blocking(move || work(&abandoned)).await;
    guard.1 = true;
    match joined {
        Ok(value) => value,
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            // Only a runtime shutting down cancels blocking work before it starts; the
            // controller's task ends with it.
            Err(e) => panic!("the runtime shut down before CPU-bound work ran: {e}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn work_runs_off_the_runtime_so_a_single_worker_keeps_polling_other_tasks() {
        // One worker: were the work on it, nothing else could run until the work ended, and the
        // work waits for this task to release it.
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let work = tokio::spawn(run(move |_| {
            started_tx.send(()).unwrap();
            release_rx
                .recv_timeout(Duration::from_secs(30))
                .expect("released by the other task");
            7
        }));
        started_rx.await.unwrap();
        // The worker is free: a timer fires and this task goes on while the work still runs.
        tokio::time::sleep(Duration::from_millis(10)).await;
        release_tx.send(()).unwrap();
        assert_eq!(work.await.unwrap(), 7);
    }

    #[tokio::test]
    async fn a_panic_in_the_work_is_the_callers_panic() {
        let caller = tokio::spawn(run(|_| -> u8 { panic!("boom") }));
        let e = caller.await.unwrap_err();
        assert!(e.is_panic());
        assert_eq!(e.into_panic().downcast_ref::<&str>(), Some(&"boom"));
    }

    #[tokio::test]
    async fn work_whose_caller_went_away_is_told_so() {
        let (seen_tx, seen_rx) = tokio::sync::oneshot::channel();
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let caller = tokio::spawn(run(move |abandoned| {
            started_tx.send(()).unwrap();
            let until = std::time::Instant::now() + Duration::from_secs(30);
            while !abandoned.is_set() && std::time::Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
            seen_tx.send(abandoned.is_set()).unwrap();
        }));
        started_rx.await.unwrap();
        caller.abort();
        assert!(seen_rx.await.unwrap(), "the work was not told its caller went away");
    }
}
