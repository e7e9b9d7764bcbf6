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
/// `renew_before`, at least 1 s and at most [`MAX_CHECK_INTERVAL`].
pub fn check_interval(renew_before: Duration) -> Duration {
    (renew_before / 4).clamp(Duration::from_secs(1), MAX_CHECK_INTERVAL)
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
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86400);

    fn names() -> Vec<String> {
        serving_names("karpenter-rs", "karpenter", &["127.0.0.1".into()])
    }

    fn data(certs: &WebhookCerts) -> BTreeMap<String, ByteString> {
        secret_data(None, certs)
    }

    fn renew_reason(data: &BTreeMap<String, ByteString>, now: SystemTime) -> RenewReason {
        match inspect(Some(data), now, DAY) {
            Verdict::Renew(reason) => reason,
            Verdict::Usable(_) => panic!("expected a renewal"),
        }
    }

    #[test]
    fn serving_names_cover_the_service_then_extras_without_duplicates() {
        assert_eq!(
            serving_names(
                "karpenter-rs",
                "karpenter",
                &["127.0.0.1".into(), " karpenter-rs ".into(), "".into()]
            ),
            [
                "karpenter-rs",
                "karpenter-rs.karpenter",
                "karpenter-rs.karpenter.svc",
                "karpenter-rs.karpenter.svc.cluster.local",
                "127.0.0.1"
            ]
        );
    }

    #[test]
    fn fresh_certificates_are_usable_and_cover_every_name() {
        let certs = generate(&names(), 7 * DAY).unwrap();
        assert_eq!(inspect(Some(&data(&certs)), SystemTime::now(), DAY), Verdict::Usable(certs.clone()));
        assert!(uncovered_names(&certs, &names()).is_empty());
        assert_eq!(
            uncovered_names(&certs, &["other.karpenter.svc".into(), "10.0.0.1".into()]),
            ["other.karpenter.svc", "10.0.0.1"]
        );
    }

    #[test]
    fn a_missing_secret_or_key_needs_renewal_naming_the_key() {
        assert_eq!(inspect(None, SystemTime::now(), DAY), Verdict::Renew(RenewReason::NoSecret));
        let certs = generate(&names(), 7 * DAY).unwrap();
        for key in [CA_CERT_KEY, SERVER_CERT_KEY, SERVER_KEY_KEY] {
            let mut d = data(&certs);
            d.remove(key);
            assert_eq!(renew_reason(&d, SystemTime::now()), RenewReason::Missing { key });
            d.insert(key.into(), ByteString(Vec::new()));
            assert_eq!(renew_reason(&d, SystemTime::now()), RenewReason::Missing { key });
        }
        assert_eq!(
            RenewReason::Missing { key: SERVER_KEY_KEY }.to_string(),
            "data[server-key.pem]: required value"
        );
        // An empty Secret (as a Helm chart creates it) names the first key.
        assert_eq!(
            inspect(Some(&BTreeMap::new()), SystemTime::now(), DAY),
            Verdict::Renew(RenewReason::Missing { key: CA_CERT_KEY })
        );
    }

    #[test]
    fn malformed_pem_needs_renewal_and_never_panics() {
        let certs = generate(&names(), 7 * DAY).unwrap();
        let other = generate(&names(), 7 * DAY).unwrap();
        let garbage = b"-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n".to_vec();
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            (CA_CERT_KEY, b"hello".to_vec(), CA_CERT_KEY),
            (CA_CERT_KEY, garbage.clone(), CA_CERT_KEY),
            (
                CA_CERT_KEY,
                b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".to_vec(),
                CA_CERT_KEY,
            ),
            (SERVER_CERT_KEY, garbage.clone(), SERVER_CERT_KEY),
            // A good certificate followed by a malformed block is not served with the block skipped.
            (SERVER_CERT_KEY, [certs.server_cert_pem.clone(), garbage].concat(), SERVER_CERT_KEY),
            (SERVER_KEY_KEY, b"not a key".to_vec(), SERVER_KEY_KEY),
            // A key of another certificate.
            (SERVER_KEY_KEY, other.server_key_pem.clone(), SERVER_KEY_KEY),
            // A certificate signed by another CA (with its own key, so the pair matches).
            (CA_CERT_KEY, other.ca_cert_pem.clone(), SERVER_CERT_KEY),
        ];
        for (key, value, blamed) in cases {
            let mut d = data(&certs);
            d.insert(key.into(), ByteString(value));
            match renew_reason(&d, SystemTime::now()) {
                RenewReason::Unusable { key, reason } => {
                    assert_eq!(key, blamed, "{reason}");
                    let shown = RenewReason::Unusable { key, reason }.to_string();
                    assert!(shown.starts_with(&format!("data[{blamed}]: invalid value")), "{shown}");
                }
                other => panic!("{key}: {other:?}"),
            }
        }
    }

    #[test]
    fn renews_only_within_the_renewal_window() {
        let certs = generate(&names(), 7 * DAY).unwrap();
        let d = data(&certs);
        let now = SystemTime::now();
        assert!(matches!(inspect(Some(&d), now + 5 * DAY, DAY), Verdict::Usable(_)));
        match renew_reason(&d, now + 6 * DAY + Duration::from_secs(60)) {
            RenewReason::Expiring { not_after: Some(t) } => {
                let left = t.duration_since(now).unwrap();
                assert!(left > 7 * DAY - Duration::from_secs(60) && left <= 7 * DAY, "{left:?}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(renew_reason(&d, now + 30 * DAY), RenewReason::Expiring { .. }));
    }

    #[test]
    fn replicas_reading_the_same_secret_decide_the_same() {
        let certs = generate(&names(), 7 * DAY).unwrap();
        let d = data(&certs);
        let now = SystemTime::now();
        assert_eq!(inspect(Some(&d), now, DAY), inspect(Some(&d), now, DAY));
        // What one replica wrote, another accepts as is: no second write.
        let written = secret_data(Some(&d), &generate(&names(), 7 * DAY).unwrap());
        assert!(matches!(inspect(Some(&written), now, DAY), Verdict::Usable(_)));
    }

    #[test]
    fn secret_data_keeps_other_keys() {
        let certs = generate(&names(), 7 * DAY).unwrap();
        let existing = BTreeMap::from([("note".to_string(), ByteString(b"kept".to_vec()))]);
        let d = secret_data(Some(&existing), &certs);
        assert_eq!(d.len(), 4);
        assert_eq!(d["note"].0, b"kept");
        assert_eq!(d[CA_CERT_KEY].0, certs.ca_cert_pem);
    }

    #[test]
    fn ca_bundle_puts_the_secret_ca_first_and_keeps_one_previous() {
        let a = generate(&names(), DAY).unwrap().ca_cert_pem;
        let b = generate(&names(), DAY).unwrap().ca_cert_pem;
        let c = generate(&names(), DAY).unwrap().ca_cert_pem;
        let ders = |pem: &[u8]| pem_certificates(pem).unwrap();
        // Empty (as registered) → the CA alone.
        let first = ca_bundle(b"", &a);
        assert_eq!(ders(&first), ders(&a));
        // Stable: computing again changes nothing.
        assert_eq!(ca_bundle(&first, &a), first);
        // Rotation a → b keeps a behind b; b → c drops a.
        let second = ca_bundle(&first, &b);
        assert_eq!(ders(&second), [ders(&b), ders(&a)].concat());
        assert_eq!(ca_bundle(&second, &b), second);
        let third = ca_bundle(&second, &c);
        assert_eq!(ders(&third), [ders(&c), ders(&b)].concat());
        // Garbage in the current bundle is dropped.
        assert_eq!(ders(&ca_bundle(b"junk", &a)), ders(&a));
        let malformed = [
            b.clone(),
            b"-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n".to_vec(),
        ]
        .concat();
        assert_eq!(ders(&ca_bundle(&malformed, &a)), ders(&a));
    }

    #[test]
    fn check_interval_is_a_quarter_of_the_window_within_bounds() {
        assert_eq!(check_interval(Duration::from_secs(10)), Duration::from_millis(2500));
        assert_eq!(check_interval(DAY), MAX_CHECK_INTERVAL);
        assert_eq!(check_interval(Duration::from_secs(1)), Duration::from_secs(1));
    }

    #[test]
    fn validity_must_exceed_the_renewal_window() {
        assert!(check_timing(7 * DAY, DAY).is_ok());
        assert_eq!(
            check_timing(Duration::from_secs(3600), Duration::from_secs(7200)).unwrap_err(),
            "--cert-validity: invalid value 3600s: must be longer than --cert-renew-before (7200s)"
        );
        assert!(check_timing(DAY, Duration::ZERO).unwrap_err().contains("--cert-renew-before"));
    }
}
