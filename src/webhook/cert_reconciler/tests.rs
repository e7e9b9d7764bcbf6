use super::*;

#[test]
fn a_secret_without_data_is_filled_and_a_missing_one_created() {
    let now = SystemTime::now();
    let day = Duration::from_secs(86400);
    assert_eq!(inspect_secret(None, now, day), Verdict::Renew(RenewReason::NoSecret));
    assert_eq!(
        inspect_secret(Some(&Secret::default()), now, day),
        Verdict::Renew(RenewReason::Missing {
            key: self_signed::CA_CERT_KEY
        })
    );
}

#[test]
fn bundles_are_rewritten_only_when_they_differ() {
    let ca = self_signed::generate(&["karpenter-rs".into()], Duration::from_secs(3600))
        .unwrap()
        .ca_cert_pem;
    let mut configs = [WebhookClientConfig::default(), WebhookClientConfig::default()];
    assert!(set_bundles(configs.iter_mut(), &ca));
    let bundle = configs[0].ca_bundle.clone().unwrap();
    assert_eq!(configs[1].ca_bundle.as_ref(), Some(&bundle));
    assert!(!set_bundles(configs.iter_mut(), &ca), "a second pass changes nothing");
    configs[1].ca_bundle = None;
    assert!(set_bundles(configs.iter_mut(), &ca));
    assert_eq!(configs[1].ca_bundle.as_ref(), Some(&bundle));
}
