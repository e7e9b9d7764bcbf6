//! How every Kubernetes client is set up, so the controller, the webhook's certificate
//! reconciler, the `nodes` view and the tests talk to the API server the same way.
//!
//! - One request is one request: kube's own retries of 429, 503 and 504 stay off. Our loops
//!   wait with the jittered back-off of `retry.rs` and count their failures; a retry hidden in
//!   the client would wait up to minutes (15 tries, doubling from 5 ms) under them, replay an
//!   eviction that a PodDisruptionBudget refused (the API server answers 429), and make the
//!   Lease's renewals late without our deadline noticing why.
//! - A response that stops arriving ends in an error: kube leaves reads without a timeout (its
//!   watches have their own idle timeout), so a GET or PATCH on a connection that hangs mid-answer
//!   would hold a pass for good. Reads time out after `READ_TIMEOUT`, counted from the request's
//!   last write, not from when its pooled connection went idle.

use std::time::Duration;

/// How long a response may go without a byte arriving, longer than a watch's server-side timeout
/// (290 s), so a quiet watch is closed by the API server first.
pub const READ_TIMEOUT: Duration = Duration::from_secs(295);

/// `config` as every client of ours uses it (see the module comment).
pub fn configure(mut config: kube::Config) -> kube::Config {
    config.default_retry = false;
    config.read_timeout = Some(READ_TIMEOUT);
    config.reset_reader_on_write = true;
    config
}

/// The configuration from the kubeconfig (`KUBECONFIG`, `~/.kube/config`) or, failing that, the
/// pod's service account, set up by [`configure`].
pub async fn infer() -> Result<kube::Config, kube::config::InferConfigError> {
    kube::Config::infer().await.map(configure)
}

/// A client for [`infer`]'s configuration.
pub async fn try_default() -> Result<kube::Client, kube::Error> {
    let config = infer().await.map_err(kube::Error::InferConfig)?;
    kube::Client::try_from(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_kube_retries_off_and_reads_time_out() {
        let config = configure(kube::Config::new("https://127.0.0.1:6443".parse().expect("a valid URL")));
        assert!(!config.default_retry);
        assert_eq!(config.read_timeout, Some(READ_TIMEOUT));
        assert!(config.reset_reader_on_write);
    }
}
