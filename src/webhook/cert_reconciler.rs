//! Self-managed webhook certificates (when `--cert-dir` holds no certificate): keeps a CA and a
//! serving certificate in a Secret, serves it from memory (the root filesystem is read-only) and
//! writes the CA into the `caBundle` of both webhook configurations, like knative's certificate
//! reconciler. Every replica runs this; they converge on one Secret because a write carries the
//! `resourceVersion` it read (the API server lets one writer win, the others re-read and serve
//! the winner's certificate) and a Secret is only rewritten when its current contents need it
//! (`self_signed::inspect`, pure and the same on every replica).
//!
//! One pass: read the Secret → decide → create or update it if needed → put its CA into the
//! configurations → serve it. A pass runs on every change of the Secret or of a configuration
//! (one watch each, by name) and every `self_signed::check_interval`, so a deleted Secret is
//! recreated, an expiring certificate renewed, and a `caBundle` reset by `helm upgrade` restored.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use kube::api::PostParams;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::apis::keys::APP_NAME_LABEL;
use crate::certs::CertError;
use crate::metrics::Metrics;
use crate::telemetry;
use crate::webhook::self_signed::{self, RenewReason, Verdict, WebhookCerts};
use crate::webhook::tls::{CertStore, TlsError};

/// Writes of the Secret that lose to another replica before a pass gives up (and retries later).
const MAX_ATTEMPTS: usize = 5;
/// Time between the CA reaching the configurations and a replica serving the new certificate, so
/// that the API server (which watches the configurations) trusts it before it is offered.
const SWAP_DELAY: Duration = Duration::from_secs(1);

/// Settings of the self-managed certificate.
#[derive(Clone, Debug)]
pub struct SelfManagedCerts {
    /// Namespace of the Secret (karpenter-rs' own namespace).
    pub namespace: String,
    /// Name of the Secret.
    pub secret: String,
    /// Service in front of the webhook; its DNS names go into the certificate.
    pub service: String,
    /// More DNS names or IP addresses for the certificate.
    pub extra_names: Vec<String>,
    /// Name of the MutatingWebhookConfiguration whose webhooks get the CA.
    pub mutating_configuration: String,
    /// Name of the ValidatingWebhookConfiguration whose webhooks get the CA.
    pub validating_configuration: String,
    /// Validity of a new CA and serving certificate.
    pub validity: Duration,
    /// A certificate expiring within this is renewed.
    pub renew_before: Duration,
}

impl SelfManagedCerts {
    /// The names the serving certificate covers.
    pub fn names(&self) -> Vec<String> {
        self_signed::serving_names(&self.service, &self.namespace, &self.extra_names)
    }

    fn origin(&self) -> String {
        format!("secret {}/{}", self.namespace, self.secret)
    }
}

