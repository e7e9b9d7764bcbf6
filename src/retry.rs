//! One pacing for every loop that waits after a failure: the delay starts at a minimum and
//! doubles up to a maximum, and each wait is jittered between half the delay and the delay
//! (backon's exponential back-off with jitter), so that loops and replicas that failed together
//! (an API server or AWS outage) do not come back in lock step. A wait is never longer than the
//! maximum, so the maximum keeps its meaning for how soon a recovery is noticed.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// The waits after consecutive failures: between `min/2` and `min` after the first, doubling up
/// to between `max/2` and `max`; `reset` after a success starts over.
pub struct Backoff {
    builder: ExponentialBuilder,
    waits: ExponentialBackoff,
}

impl Backoff {
    /// Waits from `min` doubling to `max`, jittered.
    pub fn new(min: Duration, max: Duration) -> Backoff {
        let max = max.max(min);
        let builder = ExponentialBuilder::default()
            .with_min_delay(min / 2)
            .with_max_delay(max / 2)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times();
        Backoff {
            waits: builder.build(),
            builder,
        }
    }

    /// How long to wait after this failure.
    pub fn next_wait(&mut self) -> Duration {
        self.waits
            .next()
            .expect("a back-off built without a limit on the number of tries never ends")
    }

    /// After a success: the next failure waits the least again.
    pub fn reset(&mut self) {
        self.waits = self.builder.build();
    }
}

/// `delay` jittered as `Backoff` does: a wait between half of it and all of it.
pub fn jittered(delay: Duration) -> Duration {
    ExponentialBuilder::default()
        .with_min_delay(delay / 2)
        .with_max_delay(delay / 2)
        .with_jitter()
        .with_max_times(1)
        .build()
        .next()
        .unwrap_or(delay)
        .min(delay)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_within_their_jitter_up_to_the_maximum_and_start_over_after_a_reset() {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(8));
        let bounds = [(500, 1000), (1000, 2000), (2000, 4000), (4000, 8000), (4000, 8000), (4000, 8000)];
        for (i, (low, high)) in bounds.iter().enumerate() {
            let wait = backoff.next_wait().as_millis() as u64;
            assert!((*low..=*high).contains(&wait), "wait {i}: {wait} ms not within {low}..={high}");
        }
        backoff.reset();
        let wait = backoff.next_wait().as_millis() as u64;
        assert!((500..=1000).contains(&wait), "after a reset: {wait} ms");
    }

    #[test]
    fn waits_are_spread_not_equal() {
        let waits: std::collections::BTreeSet<u128> = (0..20)
            .map(|_| {
                Backoff::new(Duration::from_secs(10), Duration::from_secs(60))
                    .next_wait()
                    .as_micros()
            })
            .collect();
        assert!(waits.len() > 1, "20 first waits all equal: {waits:?}");
        for _ in 0..100 {
            let wait = jittered(Duration::from_secs(30));
            assert!(wait >= Duration::from_secs(15) && wait <= Duration::from_secs(30), "{wait:?}");
        }
    }
}
