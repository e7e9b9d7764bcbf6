use super::*;
use serde_json::json;

/// The AdmissionReview the API server sends for a CREATE of `object`.
fn create(object: &Value) -> Vec<u8> {
    let (group, version) = object["apiVersion"].as_str().unwrap().split_once('/').unwrap();
    serde_json::to_vec(&json!({
        "apiVersion": ADMISSION_API_VERSION, "kind": REVIEW_KIND,
        "request": {
            "uid": "u-1", "kind": {"group": group, "version": version, "kind": object["kind"]},
            "operation": "CREATE", "name": object["metadata"]["name"], "object": object
        }
    }))
    .unwrap()
}

/// `object` with the patch of its /mutate answer applied, as the API server applies it.
fn mutated(object: &Value, settings: &ApiSettings) -> Value {
    let outcome = review(Endpoint::Mutate, &create(object), settings);
    let answer: Value = serde_json::from_slice(&outcome.body).unwrap();
    let mut object = object.clone();
    if let Some(patch) = answer["response"]["patch"].as_str() {
        let patch = base64::engine::general_purpose::STANDARD.decode(patch).unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
        json_patch::patch(&mut object, &patch).unwrap();
    }
    object
}

/// The answer's `response`, for `body` sent to `endpoint`.
fn answer(endpoint: Endpoint, body: &[u8]) -> Value {
    let outcome = review(endpoint, body, &ApiSettings::new("ssungz-cluster"));
    serde_json::from_slice::<Value>(&outcome.body).unwrap()["response"].clone()
}