/// What can go wrong in one pass.
#[derive(Debug, thiserror::Error)]
pub enum CertReconcileError {
    /// The Secret could not be read.
    #[error("reading secret {namespace}/{name}")]
    Read {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// The Secret could not be created or updated.
    #[error("writing secret {namespace}/{name}")]
    Write {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// Other writers kept changing the Secret.
    #[error("secret {namespace}/{name} changed under every one of {MAX_ATTEMPTS} writes")]
    Contended {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// rcgen failed.
    #[error("generating the webhook certificate for {names}")]
    Generate {
        /// The names asked for.
        names: String,
        /// Why.
        #[source]
        source: CertError,
    },
    /// The certificate read back could not be served.
    #[error("serving the certificate")]
    Serve(#[source] TlsError),
    /// A configuration could not be read or updated.
    #[error("updating caBundle of {kind} {name}")]
    CaBundle {
        /// `MutatingWebhookConfiguration` or `ValidatingWebhookConfiguration`.
        kind: String,
        /// Its name.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
}

/// First wait before trying again to read the Kubernetes configuration or to reconcile the
/// certificate after a failure; it doubles with every failure in a row.
const RETRY_BASE: Duration = Duration::from_secs(1);
/// Longest wait between attempts to read the Kubernetes configuration.
const CONNECT_RETRY_MAX: Duration = Duration::from_secs(30);

/// Connects to the Kubernetes API (retrying until the configuration can be read) and runs
/// [`run`] until `shutdown`.
pub async fn connect_and_run(config: SelfManagedCerts, store: Arc<CertStore>, metrics: Metrics, shutdown: CancellationToken) {
    let mut backoff = crate::retry::Backoff::new(RETRY_BASE, CONNECT_RETRY_MAX);
    let client = loop {
        let wait = backoff.next_wait();
        tokio::select! {
            _ = shutdown.cancelled() => return,
            client = crate::kube_client::try_default() => match client {
                Ok(c) => break c,
                Err(e) => warn!(error = %telemetry::chain(&e), retry_in = ?wait, "webhook certificate: cannot reach the Kubernetes API"),
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    };
    run(client, config, store, metrics, shutdown).await
}

/// Keeps the Secret, the configurations' `caBundle` and the served certificate in step until
/// `shutdown`. Failed passes are retried with backoff; nothing here is fatal.
pub async fn run(client: Client, config: SelfManagedCerts, store: Arc<CertStore>, metrics: Metrics, shutdown: CancellationToken) {
    let by_name = |name: &str| watcher::Config::default().fields(&format!("metadata.name={name}"));
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &config.namespace);
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    // Which object changed does not matter: a pass looks at all of them.
    let mut changes = futures::stream::select_all([
        watcher(secrets.clone(), by_name(&config.secret))
            .default_backoff()
            .map(|e| e.map(drop))
            .boxed(),
        watcher(mutating.clone(), by_name(&config.mutating_configuration))
            .default_backoff()
            .map(|e| e.map(drop))
            .boxed(),
        watcher(validating.clone(), by_name(&config.validating_configuration))
            .default_backoff()
            .map(|e| e.map(drop))
            .boxed(),
    ]);
    let ctx = Pass {
        secrets,
        mutating,
        validating,
        config,
        store,
        metrics,
    };
    let mut ticker = tokio::time::interval(self_signed::check_interval(ctx.config.renew_before));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut retry: Option<tokio::time::Instant> = None;
    let mut backoff = crate::retry::Backoff::new(RETRY_BASE, self_signed::MAX_CHECK_INTERVAL);
    let mut missing = BundleWarnings::default();
    let mut watch_failing = false;
    info!(
        secret = %ctx.config.origin(),
        names = %ctx.config.names().join(","),
        mutating = %ctx.config.mutating_configuration,
        validating = %ctx.config.validating_configuration,
        "managing the webhook certificate"
    );
    loop {
        let retry_at = retry;
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
            _ = tokio::time::sleep_until(retry_at.unwrap_or_else(tokio::time::Instant::now)), if retry_at.is_some() => {}
            change = changes.next() => match change {
                Some(Ok(())) => watch_failing = false,
                // The watchers retry by themselves (with backoff) and the ticker covers the gap;
                // say it once per failure streak (say, RBAC without list/watch).
                Some(Err(e)) => {
                    if !watch_failing {
                        warn!(error = %telemetry::chain(&e), "watching the webhook certificate's objects; retrying");
                    }
                    watch_failing = true;
                    continue;
                }
                None => return,
            },
        }
        // A burst of events (start-up lists, our own writes) makes one pass.
        while let Some(Some(_)) = changes.next().now_or_never() {}
        match ctx.reconcile(&mut missing).await {
            Ok(()) => {
                retry = None;
                backoff.reset();
            }
            Err(err) => {
                let wait = backoff.next_wait();
                warn!(error = %telemetry::chain(&err), retry_in = ?wait, "reconciling the webhook certificate");
                retry = Some(tokio::time::Instant::now() + wait);
            }
        }
    }
}

/// Configurations found missing, so that each is reported once until it appears.
#[derive(Default)]
struct BundleWarnings(std::collections::BTreeSet<String>);

struct Pass {
    secrets: Api<Secret>,
    mutating: Api<MutatingWebhookConfiguration>,
    validating: Api<ValidatingWebhookConfiguration>,
    config: SelfManagedCerts,
    store: Arc<CertStore>,
    metrics: Metrics,
}

impl Pass {
    #[tracing::instrument(skip_all, fields(secret = %self.config.origin()))]
    async fn reconcile(&self, missing: &mut BundleWarnings) -> Result<(), CertReconcileError> {
        // 1. the Secret: read, decide, write if needed (one replica wins a race)
        let certs = self.ensure_secret().await?;
        // 2. its CA into both configurations before serving it, so the API server trusts it;
        //    a configuration that is missing or cannot be updated does not stop us serving.
        let mut bundle_error = None;
        let mutating = self
            .ensure_bundle(&self.mutating, &self.config.mutating_configuration, &certs, missing, |c| {
                c.webhooks.iter_mut().flatten().map(|w| &mut w.client_config).collect()
            })
            .await;
        let validating = self
            .ensure_bundle(&self.validating, &self.config.validating_configuration, &certs, missing, |c| {
                c.webhooks.iter_mut().flatten().map(|w| &mut w.client_config).collect()
            })
            .await;
        for result in [mutating, validating] {
            if let Err(e) = result {
                bundle_error.get_or_insert(e);
            }
        }
        // 3. serve it
        self.serve(&certs).await?;
        bundle_error.map_or(Ok(()), Err)
    }

    async fn ensure_secret(&self) -> Result<WebhookCerts, CertReconcileError> {
        let (namespace, name) = (&self.config.namespace, &self.config.secret);
        for _ in 0..MAX_ATTEMPTS {
            let current = self.secrets.get_opt(name).await.map_err(|source| CertReconcileError::Read {
                namespace: namespace.clone(),
                name: name.clone(),
                source,
            })?;
            let reason = match inspect_secret(current.as_ref(), SystemTime::now(), self.config.renew_before) {
                Verdict::Usable(certs) => {
                    let uncovered = self_signed::uncovered_names(&certs, &self.config.names());
                    if !uncovered.is_empty() && !self.store.serves(&certs.server_cert_pem, &certs.server_key_pem) {
                        warn!(
                            secret = %self.config.origin(),
                            names = %uncovered.join(","),
                            "the webhook certificate does not cover these names; delete the secret to regenerate it"
                        );
                    }
                    return Ok(certs);
                }
                Verdict::Renew(reason) => reason,
            };
            let names = self.config.names();
            let generated = self_signed::generate(&names, self.config.validity).map_err(|source| CertReconcileError::Generate {
                names: names.join(","),
                source,
            })?;
            let written = match current {
                None => {
                    let secret = Secret {
                        metadata: ObjectMeta {
                            name: Some(name.clone()),
                            namespace: Some(namespace.clone()),
                            labels: Some(BTreeMap::from([(APP_NAME_LABEL.into(), "karpenter-rs".into())])),
                            ..Default::default()
                        },
                        type_: Some("Opaque".into()),
                        data: Some(self_signed::secret_data(None, &generated)),
                        ..Default::default()
                    };
                    self.secrets.create(&PostParams::default(), &secret).await
                }
                // `replace` sends the resourceVersion read above: a concurrent writer makes it fail
                // with 409 instead of being overwritten.
                Some(mut secret) => {
                    secret.data = Some(self_signed::secret_data(secret.data.as_ref(), &generated));
                    self.secrets.replace(name, &PostParams::default(), &secret).await
                }
            };
            match written {
                Ok(_) => {
                    info!(secret = %self.config.origin(), reason = %reason, "generated a new webhook certificate");
                    return Ok(generated);
                }
                // AlreadyExists or Conflict: another replica wrote first; read and use theirs.
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    debug!(secret = %self.config.origin(), reason = %e.reason, "another replica wrote the webhook certificate first");
                }
                Err(source) => {
                    return Err(CertReconcileError::Write {
                        namespace: namespace.clone(),
                        name: name.clone(),
                        source,
                    })
                }
            }
        }
        Err(CertReconcileError::Contended {
            namespace: namespace.clone(),
            name: name.clone(),
        })
    }

    /// Puts the CA into the caBundle of every webhook of configuration `name`. A write that
    /// loses to another replica's (409) is re-read and recomputed; the result is the same.
    async fn ensure_bundle<K>(
        &self,
        api: &Api<K>,
        name: &str,
        certs: &WebhookCerts,
        missing: &mut BundleWarnings,
        client_configs: fn(&mut K) -> Vec<&mut WebhookClientConfig>,
    ) -> Result<(), CertReconcileError>
    where
        K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
        K::DynamicType: Default,
    {
        let kind = K::kind(&K::DynamicType::default()).to_string();
        let error = |source| CertReconcileError::CaBundle {
            kind: kind.clone(),
            name: name.to_string(),
            source,
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let Some(mut configuration) = api.get_opt(name).await.map_err(error)? else {
                missing.report(&kind, name);
                return Ok(());
            };
            missing.found(&kind, name);
            if !set_bundles(client_configs(&mut configuration).into_iter(), &certs.ca_cert_pem) {
                return Ok(());
            }
            match api.replace(name, &PostParams::default(), &configuration).await {
                Ok(_) => {
                    info!(configuration = %name, kind = %kind, "wrote the webhook CA into caBundle");
                    return Ok(());
                }
                Err(kube::Error::Api(e)) if e.code == 409 && attempt < MAX_ATTEMPTS => {
                    debug!(configuration = %name, kind = %kind, "configuration changed while writing caBundle; re-reading");
                }
                Err(source) => return Err(error(source)),
            }
        }
    }

    async fn serve(&self, certs: &WebhookCerts) -> Result<(), CertReconcileError> {
        self.store.record_expiry(&self.metrics);
        if self.store.serves(&certs.server_cert_pem, &certs.server_key_pem) {
            return Ok(());
        }
        if self.store.is_loaded() {
            tokio::time::sleep(SWAP_DELAY).await;
        }
        match self.store.set(&certs.server_cert_pem, &certs.server_key_pem, &self.config.origin()) {
            Ok(_) => {
                self.metrics.certificate_reloads.with_label_values(&["success"]).inc();
                self.store.record_expiry(&self.metrics);
                info!(secret = %self.config.origin(), "serving the webhook certificate");
                Ok(())
            }
            Err(e) => {
                self.metrics.certificate_reloads.with_label_values(&["error"]).inc();
                Err(CertReconcileError::Serve(e))
            }
        }
    }
}

impl BundleWarnings {
    fn report(&mut self, kind: &str, name: &str) {
        if self.0.insert(format!("{kind}/{name}")) {
            warn!(kind, configuration = %name, "webhook configuration not found; its caBundle will be set once it exists");
        }
    }

    fn found(&mut self, kind: &str, name: &str) {
        self.0.remove(&format!("{kind}/{name}"));
    }
}

fn inspect_secret(secret: Option<&Secret>, now: SystemTime, renew_before: Duration) -> Verdict {
    match secret {
        None => Verdict::Renew(RenewReason::NoSecret),
        // A Secret without data is an empty map (as a Helm chart creates it), not a missing Secret.
        Some(s) => self_signed::inspect(Some(s.data.as_ref().unwrap_or(&BTreeMap::new())), now, renew_before),
    }
}

/// Sets each webhook's `caBundle` to what `self_signed::ca_bundle` says; true when any changed.
fn set_bundles<'a>(client_configs: impl Iterator<Item = &'a mut WebhookClientConfig>, ca_cert_pem: &[u8]) -> bool {
    let mut changed = false;
    for client_config in client_configs {
        let current = client_config.ca_bundle.as_ref().map_or(&[][..], |b| &b.0[..]);
        let wanted = self_signed::ca_bundle(current, ca_cert_pem);
        if wanted != current {
            client_config.ca_bundle = Some(ByteString(wanted));
            changed = true;
        }
    }
    changed
}

#[cfg(test)]
mod tests;
