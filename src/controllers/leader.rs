//! Leader election on a `coordination.k8s.io` Lease, so that with several replicas exactly one
//! runs the controllers while every replica serves the webhook. The decision (create, renew,
//! take over an expired lease, or follow) is a pure function of the Lease and of how long this
//! replica has seen it unchanged, by its own clock: the holder's `renewTime` is written by the
//! holder's clock, and a follower whose clock runs ahead would otherwise take over a lease that
//! is still being renewed (client-go's `observedTime` rule, which Karpenter's manager uses). The loop
//! around it reads and writes the Lease with optimistic concurrency (resourceVersion) and a
//! deadline, so a leader that cannot renew within the renew deadline (10 s) stops leading before
//! its lease (15 s) lets another replica take over (controller-runtime's rule, which Karpenter
//! follows: core@v0.27.0:cmd/controller/main.go through operator.NewOperator).

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::Api;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

/// Lease settings (controller-runtime's defaults: 15 s lease, 10 s renew deadline, 2 s retry).
#[derive(Clone, Debug)]
pub struct LeaderConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// Who this replica is (pod name, or host name plus a random suffix).
    pub identity: String,
    /// How long a lease is valid without renewal, as the other replicas judge it.
    pub lease_duration: Duration,
    /// How long the leader may go without a successful renewal before it stops leading; shorter
    /// than `lease_duration`, so that it stops before another replica may take over.
    pub renew_deadline: Duration,
    /// How often the Lease is read and renewed.
    pub retry_period: Duration,
}

/// How long a lease is valid without renewal (controller-runtime's default, Karpenter's).
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// How long the leader may go without renewing before it stops leading (controller-runtime's
/// default, Karpenter's).
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// How often the Lease is read and renewed (controller-runtime's default, Karpenter's).
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);

impl LeaderConfig {
    /// controller-runtime's timings (Karpenter's): 15 s lease, 10 s renew deadline, 2 s retry.
    pub fn new(namespace: &str, name: &str, identity: &str) -> LeaderConfig {
        LeaderConfig {
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity: identity.to_string(),
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
        }
    }
}

/// How an election ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// Stopped from outside; a held lease was released.
    Stopped,
    /// This replica led and can no longer prove it does (no renewal within the renew deadline,
    /// or another replica holds the Lease): `leading` is false and the caller must stop every
    /// pass at once, as Karpenter's manager does by exiting.
    Lost,
}

/// What to do with the Lease as it is now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// No Lease exists: create it, holding it.
    Create,
    /// We hold it: renew it.
    Renew,
    /// Someone else held it but it expired (or was released): take it over.
    TakeOver,
    /// Someone else holds a valid lease: follow.
    Follow {
        /// The holder.
        holder: String,
    },
}

/// The pure decision: `unchanged_for` is how long this replica has seen the Lease as it is now
/// (`Observed::see`), by its own clock. Another holder's lease has expired once it has not
/// changed for its `leaseDurationSeconds` (ours when it names none); one without a holder was
/// released.
pub fn decide(lease: Option<&Lease>, identity: &str, unchanged_for: Duration, lease_duration: Duration) -> Action {
    let Some(spec) = lease.map(|l| l.spec.clone().unwrap_or_default()) else {
        return Action::Create;
    };
    let holder = spec.holder_identity.clone().unwrap_or_default();
    if holder == identity {
        return Action::Renew;
    }
    let duration = spec
        .lease_duration_seconds
        .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0)))
        .unwrap_or(lease_duration);
    if holder.is_empty() || unchanged_for > duration {
        Action::TakeOver
    } else {
        Action::Follow { holder }
    }
}

/// The Lease as this replica last saw it change: its `resourceVersion` (any write changes it,
/// every renewal included) and the local time it was first seen so.
#[derive(Debug, Default)]
pub struct Observed(Option<(String, Instant)>);

