//! The insufficient-capacity (ICE) cache: offerings a launch found without capacity are
//! unavailable for `UNAVAILABLE_OFFERINGS_TTL`; marking again restarts the clock. Pure: the
//! caller passes `now`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::cloudprovider::OfferingId;

/// How long an offering stays unavailable after a capacity error (Karpenter's 3 minutes).
pub const UNAVAILABLE_OFFERINGS_TTL: Duration = Duration::from_secs(3 * 60);

/// Offerings without capacity, until when.
#[derive(Debug, Default)]
pub struct UnavailableOfferings {
    until: HashMap<OfferingId, Instant>,
    ttl: Option<Duration>,
}

impl UnavailableOfferings {
    /// An empty cache with Karpenter's TTL.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty cache with another TTL.
    pub fn with_ttl(ttl: Duration) -> Self {
        UnavailableOfferings {
            until: HashMap::new(),
            ttl: Some(ttl),
        }
    }

    fn ttl(&self) -> Duration {
        self.ttl.unwrap_or(UNAVAILABLE_OFFERINGS_TTL)
    }

    /// Marks an offering unavailable from `now`; expired entries are dropped on the way.
    pub fn mark(&mut self, offering: OfferingId, now: Instant) {
        self.until.retain(|_, until| *until > now);
        let until = now + self.ttl();
        self.until.insert(offering, until);
    }

    /// Whether an offering is unavailable at `now`.
    pub fn is_unavailable(&self, instance_type: &str, zone: &str, capacity_type: &str, now: Instant) -> bool {
        let key = OfferingId {
            instance_type: instance_type.to_string(),
            zone: zone.to_string(),
            capacity_type: capacity_type.to_string(),
        };
        self.until.get(&key).is_some_and(|until| *until > now)
    }

    /// The offerings unavailable at `now`, each with when it is available again.
    pub fn unavailable_until(&self, now: Instant) -> Vec<(OfferingId, Instant)> {
        let mut out: Vec<(OfferingId, Instant)> = self.until.iter().filter(|(_, u)| **u > now).map(|(o, u)| (o.clone(), *u)).collect();
        out.sort();
        out
    }

    /// `unavailable_until` on the wall clock, `now` being `wall`.
    pub fn unavailable_until_wall(&self, now: Instant, wall: jiff::Timestamp) -> Vec<(OfferingId, jiff::Timestamp)> {
        self.unavailable_until(now)
            .into_iter()
            .map(|(o, until)| (o, wall + until.saturating_duration_since(now)))
            .collect()
    }

    /// The offerings unavailable at `now`.
    pub fn unavailable(&self, now: Instant) -> Vec<OfferingId> {
        let mut out: Vec<OfferingId> = self.until.iter().filter(|(_, u)| **u > now).map(|(o, _)| o.clone()).collect();
        out.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offering(t: &str, zone: &str, ct: &str) -> OfferingId {
        OfferingId {
            instance_type: t.into(),
            zone: zone.into(),
            capacity_type: ct.into(),
        }
    }

    #[test]
    fn offerings_are_unavailable_for_three_minutes_after_a_capacity_error() {
        let t0 = Instant::now();
        let mut cache = UnavailableOfferings::new();
        cache.mark(offering("t3.large", "ap-northeast-2a", "spot"), t0);
        assert!(cache.is_unavailable("t3.large", "ap-northeast-2a", "spot", t0));
        assert!(cache.is_unavailable("t3.large", "ap-northeast-2a", "spot", t0 + Duration::from_secs(179)));
        assert!(!cache.is_unavailable("t3.large", "ap-northeast-2a", "spot", t0 + Duration::from_secs(180)));
        assert!(!cache.is_unavailable("t3.large", "ap-northeast-2a", "on-demand", t0));
        assert!(!cache.is_unavailable("t3.large", "ap-northeast-2c", "spot", t0));
    }

    #[test]
    fn marking_again_restarts_the_clock() {
        let t0 = Instant::now();
        let mut cache = UnavailableOfferings::new();
        cache.mark(offering("t3.large", "ap-northeast-2a", "on-demand"), t0);
        cache.mark(offering("t3.large", "ap-northeast-2a", "on-demand"), t0 + Duration::from_secs(120));
        // What explain reports: when it is tried again.
        assert_eq!(
            cache.unavailable_until(t0 + Duration::from_secs(130)),
            [(offering("t3.large", "ap-northeast-2a", "on-demand"), t0 + Duration::from_secs(300))]
        );
        assert!(cache.is_unavailable("t3.large", "ap-northeast-2a", "on-demand", t0 + Duration::from_secs(250)));
        assert!(!cache.is_unavailable("t3.large", "ap-northeast-2a", "on-demand", t0 + Duration::from_secs(300)));
    }

    #[test]
    fn lists_only_current_entries_and_forgets_expired_ones() {
        let t0 = Instant::now();
        let mut cache = UnavailableOfferings::with_ttl(Duration::from_secs(10));
        cache.mark(offering("m5.large", "ap-northeast-2a", "spot"), t0);
        cache.mark(offering("c5.large", "ap-northeast-2c", "spot"), t0 + Duration::from_secs(5));
        assert_eq!(
            cache.unavailable(t0 + Duration::from_secs(12)),
            vec![offering("c5.large", "ap-northeast-2c", "spot")]
        );
        cache.mark(offering("t3.large", "ap-northeast-2b", "spot"), t0 + Duration::from_secs(20));
        assert_eq!(cache.until.len(), 1, "expired entries are dropped when marking");
    }
}
