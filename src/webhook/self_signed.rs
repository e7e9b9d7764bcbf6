//! The self-managed webhook certificate, as data: what the Secret holds (knative's keys
//! `ca-cert.pem`, `server-cert.pem`, `server-key.pem`), whether it must be renewed, the names the
//! serving certificate covers and the `caBundle` the webhook configurations get. No I/O here (the
//! clock is a parameter); `cert_reconciler` reads and writes the Secret and the configurations.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, SystemTime};

use base64::Engine;
use k8s_openapi::ByteString;
use rustls::client::{verify_server_cert_signed_by_trust_anchor, verify_server_name};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, RootCertStore};

use crate::certs::{Ca, CertError};
use crate::webhook::tls::{certified_key_from_pem, pem_certificates, PemError};

/// Secret key of the CA certificate (PEM), the `caBundle` of the webhook configurations.
pub const CA_CERT_KEY: &str = "ca-cert.pem";
/// Secret key of the serving certificate (PEM).
pub const SERVER_CERT_KEY: &str = "server-cert.pem";
/// Secret key of the serving certificate's private key (PEM, PKCS#8).
pub const SERVER_KEY_KEY: &str = "server-key.pem";

/// Longest time between two checks of the Secret, whatever `renew_before` is.
pub const MAX_CHECK_INTERVAL: Duration = Duration::from_secs(60);
/// Shortest period between checks of the Secret besides its watch events (`check_interval`).
pub const MIN_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// The three PEM documents of a self-managed certificate.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookCerts {
    /// The CA that signed the serving certificate.
    pub ca_cert_pem: Vec<u8>,
    /// The serving certificate.
    pub server_cert_pem: Vec<u8>,
    /// The serving certificate's private key.
    pub server_key_pem: Vec<u8>,
}

impl fmt::Debug for WebhookCerts {
    // Never print the private key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookCerts")
            .field("ca_cert_pem", &String::from_utf8_lossy(&self.ca_cert_pem))
            .field("server_cert_pem", &String::from_utf8_lossy(&self.server_cert_pem))
            .finish_non_exhaustive()
    }
}

/// Why the Secret's certificate must be (re)generated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RenewReason {
    /// The Secret does not exist.
    NoSecret,
    /// A key is missing or empty.
    Missing {
        /// The Secret key.
        key: &'static str,
    },
    /// A key holds something unusable.
    Unusable {
        /// The Secret key.
        key: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The serving certificate expires within `renew_before` (or already has).
    Expiring {
        /// Its `notAfter`, when known.
        not_after: Option<SystemTime>,
    },
}

impl fmt::Display for RenewReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RenewReason::NoSecret => f.write_str("the secret does not exist"),
            RenewReason::Missing { key } => write!(f, "data[{key}]: required value"),
            RenewReason::Unusable { key, reason } => write!(f, "data[{key}]: invalid value: {reason}"),
            RenewReason::Expiring { not_after: Some(t) } => {
                let at = time::OffsetDateTime::from(*t)
                    .replace_nanosecond(0)
                    .unwrap_or_else(|_| time::OffsetDateTime::from(*t));
                write!(f, "data[{SERVER_CERT_KEY}]: expires at {at}, within the renewal window")
            }
            RenewReason::Expiring { not_after: None } => write!(f, "data[{SERVER_CERT_KEY}]: expires within the renewal window"),
        }
    }
}

/// What to do with the Secret's current contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Serve these.
    Usable(WebhookCerts),
    /// Generate new ones and write them.
    Renew(RenewReason),
}

