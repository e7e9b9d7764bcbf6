use super::*;

#[test]
fn writes_volume_sizes_as_v1_accepts_them() {
    for (given, want) in [
        ("20Gi", "20Gi"),
        ("100G", "100G"),
        ("1Ti", "1Ti"),
        ("64T", "64T"),
        ("20000Mi", "20Gi"),
        ("1000Mi", "1Gi"),
        ("21474836480", "20Gi"),
        ("1.5Ti", "1536Gi"),
        ("0100Gi", "100Gi"),
    ] {
        assert_eq!(v1_volume_size(given).as_deref(), Some(want), "{given}");
    }
    assert!(!is_v1_volume_size("18Ti"));
    assert!(is_v1_volume_size("17Ti"));
}

#[test]
fn splits_comma_separated_tag_values_into_terms() {
    let selector = BTreeMap::from([
        ("environment".to_string(), "production,staging".to_string()),
        ("team".to_string(), "*".to_string()),
    ]);
    let (node, notes) = selector_terms(&selector, &Path::new("spec.subnetSelector"), &[]).unwrap();
    let Node::Seq(terms) = node else { panic!("a sequence") };
    assert_eq!(terms.len(), 2);
    assert_eq!(notes.len(), 1, "{notes:?}");
    let ids = BTreeMap::from([("aws-ids".to_string(), "subnet-1, subnet-2".to_string())]);
    let (node, _) = selector_terms(&ids, &Path::new("spec.subnetSelector"), &[]).unwrap();
    let Node::Seq(terms) = node else { panic!("a sequence") };
    assert_eq!(terms.len(), 2);
    let err = selector_terms(&BTreeMap::new(), &Path::new("spec.subnetSelector"), &[]).unwrap_err();
    assert!(err.to_string().contains("spec.subnetSelector: invalid value \"{}\""), "{err}");
}