impl Observed {
    /// Records the Lease read at `now` (None: there is none) and says how long it has been
    /// unchanged: zero when it changed since the last read, or this is the first.
    pub fn see(&mut self, lease: Option<&Lease>, now: Instant) -> Duration {
        let version = lease.and_then(|l| l.metadata.resource_version.clone()).unwrap_or_default();
        match &self.0 {
            Some((seen, since)) if *seen == version => now.saturating_duration_since(*since),
            _ => {
                self.0 = Some((version, now));
                Duration::ZERO
            }
        }
    }
}

/// Runs the election until `stop`, publishing whether this replica leads on `leading`. Every
/// read and write of the Lease is bounded: while leading, by the last successful renewal plus
/// the renew deadline (counted from before that renewal was sent, so the leader always stops
/// before the others' clocks let them take over); else by the renew deadline. On `stop` a held
/// lease is released so that another replica takes over at once; the caller stops its passes
/// before that.
pub async fn run(api: Api<Lease>, config: LeaderConfig, leading: watch::Sender<bool>, stop: CancellationToken) -> Ended {
    let mut ticker = tokio::time::interval(config.retry_period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // When the renewal that proves our leadership was sent, while we lead.
    let mut renewed_at: Option<Instant> = None;
    let mut observed = Observed::default();
    loop {
        let deadline = renewed_at.map(|t| t + config.renew_deadline);
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = ticker.tick() => {}
            // Leading, the deadline passes while waiting for the next try.
            _ = sleep_until_or_never(deadline) => {}
        }
        let started = Instant::now();
        let deadline = deadline.unwrap_or(started + config.renew_deadline);
        let attempt = tokio::time::timeout_at(deadline, try_acquire_or_renew(&api, &config, &mut observed)).await;
        let held = match &attempt {
            Ok(Ok(held)) => *held,
            Ok(Err(e)) => {
                warn!(lease = %config.name, error = %crate::telemetry::chain(e), "reading or writing the leader lease");
                false
            }
            Err(_) => {
                warn!(lease = %config.name, deadline = ?config.renew_deadline, "reading or writing the leader lease timed out");
                false
            }
        };
        if held {
            if renewed_at.is_none() {
                info!(identity = %config.identity, lease = %config.name, "leading");
                leading.send_replace(true);
            }
            renewed_at = Some(started);
            continue;
        }
        let Some(renewed) = renewed_at else {
            continue;
        };
        // Someone else holds it (or wrote it since we read it), or the deadline has passed.
        let taken = matches!(attempt, Ok(Ok(false)));
        if taken || Instant::now() >= renewed + config.renew_deadline {
            leading.send_replace(false);
            error!(
                identity = %config.identity,
                lease = %config.name,
                since_renewal = ?renewed.elapsed(),
                "lost the leader lease: {}",
                if taken { "another replica holds it" } else { "no renewal within the renew deadline" }
            );
            return Ended::Lost;
        }
    }
    if renewed_at.is_some() {
        leading.send_replace(false);
        if tokio::time::timeout(config.renew_deadline, release(&api, &config)).await.is_err() {
            warn!(lease = %config.name, "releasing the leader lease timed out; it expires by itself");
        }
    }
    Ended::Stopped
}

