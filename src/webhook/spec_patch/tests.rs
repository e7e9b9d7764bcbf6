use super::*;
use serde_json::json;

/// The patch between two specs, applied to an object holding the first; with the operations.
fn patched(before: &Value, after: &Value) -> (Value, Vec<String>) {
    let encoded = patch(&Fields::of(before).unwrap(), &Fields::of(after).unwrap());
    let operations: json_patch::Patch = serde_json::from_slice(&encoded).unwrap();
    let mut object = json!({"metadata": {"name": "p"}, "spec": before});
    json_patch::patch(&mut object, &operations).unwrap();
    let ops: Vec<String> = serde_json::from_slice::<Vec<Value>>(&encoded)
        .unwrap()
        .iter()
        .map(|op| format!("{} {}", op["op"].as_str().unwrap(), op["path"].as_str().unwrap()))
        .collect();
    (object["spec"].clone(), ops)
}

#[test]
fn a_patch_turns_the_old_spec_into_the_new_touching_only_what_changed() {
    let before = json!({
        "labels": {"team": "a", "a/b~c": "x"},
        "requirements": [{"key": "zone", "operator": "In", "values": ["a"]}],
        "ttlSecondsAfterEmpty": 30,
        "weight": 1,
        "limits": {"resources": {"cpu": "10"}}
    });
    let after = json!({
        "labels": {"team": "a", "a/b~c": "x"},
        "requirements": [{"key": "zone", "operator": "In", "values": ["a"]}, {"key": "os", "operator": "In", "values": ["linux"]}, {"key": "arch", "operator": "In", "values": ["amd64"]}],
        "ttlSecondsAfterEmpty": 60,
        "ttlSecondsUntilExpired": 2592000,
        "limits": {"resources": {"cpu": "10", "memory": "1Ti"}}
    });
    let (spec, ops) = patched(&before, &after);
    assert_eq!(spec, after);
    assert_eq!(
        ops,
        [
            "add /spec/limits/resources/memory",
            "add /spec/requirements/-",
            "add /spec/requirements/-",
            "replace /spec/ttlSecondsAfterEmpty",
            "add /spec/ttlSecondsUntilExpired",
            "remove /spec/weight"
        ]
    );
    // Nothing changed: no patch.
    assert!(patch(&Fields::of(&before).unwrap(), &Fields::of(&before).unwrap()).is_empty());
    // Keys that need escaping in a JSON pointer.
    let escaped = json!({"a/b~c": 1});
    let (spec, ops) = patched(&json!({}), &escaped);
    assert_eq!(spec, escaped);
    assert_eq!(ops, ["add /spec/a~1b~0c"]);
}

#[test]
fn only_elements_kept_first_and_unchanged_make_an_append() {
    let cases = [
        // From empty: every element is appended.
        (
            json!({"r": []}),
            json!({"r": [1, {"a": 2}]}),
            vec!["add /spec/r/-", "add /spec/r/-"],
        ),
        // Reordered, or an element changed: diffed element by element.
        (
            json!({"r": [{"k": "os"}, {"k": "zone"}]}),
            json!({"r": [{"k": "zone"}, {"k": "os"}, {"k": "arch"}]}),
            vec![],
        ),
        (
            json!({"r": [{"k": "zone", "v": ["a"]}]}),
            json!({"r": [{"k": "zone", "v": ["a", "b"]}, {"k": "os"}]}),
            vec![],
        ),
        // A number is not a prefix of a longer one: [1] to [12, 3] is no append.
        (json!({"r": [1]}), json!({"r": [12, 3]}), vec![]),
        // Strings with brackets and commas inside are not element boundaries.
        (json!({"r": ["a,"]}), json!({"r": ["a,", "]"]}), vec!["add /spec/r/-"]),
        (json!({"r": ["a"]}), json!({"r": ["a\",\"b"]}), vec![]),
        // Shorter or not an array.
        (json!({"r": [1, 2]}), json!({"r": [1]}), vec![]),
        (json!({"r": "[1"}), json!({"r": "[1, 2]"}), vec![]),
    ];
    for (before, after, appends) in cases {
        let (spec, ops) = patched(&before, &after);
        assert_eq!(spec, after, "from {before} to {after}");
        let added: Vec<&String> = ops.iter().filter(|op| op.ends_with("/-")).collect();
        assert_eq!(added, appends.iter().collect::<Vec<_>>(), "from {before} to {after}: {ops:?}");
    }
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl_seconds_after_empty: Option<i64>,
    requirements: Vec<String>,
}

#[test]
fn a_struct_is_encoded_field_by_field_as_serde_json_writes_it() {
    let spec = Spec {
        ttl_seconds_after_empty: None,
        requirements: vec!["a\"b".into()],
    };
    let fields = Fields::of(&spec).unwrap();
    assert_eq!(fields.names().collect::<Vec<_>>(), ["requirements"]);
    assert_eq!(fields.get("requirements"), Some(&br#"["a\"b"]"#[..]));
    assert_eq!(fields.get("ttlSecondsAfterEmpty"), None);
    assert!(Fields::of(&[1, 2]).is_err());
    assert!(Fields::of(&"spec").is_err());
    assert!(Fields::of(&std::collections::BTreeMap::from([(1, 2)])).is_err());
}
