//! TLS for the webhook: rustls with TLS 1.2 and 1.3 only, ALPN h2 and http/1.1, and a serving
//! certificate that is reloaded from `--cert-dir` whenever its files change, without a restart.
//! Connections already open keep the certificate they were made with; new handshakes get the new one.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::certs::{CERT_FILE, KEY_FILE};
use crate::metrics::Metrics;
use crate::telemetry;

/// What can go wrong loading the serving certificate.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("reading {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The certificate file holds no PEM certificate.
    #[error("{path} holds no PEM certificate")]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// The key file holds no usable PEM private key.
    #[error("{path} holds no usable PEM private key")]
    NoKey {
        /// The file.
        path: PathBuf,
    },
    /// The key does not match the certificate, or rustls refused it.
    #[error("loading the key pair from {dir}")]
    KeyPair {
        /// The certificate directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: rustls::Error,
    },
}

/// The serving certificate, reloadable. Implements rustls' certificate resolver.
#[derive(Debug)]
pub struct CertStore {
    dir: PathBuf,
    current: RwLock<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    key: Arc<CertifiedKey>,
    files: (Vec<u8>, Vec<u8>),
}

impl CertStore {
    /// Loads `tls.crt` and `tls.key` from `dir`; fails when they are missing or unusable.
    pub fn load(dir: &Path) -> Result<Arc<CertStore>, TlsError> {
        let (files, key) = read(dir)?;
        Ok(Arc::new(CertStore {
            dir: dir.to_path_buf(),
            current: RwLock::new(Loaded { key, files }),
        }))
    }

    /// Reloads the files if their contents changed. `Ok(true)` when a new certificate is in use.
    /// A broken new pair (say, a key written before its certificate) is an error and the old
    /// certificate stays in use.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let cert_bytes = read_file(&self.dir.join(CERT_FILE))?;
        let key_bytes = read_file(&self.dir.join(KEY_FILE))?;
        if self.current.read().expect("cert lock is never poisoned").files == (cert_bytes.clone(), key_bytes.clone()) {
            return Ok(false);
        }
        let key = certified_key(&self.dir, &cert_bytes, &key_bytes)?;
        *self.current.write().expect("cert lock is never poisoned") = Loaded {
            key,
            files: (cert_bytes, key_bytes),
        };
        Ok(true)
    }

    /// Polls the directory every `interval` until `shutdown`, reloading on change.
    pub async fn watch(self: Arc<Self>, interval: Duration, metrics: Metrics, shutdown: CancellationToken) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = ticker.tick() => {}
            }
            match self.reload() {
                Ok(true) => {
                    failing = false;
                    metrics.certificate_reloads.with_label_values(&["success"]).inc();
                    info!(dir = %self.dir.display(), "reloaded serving certificate");
                }
                Ok(false) => failing = false,
                Err(err) => {
                    metrics.certificate_reloads.with_label_values(&["error"]).inc();
                    // Say it once per failure streak, not every tick.
                    if !failing {
                        warn!(error = %telemetry::chain(&err), "keeping the current serving certificate");
                    }
                    failing = true;
                }
            }
        }
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().expect("cert lock is never poisoned").key.clone())
    }
}

/// rustls server configuration: TLS 1.2 and 1.3, ALPN h2 and http/1.1, certificates from `store`.
pub fn server_config(store: Arc<CertStore>) -> Arc<ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .expect("ring supports TLS 1.2 and 1.3")
        .with_no_client_auth()
        .with_cert_resolver(store);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(config)
}

fn read_file(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { path: path.into(), source })
}

type Files = (Vec<u8>, Vec<u8>);

fn read(dir: &Path) -> Result<(Files, Arc<CertifiedKey>), TlsError> {
    let cert_bytes = read_file(&dir.join(CERT_FILE))?;
    let key_bytes = read_file(&dir.join(KEY_FILE))?;
    let key = certified_key(dir, &cert_bytes, &key_bytes)?;
    Ok(((cert_bytes, key_bytes), key))
}

fn certified_key(dir: &Path, cert_pem: &[u8], key_pem: &[u8]) -> Result<Arc<CertifiedKey>, TlsError> {
    let certs: Vec<_> = rustls_pemfile::certs(&mut &cert_pem[..]).filter_map(Result::ok).collect();
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { path: dir.join(CERT_FILE) });
    }
    let key = rustls_pemfile::private_key(&mut &key_pem[..])
        .ok()
        .flatten()
        .ok_or_else(|| TlsError::NoKey { path: dir.join(KEY_FILE) })?;
    let signing_key =
        rustls::crypto::ring::sign::any_supported_type(&key).map_err(|source| TlsError::KeyPair { dir: dir.into(), source })?;
    let certified = CertifiedKey::new(certs, signing_key);
    certified
        .keys_match()
        .map_err(|source| TlsError::KeyPair { dir: dir.into(), source })?;
    Ok(Arc::new(certified))
}