async fn sleep_until_or_never(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

async fn try_acquire_or_renew(api: &Api<Lease>, config: &LeaderConfig, observed: &mut Observed) -> Result<bool, kube::Error> {
    let current = api.get_opt(&config.name).await?;
    let unchanged_for = observed.see(current.as_ref(), Instant::now());
    // Only written into the Lease, for people reading it; no replica's decision depends on it.
    let now = Timestamp::now();
    let action = decide(current.as_ref(), &config.identity, unchanged_for, config.lease_duration);
    let seconds = i32::try_from(config.lease_duration.as_secs()).unwrap_or(i32::MAX);
    let result = match (action, current) {
        (Action::Follow { .. }, _) => return Ok(false),
        (Action::Create, _) => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(config.name.clone()),
                    namespace: Some(config.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(config.identity.clone()),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            api.create(&PostParams::default(), &lease).await.map(|_| ())
        }
        (action, Some(mut lease)) => {
            let spec = lease.spec.get_or_insert_with(Default::default);
            if action == Action::TakeOver {
                spec.holder_identity = Some(config.identity.clone());
                spec.acquire_time = Some(MicroTime(now));
                spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            }
            spec.lease_duration_seconds = Some(seconds);
            spec.renew_time = Some(MicroTime(now));
            // replace carries the resourceVersion we read: a concurrent writer makes it fail with 409.
            api.replace(&config.name, &PostParams::default(), &lease).await.map(|_| ())
        }
        (_, None) => return Ok(false),
    };
    match result {
        Ok(()) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

async fn release(api: &Api<Lease>, config: &LeaderConfig) {
    let Ok(Some(mut lease)) = api.get_opt(&config.name).await else {
        return;
    };
    let spec = lease.spec.get_or_insert_with(Default::default);
    if spec.holder_identity.as_deref() != Some(config.identity.as_str()) {
        return;
    }
    spec.holder_identity = None;
    spec.renew_time = None;
    match api.replace(&config.name, &PostParams::default(), &lease).await {
        Ok(_) => info!(lease = %config.name, "released the leader lease"),
        Err(e) => warn!(lease = %config.name, error = %e, "releasing the leader lease"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, renewed_secs: Option<i64>) -> Lease {
        Lease {
            metadata: ObjectMeta::default(),
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                lease_duration_seconds: Some(15),
                renew_time: renewed_secs.map(|s| MicroTime(Timestamp::from_second(s).unwrap())),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn decides_by_holder_and_how_long_the_lease_was_seen_unchanged() {
        let d = Duration::from_secs(15);
        let secs = Duration::from_secs;
        assert_eq!(decide(None, "a", secs(0), d), Action::Create);
        assert_eq!(decide(Some(&lease(Some("a"), Some(999))), "a", secs(100), d), Action::Renew);
        assert_eq!(
            decide(Some(&lease(Some("b"), Some(990))), "a", secs(10), d),
            Action::Follow { holder: "b".into() }
        );
        assert_eq!(
            decide(Some(&lease(Some("b"), Some(990))), "a", secs(20), d),
            Action::TakeOver,
            "unchanged 5 s past its duration"
        );
        assert_eq!(decide(Some(&lease(None, None)), "a", secs(0), d), Action::TakeOver, "released");
    }

    /// A follower whose clock runs a day ahead of the holder's (or behind it) decides as one in
    /// step: the holder's renewTime is never compared with the local clock.
    #[test]
    fn the_holders_clock_does_not_matter() {
        let d = Duration::from_secs(15);
        let far_past = Timestamp::now().as_second() - 86_400;
        let far_future = Timestamp::now().as_second() + 86_400;
        for renewed in [far_past, far_future] {
            assert_eq!(
                decide(Some(&lease(Some("b"), Some(renewed))), "a", Duration::from_secs(1), d),
                Action::Follow { holder: "b".into() },
                "renewTime {renewed}"
            );
        }
    }

    #[test]
    fn observed_time_restarts_whenever_the_lease_changes() {
        let versioned = |v: &str| {
            let mut l = lease(Some("b"), Some(1));
            l.metadata.resource_version = Some(v.to_string());
            l
        };
        let t0 = Instant::now();
        let mut observed = Observed::default();
        assert_eq!(observed.see(Some(&versioned("1")), t0), Duration::ZERO, "first sight");
        assert_eq!(
            observed.see(Some(&versioned("1")), t0 + Duration::from_secs(8)),
            Duration::from_secs(8)
        );
        assert_eq!(
            observed.see(Some(&versioned("2")), t0 + Duration::from_secs(10)),
            Duration::ZERO,
            "renewed"
        );
        assert_eq!(
            observed.see(Some(&versioned("2")), t0 + Duration::from_secs(26)),
            Duration::from_secs(16)
        );
    }
}
