//! Certificates for the webhook's HTTPS listener: a CA and a serving certificate signed by it
//! (ECDSA P-256). `karpenter-rs certs` writes development and test ones to files; the
//! self-managed certificate (`webhook::self_signed`, kept in a Secret) is made here too. Clusters
//! may also mount their own (see certs/README.md).

use std::path::{Path, PathBuf};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose};

/// File names inside a certificate directory (the names Kubernetes TLS Secrets use).
pub const CERT_FILE: &str = "tls.crt";
/// Private key of the serving certificate.
pub const KEY_FILE: &str = "tls.key";
/// The CA certificate, for the webhook configurations' `caBundle`.
pub const CA_CERT_FILE: &str = "ca.crt";
/// The CA key, kept so that more serving certificates can be issued.
pub const CA_KEY_FILE: &str = "ca.key";

/// What can go wrong making or writing certificates.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// rcgen refused the parameters.
    #[error("generating certificate")]
    Generate(#[from] rcgen::Error),
    /// A file could not be written or read.
    #[error("{action} {path}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
}

/// A certificate authority that signs serving certificates.
pub struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

/// A serving certificate and its key, PEM-encoded.
#[derive(Clone, Debug)]
pub struct ServingCert {
    /// Certificate chain (leaf only), PEM.
    pub cert_pem: String,
    /// Private key, PEM (PKCS#8).
    pub key_pem: String,
}

impl Ca {
    /// A new self-signed CA valid for `validity`.
    pub fn generate(common_name: &str, validity: Duration) -> Result<Ca, CertError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name = name(common_name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        set_validity(&mut params, validity);
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        Ok(Ca { cert, key })
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> String {
        self.cert.pem()
    }

    /// The CA key, PEM.
    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// Issues a serving certificate for `names` (DNS names or IP addresses) valid for `validity`.
    pub fn issue(&self, names: &[String], validity: Duration) -> Result<ServingCert, CertError> {
        let mut params = CertificateParams::new(names.to_vec())?;
        params.distinguished_name = name(names.first().map(String::as_str).unwrap_or("karpenter-rs"));
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        set_validity(&mut params, validity);
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.cert, &self.key)?;
        Ok(ServingCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

fn name(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn.push(DnType::OrganizationName, "karpenter-rs");
    dn
}

fn set_validity(params: &mut CertificateParams, validity: Duration) {
    let now = time::OffsetDateTime::now_utc();
    // Backdated a little so that clocks slightly behind ours accept it.
    params.not_before = now - time::Duration::minutes(5);
    params.not_after = now + time::Duration::seconds(i64::try_from(validity.as_secs()).unwrap_or(i64::MAX / 2));
}

/// The names a local webhook certificate always covers, plus the in-cluster service names given.
pub fn serving_names(service_names: &[String]) -> Vec<String> {
    let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string(), "::1".to_string()];
    for n in service_names {
        if !names.contains(n) {
            names.push(n.clone());
        }
    }
    names
}

/// The DNS names of a Service in a namespace: `svc`, `svc.ns`, `svc.ns.svc`, `svc.ns.svc.cluster.local`.
pub fn service_dns_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_string(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

/// Writes `ca.crt`, `ca.key`, `tls.crt` and `tls.key` into `dir` (keys readable by the owner only).
/// The serving files are replaced atomically (write then rename), so a server watching the
/// directory never reads half a file.
pub fn write(dir: &Path, ca: &Ca, serving: &ServingCert) -> Result<(), CertError> {
    std::fs::create_dir_all(dir).map_err(|source| CertError::Io {
        action: "creating directory",
        path: dir.into(),
        source,
    })?;
    write_file(&dir.join(CA_CERT_FILE), &ca.cert_pem(), false)?;
    write_file(&dir.join(CA_KEY_FILE), &ca.key_pem(), true)?;
    write_serving(dir, serving)
}

/// Replaces `tls.crt` and `tls.key` in `dir` atomically.
pub fn write_serving(dir: &Path, serving: &ServingCert) -> Result<(), CertError> {
    write_file(&dir.join(KEY_FILE), &serving.key_pem, true)?;
    write_file(&dir.join(CERT_FILE), &serving.cert_pem, false)
}

fn write_file(path: &Path, contents: &str, private: bool) -> Result<(), CertError> {
    let tmp = path.with_extension("tmp");
    let io = |action| {
        move |source| CertError::Io {
            action,
            path: path.into(),
            source,
        }
    };
    std::fs::write(&tmp, contents).map_err(io("writing"))?;
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).map_err(io("restricting permissions of"))?;
    }
    #[cfg(not(unix))]
    let _ = private;
    std::fs::rename(&tmp, path).map_err(io("replacing"))
}
