//! How the AWS clients retry and time out, and the CreateFleet idempotency token.
//!
//! Every call (EC2, SSM, SQS, Pricing) goes through the SDK's standard retry strategy, set here
//! explicitly rather than left to the SDK's defaults: at most `MAX_ATTEMPTS` attempts, with an
//! exponential back-off from `INITIAL_BACKOFF` capped at `MAX_BACKOFF`, each delay drawn with
//! full jitter, and the SDK's client-wide retry quota (a token bucket that stops retries when
//! most calls fail). Throttling codes (`RequestLimitExceeded`, `Throttling`, …), 500/502/503/504,
//! timeouts and dropped connections are retried; other errors are not. A call that still fails
//! is returned to the controller, whose own pass (provisioning batch, termination tick, garbage
//! collection interval) decides when to try again; nothing loops on an error faster than that.
//!
//! A launch must not happen twice because an answer was lost: CreateFleet carries a
//! `ClientToken` made once per launch attempt (`client_token`), which the SDK's retries of that
//! call reuse, so EC2 answers a retried CreateFleet with the fleet it already made.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use sha2::{Digest, Sha256};

use super::instance::Override;

/// Attempts per call, the first included.
pub const MAX_ATTEMPTS: u32 = 5;
/// The first retry waits up to this long (then doubling, jittered).
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(500);
/// No retry waits longer than this.
pub const MAX_BACKOFF: Duration = Duration::from_secs(20);
/// Connecting to an endpoint.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// One attempt, answer included. Longer than the interruption queue's 20 s long poll.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);
/// One call, every attempt and back-off included.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(120);

/// The retry settings of every AWS client.
pub fn retry_config() -> RetryConfig {
    RetryConfig::standard()
        .with_max_attempts(MAX_ATTEMPTS)
        .with_initial_backoff(INITIAL_BACKOFF)
        .with_max_backoff(MAX_BACKOFF)
}

/// The timeouts of every AWS client.
pub fn timeout_config() -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .operation_attempt_timeout(ATTEMPT_TIMEOUT)
        .operation_timeout(OPERATION_TIMEOUT)
        .build()
}

/// Most characters EC2 accepts in a `ClientToken`.
pub const CLIENT_TOKEN_MAX: usize = 64;

/// A CreateFleet `ClientToken` for one launch attempt of `cluster`: unique across attempts,
/// processes and replicas (the time, the process, a counter), stable across the SDK's retries
/// of that attempt because it is made before the call. Pure given its inputs.
pub fn client_token(cluster: &str, provisioner: &str, now: SystemTime, process: u32, sequence: u64) -> String {
    let nanos = now.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_nanos();
    let mut hash = Sha256::new();
    for part in [cluster.as_bytes(), b"\0", provisioner.as_bytes(), b"\0"] {
        hash.update(part);
    }
    hash.update(nanos.to_le_bytes());
    hash.update(process.to_le_bytes());
    hash.update(sequence.to_le_bytes());
    let digest = hash.finalize();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("karpenter-rs-{}", &hex[..40])
}

/// The CreateFleet `ClientToken` of a launch for a need (`LaunchIdentity::need`): derived from the
/// need and the fleet's configuration (launch templates, overrides, capacity type), so the same
/// call made again, after its answer was lost or by a controller restarted in between, gets the
/// fleet EC2 already launched, while a launch whose offerings changed (e.g. after insufficient
/// capacity) is a new request. Pure.
pub fn need_client_token(cluster: &str, need: &str, capacity_type: &str, configs: &[(String, Vec<Override>)]) -> String {
    let mut hash = Sha256::new();
    for part in [cluster, "\0", need, "\0", capacity_type, "\0"] {
        hash.update(part.as_bytes());
    }
    for (template, overrides) in configs {
        hash.update(template.as_bytes());
        for o in overrides {
            hash.update(format!("\0{}\0{}\0{}\0{}", o.instance_type, o.subnet_id, o.zone, o.priority).as_bytes());
        }
        hash.update(b"\n");
    }
    let hex: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
    format!("karpenter-rs-need-{}", &hex[..40])
}

/// `client_token` for now, this process and the next number of its sequence.
pub fn new_client_token(cluster: &str, provisioner: &str) -> String {
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    client_token(
        cluster,
        provisioner,
        SystemTime::now(),
        std::process::id(),
        SEQUENCE.fetch_add(1, Ordering::Relaxed),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_tokens_fit_ec2_and_differ_per_attempt_process_and_time() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let token = client_token("ssungz-cluster", "service", at, 7, 0);
        assert!(token.len() <= CLIENT_TOKEN_MAX, "{token}");
        assert!(token.is_ascii());
        assert_eq!(token, client_token("ssungz-cluster", "service", at, 7, 0), "pure");
        let others = [
            client_token("ssungz-cluster", "service", at, 7, 1),
            client_token("ssungz-cluster", "service", at, 8, 0),
            client_token("ssungz-cluster", "service", at + Duration::from_nanos(1), 7, 0),
            client_token("ssungz-cluster", "batch", at, 7, 0),
            client_token("other", "service", at, 7, 0),
        ];
        for other in &others {
            assert_ne!(&token, other);
        }
        assert_ne!(new_client_token("c", "p"), new_client_token("c", "p"));
    }

    #[test]
    fn a_need_gives_the_same_token_for_the_same_fleet_and_another_for_other_offerings() {
        let over = |t: &str, zone: &str| Override {
            instance_type: t.into(),
            subnet_id: format!("subnet-{zone}"),
            zone: zone.into(),
            priority: 0.0,
        };
        let configs = vec![("lt-1".to_string(), vec![over("t3.large", "a"), over("t3.large", "c")])];
        let token = need_client_token("ssungz-cluster", "42", "on-demand", &configs);
        assert!(token.len() <= CLIENT_TOKEN_MAX && token.is_ascii(), "{token}");
        assert_eq!(token, need_client_token("ssungz-cluster", "42", "on-demand", &configs), "pure");
        let fewer = vec![("lt-1".to_string(), vec![over("t3.large", "c")])];
        for other in [
            need_client_token("ssungz-cluster", "43", "on-demand", &configs),
            need_client_token("other", "42", "on-demand", &configs),
            need_client_token("ssungz-cluster", "42", "spot", &configs),
            need_client_token("ssungz-cluster", "42", "on-demand", &fewer),
        ] {
            assert_ne!(token, other);
        }
    }

    #[test]
    fn retries_are_bounded_and_back_off() {
        let retry = retry_config();
        assert_eq!(retry.max_attempts(), MAX_ATTEMPTS);
        assert_eq!(retry.initial_backoff(), INITIAL_BACKOFF);
        assert_eq!(retry.max_backoff(), MAX_BACKOFF);
        assert_eq!(retry.mode(), aws_config::retry::RetryMode::Standard);
        let timeouts = timeout_config();
        assert_eq!(timeouts.operation_attempt_timeout(), Some(ATTEMPT_TIMEOUT));
        assert!(ATTEMPT_TIMEOUT > Duration::from_secs(20), "longer than the queue's long poll");
        assert!(OPERATION_TIMEOUT > ATTEMPT_TIMEOUT);
    }
}
