use super::*;
use crate::certs::Ca;

fn pair() -> (Vec<u8>, Vec<u8>) {
    let ca = Ca::generate("test CA", Duration::from_secs(3600)).unwrap();
    let serving = ca.issue(&["127.0.0.1".into()], Duration::from_secs(3600)).unwrap();
    (serving.cert_pem.into_bytes(), serving.key_pem.into_bytes())
}

#[test]
fn a_certificates_expiry_is_read_from_its_der_for_both_time_encodings() {
    for (year, month, day) in [(2031, 5, 17), (2051, 1, 2)] {
        let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        params.not_after = rcgen::date_time_ymd(year, month, day);
        let cert = params.self_signed(&rcgen::KeyPair::generate().unwrap()).unwrap();
        let at = not_after(cert.der()).expect("a notAfter");
        let want = format!("{year:04}-{month:02}-{day:02}T00:00:00Z")
            .parse::<jiff::Timestamp>()
            .unwrap()
            .as_second();
        assert_eq!(at.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs(), want as u64, "{year}");
    }
    assert_eq!(not_after(b"not DER"), None);
    assert_eq!(not_after(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None, "a length past the input");
    let store = CertStore::in_memory();
    assert_eq!(store.expires_at(), None);
    let (cert, key) = pair();
    store.set(&cert, &key, "test").unwrap();
    let left = store.expires_at().unwrap().duration_since(std::time::SystemTime::now()).unwrap();
    assert!(left <= Duration::from_secs(3600) && left > Duration::from_secs(3000), "{left:?}");
    let metrics = Metrics::new();
    store.record_expiry(&metrics);
    assert!(metrics
        .render()
        .contains("karpenter_rs_webhook_certificate_expiration_timestamp_seconds "));
}

#[test]
fn an_in_memory_store_serves_what_it_is_given_and_keeps_it_on_bad_input() {
    let store = CertStore::in_memory();
    assert!(!store.is_loaded());
    let (cert, key) = pair();
    let err = store.set(&cert, b"not a key", "secret karpenter/karpenter-rs-cert").unwrap_err();
    assert_eq!(
        telemetry::chain(&err),
        "loading the serving certificate from secret karpenter/karpenter-rs-cert: no usable PEM private key"
    );
    assert!(!store.is_loaded());
    assert!(store.set(&cert, &key, "test").unwrap());
    assert!(store.is_loaded() && store.serves(&cert, &key));
    assert!(!store.set(&cert, &key, "test").unwrap(), "the same pair again is no change");
    let (other_cert, _) = pair();
    assert!(store.set(&other_cert, &key, "test").is_err(), "a key of another certificate");
    assert!(store.serves(&cert, &key), "the old pair stays in use");
    assert!(!store.reload().unwrap(), "nothing to reload in memory");
}

#[test]
fn a_malformed_pem_block_is_an_error_naming_the_file() {
    let (cert, key) = pair();
    let bad_block = b"-----BEGIN CERTIFICATE-----\n!!! not base64 !!!\n-----END CERTIFICATE-----\n";
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(CERT_FILE), [cert.as_slice(), bad_block].concat()).unwrap();
    std::fs::write(dir.path().join(KEY_FILE), &key).unwrap();
    let err = CertStore::load(dir.path()).unwrap_err();
    let message = telemetry::chain(&err);
    let cert_path = dir.path().join(CERT_FILE).display().to_string();
    assert!(message.starts_with(&format!("{cert_path}: malformed PEM: ")), "{message}");

    std::fs::write(dir.path().join(CERT_FILE), &cert).unwrap();
    let truncated_key = &key[..key.len() - 30];
    std::fs::write(dir.path().join(KEY_FILE), truncated_key).unwrap();
    let message = telemetry::chain(&CertStore::load(dir.path()).unwrap_err());
    let key_path = dir.path().join(KEY_FILE).display().to_string();
    assert!(message.starts_with(&format!("{key_path}: malformed PEM: ")), "{message}");

    std::fs::write(dir.path().join(KEY_FILE), &key).unwrap();
    assert!(CertStore::load(dir.path()).is_ok(), "the good pair loads");
}

#[tokio::test]
async fn waiting_for_a_certificate_returns_once_one_is_set() {
    let store = CertStore::in_memory();
    let waiter = tokio::spawn({
        let store = store.clone();
        async move { store.wait_until_loaded().await }
    });
    tokio::task::yield_now().await;
    assert!(!waiter.is_finished());
    let (cert, key) = pair();
    store.set(&cert, &key, "test").unwrap();
    tokio::time::timeout(Duration::from_secs(5), waiter).await.unwrap().unwrap();
}