/// Decides whether the Secret's `data` can be served at `now`: every key present and parseable,
/// the key matching the serving certificate, the serving certificate signed by the CA and valid
/// for at least `renew_before` more. Every replica that reads the same data decides the same,
/// so only a Secret that really needs it is rewritten. Names are deliberately not checked here:
/// two replicas configured with different names would otherwise overwrite each other forever
/// (see [`uncovered_names`]).
pub fn inspect(data: Option<&BTreeMap<String, ByteString>>, now: SystemTime, renew_before: Duration) -> Verdict {
    let Some(data) = data else {
        return Verdict::Renew(RenewReason::NoSecret);
    };
    let get = |key: &'static str| match data.get(key) {
        Some(ByteString(bytes)) if !bytes.is_empty() => Ok(bytes.clone()),
        _ => Err(RenewReason::Missing { key }),
    };
    let certs = match (get(CA_CERT_KEY), get(SERVER_CERT_KEY), get(SERVER_KEY_KEY)) {
        (Ok(ca_cert_pem), Ok(server_cert_pem), Ok(server_key_pem)) => WebhookCerts {
            ca_cert_pem,
            server_cert_pem,
            server_key_pem,
        },
        (Err(reason), _, _) | (_, Err(reason), _) | (_, _, Err(reason)) => return Verdict::Renew(reason),
    };
    match check(&certs, now + renew_before) {
        Ok(()) => Verdict::Usable(certs),
        Err(reason) => Verdict::Renew(reason),
    }
}

/// Everything [`inspect`] checks once all keys are there, at time `at`.
fn check(certs: &WebhookCerts, at: SystemTime) -> Result<(), RenewReason> {
    let roots = roots(&certs.ca_cert_pem).map_err(|reason| RenewReason::Unusable { key: CA_CERT_KEY, reason })?;
    certified_key_from_pem(&certs.server_cert_pem, &certs.server_key_pem).map_err(|e| match e {
        PemError::NoCertificate => RenewReason::Unusable {
            key: SERVER_CERT_KEY,
            reason: "no PEM certificate".into(),
        },
        PemError::MalformedCertificate(e) => RenewReason::Unusable {
            key: SERVER_CERT_KEY,
            reason: format!("malformed PEM: {e}"),
        },
        PemError::NoKey => RenewReason::Unusable {
            key: SERVER_KEY_KEY,
            reason: "no usable PEM private key".into(),
        },
        PemError::MalformedKey(e) => RenewReason::Unusable {
            key: SERVER_KEY_KEY,
            reason: format!("malformed PEM: {e}"),
        },
        PemError::KeyPair(e) => RenewReason::Unusable {
            key: SERVER_KEY_KEY,
            reason: format!("not the key of {SERVER_CERT_KEY}: {e}"),
        },
    })?;
    let (leaf, intermediates) = server_chain(&certs.server_cert_pem).unwrap_or_default();
    let leaf = leaf.ok_or(RenewReason::Unusable {
        key: SERVER_CERT_KEY,
        reason: "no PEM certificate".into(),
    })?;
    let parsed = ParsedCertificate::try_from(&leaf).map_err(|e| RenewReason::Unusable {
        key: SERVER_CERT_KEY,
        reason: e.to_string(),
    })?;
    let algorithms = rustls::crypto::ring::default_provider().signature_verification_algorithms.all;
    match verify_server_cert_signed_by_trust_anchor(&parsed, &roots, &intermediates, unix_time(at), algorithms) {
        Ok(()) => Ok(()),
        Err(rustls::Error::InvalidCertificate(CertificateError::Expired)) => Err(RenewReason::Expiring { not_after: None }),
        Err(rustls::Error::InvalidCertificate(CertificateError::ExpiredContext { not_after, .. })) => Err(RenewReason::Expiring {
            not_after: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(not_after.as_secs())),
        }),
        Err(e) => Err(RenewReason::Unusable {
            key: SERVER_CERT_KEY,
            reason: format!("not valid under {CA_CERT_KEY}: {e}"),
        }),
    }
}

/// The names of `names` that the serving certificate does not cover. Not a reason to renew (see
/// [`inspect`]), but worth a warning: the API server will refuse the certificate for them.
pub fn uncovered_names(certs: &WebhookCerts, names: &[String]) -> Vec<String> {
    let Ok((Some(leaf), _)) = server_chain(&certs.server_cert_pem) else {
        return names.to_vec();
    };
    let Ok(parsed) = ParsedCertificate::try_from(&leaf) else {
        return names.to_vec();
    };
    names
        .iter()
        .filter(|name| match ServerName::try_from(name.as_str()) {
            Ok(server_name) => verify_server_name(&parsed, &server_name).is_err(),
            Err(_) => true,
        })
        .cloned()
        .collect()
}

