//! Termination's work queue: each deleting node is reconciled on its own, at most once at a
//! time, when it is due (Kubernetes' rate-limited work queue as controller-runtime gives each
//! controller: a key is never processed twice at once, a key added while queued is queued once,
//! and a key whose reconcile failed comes back after a back-off that doubles per failure). A
//! node that drains slowly or whose cloud call fails holds up no other node. Pure: the loop in
//! `mod.rs` feeds it the time.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use super::next_delay;

/// How a node's reconcile ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The node is finished with (its finalizer released, or it is gone).
    Done,
    /// Another step is needed after `Duration` (pods still draining, a back-off still running).
    After(Duration),
    /// The reconcile failed: again after the node's back-off.
    Failed,
}

/// Deleting nodes by name: when each is due, which are being reconciled, and each one's failures.
#[derive(Debug)]
pub struct WorkQueue {
    due: HashMap<String, Instant>,
    in_flight: HashSet<String>,
    backoff: HashMap<String, Duration>,
    min_backoff: Duration,
    max_backoff: Duration,
    /// Spreads the waits of keys that failed together (`retry::jittered` in the controller).
    jitter: fn(Duration) -> Duration,
}

impl WorkQueue {
    /// An empty queue whose failed keys wait `min_backoff`, doubling up to `max_backoff`.
    pub fn new(min_backoff: Duration, max_backoff: Duration) -> WorkQueue {
        WorkQueue {
            due: HashMap::new(),
            in_flight: HashSet::new(),
            backoff: HashMap::new(),
            min_backoff,
            max_backoff,
            jitter: |d| d,
        }
    }

    /// The same queue, each failure's wait passed through `jitter` (which returns at most its
    /// argument).
    pub fn with_jitter(self, jitter: fn(Duration) -> Duration) -> WorkQueue {
        WorkQueue { jitter, ..self }
    }

    /// Queues `name` now, unless it is queued already or being reconciled (then its next turn
    /// comes when that ends) or backing off after a failure.
    pub fn add(&mut self, name: &str, now: Instant) {
        if self.in_flight.contains(name) || self.due.contains_key(name) {
            return;
        }
        self.due.insert(name.to_string(), now);
    }

    /// Up to `slots` minus those in flight of the keys due at `now`, earliest first; each is in
    /// flight until `finished`.
    pub fn take(&mut self, now: Instant, slots: usize) -> Vec<String> {
        let free = slots.saturating_sub(self.in_flight.len());
        let mut ready: Vec<(Instant, String)> = self
            .due
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(n, at)| (*at, n.clone()))
            .collect();
        ready.sort();
        ready.truncate(free);
        ready
            .into_iter()
            .map(|(_, name)| {
                self.due.remove(&name);
                self.in_flight.insert(name.clone());
                name
            })
            .collect()
    }

    /// Records how `name`'s reconcile ended and when it is due again, if at all.
    pub fn finished(&mut self, name: &str, outcome: Outcome, now: Instant) {
        self.in_flight.remove(name);
        match outcome {
            Outcome::Done => {
                self.due.remove(name);
                self.backoff.remove(name);
            }
            Outcome::After(wait) => {
                self.backoff.remove(name);
                self.due.insert(name.to_string(), now + wait);
            }
            Outcome::Failed => {
                let delay = next_delay(self.backoff.get(name).copied(), self.min_backoff, self.max_backoff);
                self.backoff.insert(name.to_string(), delay);
                self.due.insert(name.to_string(), now + (self.jitter)(delay));
            }
        }
    }

    /// Forgets queued keys `keep` refuses (nodes no longer deleting, or gone); keys in flight are
    /// forgotten when they finish.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.due.retain(|name, _| keep(name));
        self.backoff.retain(|name, _| keep(name) || self.in_flight.contains(name));
    }

    /// The failure back-off `name` is in (before jitter), if any.
    pub fn backoff_of(&self, name: &str) -> Option<Duration> {
        self.backoff.get(name).copied()
    }

    /// Keys being reconciled now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Keys waiting for their turn.
    pub fn queued(&self) -> usize {
        self.due.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(1);
    const MAX: Duration = Duration::from_secs(8);

    #[test]
    fn a_key_is_never_taken_twice_at_once_nor_queued_twice() {
        let now = Instant::now();
        let mut q = WorkQueue::new(MIN, MAX);
        q.add("a", now);
        q.add("a", now);
        assert_eq!(q.queued(), 1);
        assert_eq!(q.take(now, 16), ["a"]);
        // Seen again by the next tick while its reconcile runs: not queued beside it.
        q.add("a", now);
        assert!(q.take(now, 16).is_empty());
        q.finished("a", Outcome::Done, now);
        assert_eq!((q.queued(), q.in_flight()), (0, 0));
        // Still deleting at the next tick (the finalizer release not yet in the cache): again.
        q.add("a", now);
        assert_eq!(q.take(now, 16), ["a"]);
    }

    #[test]
    fn at_most_the_slots_run_at_once_earliest_due_first() {
        let now = Instant::now();
        let mut q = WorkQueue::new(MIN, MAX);
        for (i, name) in ["c", "a", "b"].iter().enumerate() {
            q.add(name, now + Duration::from_millis(i as u64));
        }
        let later = now + Duration::from_secs(1);
        assert_eq!(q.take(later, 2), ["c", "a"]);
        assert!(q.take(later, 2).is_empty(), "both slots busy");
        q.finished("c", Outcome::After(Duration::from_secs(1)), later);
        assert_eq!(q.take(later, 2), ["b"]);
        assert!(q.take(later, 2).is_empty(), "c is not due yet");
        assert_eq!(q.take(later + Duration::from_secs(1), 3), ["c"]);
    }

    #[test]
    fn a_failing_key_backs_off_doubling_to_the_cap_and_success_resets_it() {
        let mut now = Instant::now();
        let mut q = WorkQueue::new(MIN, MAX);
        q.add("a", now);
        q.add("b", now);
        let mut waits = Vec::new();
        for _ in 0..5 {
            assert!(q.take(now, 16).contains(&"a".to_string()));
            q.finished("a", Outcome::Failed, now);
            let wait = q.backoff_of("a").unwrap();
            waits.push(wait.as_secs());
            assert!(
                q.take(now + wait - Duration::from_millis(1), 16).iter().all(|n| n != "a"),
                "not before its back-off"
            );
            now += wait;
        }
        assert_eq!(waits, [1, 2, 4, 8, 8]);
        // The other key was not held up by it.
        q.finished("b", Outcome::Done, now);
        assert_eq!(q.take(now, 16), ["a"]);
        q.finished("a", Outcome::After(Duration::ZERO), now);
        assert_eq!(q.backoff_of("a"), None);
    }

    #[test]
    fn keys_no_longer_deleting_are_forgotten() {
        let now = Instant::now();
        let mut q = WorkQueue::new(MIN, MAX);
        q.add("a", now);
        q.add("b", now);
        q.take(now, 1);
        q.retain(|name| name != "a" && name != "b");
        assert_eq!(q.queued(), 0);
        assert_eq!(q.in_flight(), 1, "a reconcile running is left to finish");
    }
}
