//! The controllers' clock (Karpenter's `clock.Clock`): every time a controller decides by (a TTL,
//! an expiry, a nomination, a back-off, a deletion timeout) is read from the `Clock` of the
//! controllers' `Shared`, so a test can hold time still and move it on with `FakeClock` instead
//! of sleeping. The decision files stay pure and take the time as a parameter; only the edges
//! that call them read a clock.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use jiff::Timestamp;

/// Where the controllers read the time.
pub trait Clock: Send + Sync {
    /// The wall-clock time: what is compared with the timestamps of objects (a node's creation,
    /// a deletion timestamp, an instance's launch time).
    fn now(&self) -> Timestamp;
    /// The monotonic time: what the process's own deadlines and back-offs are measured on.
    fn instant(&self) -> Instant;
}

/// The real clock: the system's wall-clock and monotonic time.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }

    fn instant(&self) -> Instant {
        Instant::now()
    }
}

/// A clock for tests: it stands still at the time it was made with and moves only when
/// `advance` is called, both readings by the same amount. Shared behind an `Arc` by the test and
/// the code under test (hence the mutex).
#[derive(Debug)]
pub struct FakeClock {
    at: Mutex<(Timestamp, Instant)>,
}

impl FakeClock {
    /// A clock that reads `now` and `instant` until it is advanced.
    pub fn new(now: Timestamp, instant: Instant) -> FakeClock {
        FakeClock {
            at: Mutex::new((now, instant)),
        }
    }

    /// Moves both readings on by `by`.
    pub fn advance(&self, by: Duration) {
        let mut at = self.at.lock().unwrap_or_else(|e| e.into_inner());
        let signed = jiff::SignedDuration::try_from(by).expect("a test advances the clock by less than 292 years");
        at.0 =
            at.0.checked_add(signed)
                .expect("a test advances the clock within jiff's range of timestamps");
        at.1 += by;
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Timestamp {
        self.at.lock().unwrap_or_else(|e| e.into_inner()).0
    }

    fn instant(&self) -> Instant {
        self.at.lock().unwrap_or_else(|e| e.into_inner()).1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake clock stands still until advanced, then both readings move by the same amount.
    #[test]
    fn a_fake_clock_moves_only_when_advanced() {
        let (t0, i0) = ("2026-12-06T10:00:00Z".parse::<Timestamp>().unwrap(), Instant::now());
        let clock = FakeClock::new(t0, i0);
        assert_eq!((clock.now(), clock.instant()), (t0, i0));
        clock.advance(Duration::from_secs(90));
        assert_eq!(clock.now(), "2026-12-06T10:01:30Z".parse::<Timestamp>().unwrap());
        assert_eq!(clock.instant(), i0 + Duration::from_secs(90));
    }
}