/// A new CA and a serving certificate for `names` signed by it, both valid for `validity`
/// (ECDSA P-256).
pub fn generate(names: &[String], validity: Duration) -> Result<WebhookCerts, CertError> {
    let ca = Ca::generate("karpenter-rs webhook CA", validity)?;
    let serving = ca.issue(names, validity)?;
    Ok(WebhookCerts {
        ca_cert_pem: ca.cert_pem().into_bytes(),
        server_cert_pem: serving.cert_pem.into_bytes(),
        server_key_pem: serving.key_pem.into_bytes(),
    })
}

/// `existing` with the three keys set to `certs`; other keys are kept.
pub fn secret_data(existing: Option<&BTreeMap<String, ByteString>>, certs: &WebhookCerts) -> BTreeMap<String, ByteString> {
    let mut data = existing.cloned().unwrap_or_default();
    data.insert(CA_CERT_KEY.into(), ByteString(certs.ca_cert_pem.clone()));
    data.insert(SERVER_CERT_KEY.into(), ByteString(certs.server_cert_pem.clone()));
    data.insert(SERVER_KEY_KEY.into(), ByteString(certs.server_key_pem.clone()));
    data
}

/// The names the serving certificate covers: `svc`, `svc.ns`, `svc.ns.svc`,
/// `svc.ns.svc.cluster.local`, then `extra` (DNS names or IP addresses), without duplicates.
pub fn serving_names(service: &str, namespace: &str, extra: &[String]) -> Vec<String> {
    let mut names = crate::certs::service_dns_names(service, namespace);
    for name in extra.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        if !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
    }
    names
}

/// The `caBundle` a webhook should have when the Secret's CA is `ca_cert_pem` and it has
/// `current`: the Secret's CA first, then the first other certificate of `current`, if any.
/// Keeping the previous CA lets the API server trust replicas still serving the previous
/// certificate while the others switch; it drops out at the next rotation. Deterministic (every
/// replica computes the same bytes), so `current` is rewritten only when it really differs.
pub fn ca_bundle(current: &[u8], ca_cert_pem: &[u8]) -> Vec<u8> {
    // A malformed document contributes nothing; the Secret's CA (checked by `inspect`) stays.
    let ca = pem_certificates(ca_cert_pem).unwrap_or_default();
    let previous = pem_certificates(current).unwrap_or_default().into_iter().find(|c| !ca.contains(c));
    ca.iter()
        .chain(previous.iter())
        .map(|der| pem_encode(der))
        .collect::<String>()
        .into_bytes()
}

/// How often the Secret is checked for expiry besides its watch events: a quarter of
/// `renew_before`, at least [`MIN_CHECK_INTERVAL`] and at most [`MAX_CHECK_INTERVAL`].
pub fn check_interval(renew_before: Duration) -> Duration {
    (renew_before / 4).clamp(MIN_CHECK_INTERVAL, MAX_CHECK_INTERVAL)
}

/// Validity and renewal window that make sense together: a certificate renewed `renew_before`
/// its end must live longer than that, or every new one would be renewed at once.
pub fn check_timing(validity: Duration, renew_before: Duration) -> Result<(), String> {
    if renew_before.is_zero() {
        return Err("--cert-renew-before: invalid value 0s: must be more than 0".into());
    }
    if validity <= renew_before {
        return Err(format!(
            "--cert-validity: invalid value {}s: must be longer than --cert-renew-before ({}s)",
            validity.as_secs(),
            renew_before.as_secs()
        ));
    }
    Ok(())
}

fn roots(ca_pem: &[u8]) -> Result<RootCertStore, String> {
    let ders = pem_certificates(ca_pem).map_err(|e| format!("malformed PEM: {e}"))?;
    if ders.is_empty() {
        return Err("no PEM certificate".into());
    }
    let mut roots = RootCertStore::empty();
    for der in ders {
        roots.add(der).map_err(|e| e.to_string())?;
    }
    Ok(roots)
}

type Chain = (Option<CertificateDer<'static>>, Vec<CertificateDer<'static>>);

fn server_chain(pem: &[u8]) -> Result<Chain, rustls_pki_types::pem::Error> {
    let mut certs = pem_certificates(pem)?.into_iter();
    let leaf = certs.next();
    Ok((leaf, certs.collect()))
}

fn pem_encode(der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

fn unix_time(t: SystemTime) -> UnixTime {
    UnixTime::since_unix_epoch(t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default())
}

#[cfg(test)]
mod tests;