fn first_writeup_provisioner() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/first-writeup/provisioner.yaml");
    serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn a_review_is_answered_alike_whichever_order_its_fields_come_in() {
    let mut bad = first_writeup_provisioner();
    bad["spec"]["ttlSecondsAfterEmpty"] = json!("thirty");
    for object in [first_writeup_provisioner(), bad] {
        let kind_first = create(&object);
        // The object before the kind: read raw, then decoded.
        let text = String::from_utf8(kind_first.clone()).unwrap();
        let (head, tail) = text.split_once(r#""kind":{"group""#).unwrap();
        let (gvk, rest) = tail.split_once('}').unwrap();
        let object_first = format!(
            r#"{head}"object":{object},"kind":{{"group"{gvk}}}{}"#,
            rest.replacen(&format!(r#","object":{object}"#), "", 1)
        );
        assert!(
            object_first.find(r#""object""#) < object_first.find(r#""kind":{"#),
            "{object_first}"
        );
        for endpoint in [Endpoint::Mutate, Endpoint::Validate] {
            assert_eq!(
                answer(endpoint, &kind_first),
                answer(endpoint, object_first.as_bytes()),
                "{object_first}"
            );
        }
    }
}

#[test]
fn an_object_that_does_not_decode_is_answered_with_the_field_at_fault() {
    let mut p = first_writeup_provisioner();
    p["spec"]["ttlSecondsAfterEmpty"] = json!("thirty");
    for endpoint in [Endpoint::Mutate, Endpoint::Validate] {
        let response = answer(endpoint, &create(&p));
        let message = response["status"]["message"].as_str().unwrap();
        assert_eq!(response["allowed"], false);
        assert!(
            message.contains("spec.ttlSecondsAfterEmpty") && message.contains("thirty"),
            "{message}"
        );
    }
    // An array is not an object, though a derived struct would read one.
    let mut review: Value = serde_json::from_slice(&create(&p)).unwrap();
    review["request"]["object"] = json!(["p"]);
    let response = answer(Endpoint::Mutate, &serde_json::to_vec(&review).unwrap());
    assert_eq!(response["status"]["message"], "CREATE request carries no object");
    // A DELETE is allowed whatever its object holds.
    review["request"]["operation"] = json!("DELETE");
    review["request"]["object"] = json!({"spec": {"ttlSecondsAfterEmpty": "thirty"}});
    assert_eq!(answer(Endpoint::Validate, &serde_json::to_vec(&review).unwrap())["allowed"], true);
    // A field given twice is a malformed review, as before.
    let twice = String::from_utf8(create(&p))
        .unwrap()
        .replacen(r#""uid":"u-1""#, r#""uid":"u-1","uid":"u-2""#, 1);
    let response = answer(Endpoint::Mutate, twice.as_bytes());
    assert_eq!(
        response["status"]["message"],
        "malformed AdmissionReview: request.uid: duplicate field `uid`"
    );
}

#[test]
fn a_review_field_given_twice_is_denied_naming_its_path() {
    // Found by the coverage-guided fuzzer: a top-level field given twice was denied as
    // "duplicate field `kind` at line 1 column 63", naming no path.
    let p = first_writeup_provisioner();
    let twice = String::from_utf8(create(&p)).unwrap().replacen(
        r#""kind":"AdmissionReview""#,
        r#""kind":"Admiss1","kind":"AdmissionReview""#,
        1,
    );
    assert_ne!(twice.as_bytes(), create(&p).as_slice(), "the review has a top-level kind to repeat");
    let response = answer(Endpoint::Mutate, twice.as_bytes());
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(
        response["status"]["message"],
        "malformed AdmissionReview: kind: duplicate field `kind`"
    );
    // Below the top level the path leads to the field, and no position is appended.
    let twice =
        String::from_utf8(create(&p))
            .unwrap()
            .replacen(r#""operation":"CREATE""#, r#""operation":"CREATE","operation":"UPDATE""#, 1);
    let response = answer(Endpoint::Validate, twice.as_bytes());
    assert_eq!(
        response["status"]["message"],
        "malformed AdmissionReview: request.operation: duplicate field `operation`"
    );
}

#[test]
fn an_array_where_the_schema_has_an_object_is_denied_naming_the_array() {
    // serde's derived structs read an array as their fields in order: `spec: []` was taken as
    // an empty spec and answered with a patch under /spec that cannot apply to an array.
    let template: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/first-writeup/awsnodetemplate.yaml"),
        )
        .unwrap(),
    )
    .unwrap();
    let mut cases = Vec::new();
    for array in [json!([]), json!([null])] {
        let mut p = first_writeup_provisioner();
        p["spec"] = array;
        cases.push((p, "spec"));
    }
    for (key, array) in [("consolidation", json!([true])), ("kubeletConfiguration", json!([]))] {
        let mut p = first_writeup_provisioner();
        p["spec"][key] = array;
        cases.push((p, if key == "consolidation" { "spec.consolidation" } else { "spec.kubeletConfiguration" }));
    }
    let mut inline = first_writeup_provisioner();
    inline["spec"].as_object_mut().unwrap().remove("providerRef");
    inline["spec"]["provider"] = json!(["%"]);
    cases.push((inline, "spec.provider"));
    let mut t = template.clone();
    t["spec"]["blockDeviceMappings"] = json!([{"deviceName": "/dev/xvda", "ebs": []}]);
    cases.push((t, "spec.blockDeviceMappings[0].ebs"));
    let mut t = template;
    t["spec"]["metadataOptions"] = json!(["enabled"]);
    cases.push((t, "spec.metadataOptions"));
    for (object, field) in &cases {
        for endpoint in [Endpoint::Mutate, Endpoint::Validate] {
            let response = answer(endpoint, &create(object));
            let message = response["status"]["message"].as_str().unwrap_or_default();
            assert_eq!(response["allowed"], false, "{endpoint:?} {object}: {response}");
            assert!(response["patch"].is_null(), "{response}");
            assert!(
                message.contains(&format!("{field}: invalid value")) && message.contains("expected an object"),
                "{endpoint:?} {field}: {message}"
            );
        }
    }
}

#[test]
fn a_key_the_kind_does_not_know_is_denied_whichever_order_the_review_comes_in() {
    let mut p = first_writeup_provisioner();
    p["spec"]["ttlSecondsAfterEmtpy"] = json!(30);
    let mut t: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/first-writeup/awsnodetemplate.yaml"),
        )
        .unwrap(),
    )
    .unwrap();
    t["spec"]["subnetSelectr"] = json!({"a": "b"});
    for (object, field) in [(&p, "spec.ttlSecondsAfterEmtpy"), (&t, "spec.subnetSelectr")] {
        // `create` names the kind before the object: the object is read in the first pass.
        for endpoint in [Endpoint::Mutate, Endpoint::Validate] {
            let response = answer(endpoint, &create(object));
            let message = response["status"]["message"].as_str().unwrap_or_default();
            assert_eq!(response["allowed"], false, "{response}");
            assert!(message.contains(&format!("{field}: forbidden: unknown field")), "{message}");
        }
    }
}

#[test]
fn a_malformed_review_nested_past_the_tree_readers_depth_is_answered_for_its_uid() {
    // The object 200 levels deep (a denial of its own) and the envelope's name of the wrong
    // type: the uid is still read, and the field at fault named, though no JSON tree holds
    // the body.
    let mut deep = json!("x");
    for _ in 0..200 {
        deep = json!([deep]);
    }
    let mut p = first_writeup_provisioner();
    p["spec"]["labels"] = json!({"a": deep});
    // The request's name is the body's first `name` (its keys are written sorted).
    let body = String::from_utf8(create(&p)).unwrap().replacen(r#""name":"#, r#""name":7,"x":"#, 1);
    for endpoint in [Endpoint::Mutate, Endpoint::Validate] {
        let outcome = review(endpoint, body.as_bytes(), &ApiSettings::new("c"));
        let answer: Value = serde_json::from_slice(&outcome.body).unwrap();
        assert_eq!((outcome.http_status, &answer["response"]["uid"]), (200, &json!("u-1")), "{answer}");
        let message = answer["response"]["status"]["message"].as_str().unwrap();
        assert!(message.starts_with("malformed AdmissionReview: request.name: invalid type"), "{message}");
    }
}

#[test]
fn the_mutate_patch_gives_the_object_exactly_its_defaults() {
    let settings = ApiSettings::new("ssungz-cluster");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut seen = 0;
    for writeup in ["first-writeup", "second-writeup"] {
        for entry in std::fs::read_dir(dir.join(writeup)).unwrap() {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            let object: Value = serde_yaml_ng::from_str(&text).unwrap();
            let expected = match object["kind"].as_str() {
                Some("Provisioner") => {
                    let mut p: Provisioner = serde_json::from_value(object.clone()).unwrap();
                    v1alpha5::defaults::set_defaults(&mut p.spec, &settings);
                    serde_json::to_value(&p.spec).unwrap()
                }
                Some("AWSNodeTemplate") => {
                    let mut t: AwsNodeTemplate = serde_json::from_value(object.clone()).unwrap();
                    v1alpha1::defaults::set_defaults(&mut t.spec, &settings.cluster_name);
                    serde_json::to_value(&t.spec).unwrap()
                }
                _ => continue,
            };
            let once = mutated(&object, &settings);
            assert_eq!(once["spec"], expected, "{text}");
            assert_eq!(once["metadata"], object["metadata"], "only the spec is patched");
            // Defaults are idempotent: a defaulted object comes back without a patch.
            assert_eq!(mutated(&once, &settings), once);
            seen += 1;
        }
    }
    assert!(seen >= 6, "{seen} fixtures");
}

#[test]
fn a_review_with_text_no_json_reader_accepts_in_its_envelope_is_denied_naming_the_map() {
    // Found by the third coverage-guided run: the same lone surrogate escape in a key of the
    // envelope (`request.kind`) was denied at `request.kind.?`, a path the review does not have.
    let p = first_writeup_provisioner();
    let text = String::from_utf8(create(&p)).unwrap();
    let broken = text.replacen(r#""version":"v1alpha5""#, r#""v\ud800ersion":"v1alpha5""#, 1);
    assert_ne!(broken, text, "the review names its kind's version");
    for endpoint in [Endpoint::Mutate, Endpoint::Validate] {
        let response = answer(endpoint, broken.as_bytes());
        assert_eq!(response["allowed"], false, "{response}");
        let message = response["status"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("malformed AdmissionReview: request.kind: not valid JSON: "),
            "{message}"
        );
    }
}

#[test]
fn an_object_with_text_no_json_reader_accepts_is_denied_naming_its_field() {
    // Found by the coverage-guided fuzzer: a lone UTF-16 surrogate escape in a key is skipped
    // over by the envelope's reader but refused by every tree reader; it was denied as "nested
    // too deeply" at `spec.kubeletConfiguration.systemReserved.?`, a path the object does not have.
    let p = first_writeup_provisioner();
    let text = String::from_utf8(create(&p)).unwrap();
    let broken = text.replacen(
        r#""spec":{"#,
        r#""spec":{"kubeletConfiguration":{"systemReserved":{"cpu":"100m","memory\ud800x":"1Gi"}},"#,
        1,
    );
    assert_ne!(broken, text, "the review has a spec to break");
    for endpoint in [Endpoint::Mutate, Endpoint::Validate] {
        let response = answer(endpoint, broken.as_bytes());
        assert_eq!(response["allowed"], false, "{response}");
        let message = response["status"]["message"].as_str().unwrap();
        assert!(
            message
                .starts_with(r#"Provisioner "service" is invalid: spec.kubeletConfiguration.systemReserved: forbidden: not valid JSON: "#),
            "{message}"
        );
    }
}
