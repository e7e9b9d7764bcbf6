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
