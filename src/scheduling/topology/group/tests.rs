use super::*;

#[test]
fn selectors_follow_kubernetes_rules() {
    let labels: BTreeMap<String, String> = [("app".to_string(), "web".to_string())].into();
    assert!(!Selector::new(None).matches(&labels));
    assert!(Selector::new(Some(&LabelSelector::default())).matches(&labels));
    let sel = LabelSelector {
        match_labels: Some([("app".to_string(), "web".to_string())].into()),
        match_expressions: Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
            key: "tier".into(),
            operator: "DoesNotExist".into(),
            values: None,
        }]),
    };
    assert!(Selector::new(Some(&sel)).matches(&labels));
}
