//! TLS for the webhook: rustls with TLS 1.2 and 1.3 only, ALPN h2 and http/1.1, and a serving
//! certificate that is swapped without a restart: reloaded from `--cert-dir` whenever its files
//! change, or handed over in memory by the self-managed certificate reconciler
//! (`cert_reconciler`). Connections already open keep the certificate they were made with; new
//! handshakes get the new one.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::sync::watch;
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
    /// A PEM block of the file is malformed (bad base64, no end line...).
    #[error("{path}: malformed PEM")]
    MalformedPem {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: pem::Error,
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
    /// A certificate handed over in memory (from the self-managed Secret) is unusable.
    #[error("loading the serving certificate from {origin}")]
    InMemory {
        /// Where it came from, e.g. `secret karpenter/karpenter-rs-cert`.
        origin: String,
        /// Why.
        #[source]
        source: PemError,
    },
}

/// Why a PEM certificate and key cannot serve TLS.
#[derive(Debug, thiserror::Error)]
pub enum PemError {
    /// No PEM certificate in the certificate document.
    #[error("no PEM certificate")]
    NoCertificate,
    /// A PEM block of the certificate document is malformed.
    #[error("malformed PEM certificate")]
    MalformedCertificate(#[source] pem::Error),
    /// No usable PEM private key in the key document.
    #[error("no usable PEM private key")]
    NoKey,
    /// A PEM block of the key document is malformed.
    #[error("malformed PEM private key")]
    MalformedKey(#[source] pem::Error),
    /// The key does not match the certificate, or rustls refused it.
    #[error("unusable key pair")]
    KeyPair(#[source] rustls::Error),
}

/// Where the serving certificate comes from.
#[derive(Debug)]
enum Source {
    /// `tls.crt` and `tls.key` in a directory, polled for changes.
    Files(PathBuf),
    /// Handed over by the self-managed certificate reconciler; nothing to poll.
    Memory,
}

/// The serving certificate, reloadable. Implements rustls' certificate resolver.
#[derive(Debug)]
pub struct CertStore {
    source: Source,
    current: RwLock<Option<Loaded>>,
    loaded: watch::Sender<bool>,
}

#[derive(Debug)]
struct Loaded {
    key: Arc<CertifiedKey>,
    pem: (Vec<u8>, Vec<u8>),
}

/// True when `dir` holds `tls.crt` or `tls.key`: a mounted certificate, served from the files.
/// With neither, the binary manages its own certificate in a Secret.
pub fn has_certificate_files(dir: &Path) -> bool {
    dir.join(CERT_FILE).exists() || dir.join(KEY_FILE).exists()
}

impl CertStore {
    /// Loads `tls.crt` and `tls.key` from `dir`; fails when they are missing or unusable.
    pub fn load(dir: &Path) -> Result<Arc<CertStore>, TlsError> {
        let (pem, key) = read(dir)?;
        Ok(Arc::new(CertStore {
            source: Source::Files(dir.to_path_buf()),
            current: RwLock::new(Some(Loaded { key, pem })),
            loaded: watch::channel(true).0,
        }))
    }

    /// A store without a certificate yet, filled by [`CertStore::set`]. Until then TLS handshakes
    /// fail (no certificate to offer).
    pub fn in_memory() -> Arc<CertStore> {
        Arc::new(CertStore {
            source: Source::Memory,
            current: RwLock::new(None),
            loaded: watch::channel(false).0,
        })
    }

    /// Serves `cert_pem` and `key_pem` from now on (an in-memory store). `Ok(true)` when they
    /// differ from what was served. An unusable pair is an error and the old one stays in use.
    pub fn set(&self, cert_pem: &[u8], key_pem: &[u8], origin: &str) -> Result<bool, TlsError> {
        if self.serves(cert_pem, key_pem) {
            return Ok(false);
        }
        let key = certified_key_from_pem(cert_pem, key_pem).map_err(|source| TlsError::InMemory {
            origin: origin.to_string(),
            source,
        })?;
        *self.current.write().expect("cert lock is never poisoned") = Some(Loaded {
            key,
            pem: (cert_pem.to_vec(), key_pem.to_vec()),
        });
        self.loaded.send_replace(true);
        Ok(true)
    }

    /// True when exactly this certificate and key are being served.
    pub fn serves(&self, cert_pem: &[u8], key_pem: &[u8]) -> bool {
        let current = self.current.read().expect("cert lock is never poisoned");
        current.as_ref().is_some_and(|l| l.pem.0 == cert_pem && l.pem.1 == key_pem)
    }

    /// When the certificate being served expires (its `notAfter`), if one is and it can be read.
    pub fn expires_at(&self) -> Option<std::time::SystemTime> {
        let current = self.current.read().expect("cert lock is never poisoned");
        not_after(current.as_ref()?.key.cert.first()?.as_ref())
    }

    /// Sets `karpenter_rs_webhook_certificate_expiration_timestamp_seconds` to [`Self::expires_at`].
    pub fn record_expiry(&self, metrics: &Metrics) {
        if let Some(at) = self.expires_at() {
            let seconds = at.duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
            metrics.certificate_expiration.set(seconds);
        }
    }

    /// True once a certificate is being served.
    pub fn is_loaded(&self) -> bool {
        *self.loaded.borrow()
    }

    /// Returns once a certificate is being served.
    pub async fn wait_until_loaded(&self) {
        let mut loaded = self.loaded.subscribe();
        // The sender lives as long as `self`, so waiting cannot fail.
        let _ = loaded.wait_for(|l| *l).await;
    }

    /// Reloads the files if their contents changed. `Ok(true)` when a new certificate is in use.
    /// A broken new pair (say, a key written before its certificate) is an error and the old
    /// certificate stays in use. An in-memory store has nothing to reload.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let Source::Files(dir) = &self.source else {
            return Ok(false);
        };
        let cert_bytes = read_file(&dir.join(CERT_FILE))?;
        let key_bytes = read_file(&dir.join(KEY_FILE))?;
        if self.serves(&cert_bytes, &key_bytes) {
            return Ok(false);
        }
        let key = certified_key(dir, &cert_bytes, &key_bytes)?;
        *self.current.write().expect("cert lock is never poisoned") = Some(Loaded {
            key,
            pem: (cert_bytes, key_bytes),
        });
        self.loaded.send_replace(true);
        Ok(true)
    }

    /// Polls the directory every `interval` until `shutdown`, reloading on change. Returns at
    /// once for an in-memory store.
    pub async fn watch(self: Arc<Self>, interval: Duration, metrics: Metrics, shutdown: CancellationToken) {
        let Source::Files(dir) = &self.source else {
            return;
        };
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = ticker.tick() => {}
            }
            self.record_expiry(&metrics);
            match self.reload() {
                Ok(true) => {
                    failing = false;
                    metrics.certificate_reloads.with_label_values(&["success"]).inc();
                    info!(dir = %dir.display(), "reloaded serving certificate");
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

/// The `notAfter` of an X.509 certificate in DER (RFC 5280: Certificate → tbsCertificate →
/// validity → notAfter, UTCTime or GeneralizedTime); `None` when it cannot be read. Pure.
pub fn not_after(der: &[u8]) -> Option<std::time::SystemTime> {
    let (0x30, certificate, _) = der_tlv(der)? else { return None };
    let (0x30, tbs, _) = der_tlv(certificate)? else { return None };
    let mut rest = tbs;
    if let (0xA0, _, after) = der_tlv(rest)? {
        rest = after; // [0] version
    }
    for _ in 0..3 {
        rest = der_tlv(rest)?.2; // serialNumber, signature, issuer
    }
    let (0x30, validity, _) = der_tlv(rest)? else { return None };
    let (tag, time, _) = der_tlv(der_tlv(validity)?.2)?;
    let text = std::str::from_utf8(time).ok()?.strip_suffix('Z')?;
    let full = match tag {
        0x17 => {
            // UTCTime: two-digit years 50..99 are 19xx, 00..49 are 20xx.
            let yy: i32 = text.get(0..2)?.parse().ok()?;
            format!("{}{}", if yy >= 50 { 1900 + yy } else { 2000 + yy }, text.get(2..)?)
        }
        0x18 => text.to_string(),
        _ => return None,
    };
    // YYYYMMDDHHMMSS, read as the RFC 3339 timestamp it spells.
    if full.len() != 14 {
        return None;
    }
    let part = |range: std::ops::Range<usize>| full.get(range);
    let rfc3339 = format!(
        "{}-{}-{}T{}:{}:{}Z",
        part(0..4)?,
        part(4..6)?,
        part(6..8)?,
        part(8..10)?,
        part(10..12)?,
        part(12..14)?
    );
    let at: jiff::Timestamp = rfc3339.parse().ok()?;
    let seconds = u64::try_from(at.as_second()).ok()?;
    Some(std::time::UNIX_EPOCH + Duration::from_secs(seconds))
}

/// One DER tag-length-value: (tag, value, what follows).
fn der_tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return None;
        }
        let (bytes, rest) = rest.split_at_checked(n)?;
        (bytes.iter().fold(0usize, |len, b| (len << 8) | usize::from(*b)), rest)
    };
    let (value, rest) = rest.split_at_checked(len)?;
    Some((tag, value, rest))
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let current = self.current.read().expect("cert lock is never poisoned");
        current.as_ref().map(|l| l.key.clone())
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
    certified_key_from_pem(cert_pem, key_pem).map_err(|e| match e {
        PemError::NoCertificate => TlsError::NoCertificate { path: dir.join(CERT_FILE) },
        PemError::MalformedCertificate(source) => TlsError::MalformedPem {
            path: dir.join(CERT_FILE),
            source,
        },
        PemError::NoKey => TlsError::NoKey { path: dir.join(KEY_FILE) },
        PemError::MalformedKey(source) => TlsError::MalformedPem {
            path: dir.join(KEY_FILE),
            source,
        },
        PemError::KeyPair(source) => TlsError::KeyPair { dir: dir.into(), source },
    })
}

/// The rustls key pair of a PEM certificate chain and PEM private key, checked to belong together.
/// A malformed PEM block is an error, never skipped: serving a chain with a certificate missing
/// would fail only later, in the clients' handshakes.
pub fn certified_key_from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<Arc<CertifiedKey>, PemError> {
    let certs = pem_certificates(cert_pem).map_err(PemError::MalformedCertificate)?;
    if certs.is_empty() {
        return Err(PemError::NoCertificate);
    }
    let key = match PrivateKeyDer::from_pem_slice(key_pem) {
        Ok(key) => key,
        Err(pem::Error::NoItemsFound) => return Err(PemError::NoKey),
        Err(e) => return Err(PemError::MalformedKey(e)),
    };
    let signing_key = rustls::crypto::ring::sign::any_supported_type(&key).map_err(PemError::KeyPair)?;
    let certified = CertifiedKey::new(certs, signing_key);
    certified.keys_match().map_err(PemError::KeyPair)?;
    Ok(Arc::new(certified))
}

/// Every certificate of a PEM document, in order; other PEM blocks (keys...) are passed over, a
/// malformed block is an error.
pub fn pem_certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, pem::Error> {
    CertificateDer::pem_slice_iter(pem).collect()
}

#[cfg(test)]
mod tests;
