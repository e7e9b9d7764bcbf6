//! The conversion on both write-ups' manifests and on the cases where v1 differs.

use serde::Deserialize;
use serde_json::{json, Value};

use super::*;
use crate::apis::v1alpha5::{self, Provisioner};

fn fixture(path: &str) -> Source {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/");
    Source {
        name: path.to_string(),
        text: std::fs::read_to_string(format!("{root}{path}")).expect("fixture exists"),
    }
}

fn text(name: &str, text: &str) -> Source {
    Source {
        name: name.to_string(),
        text: text.to_string(),
    }
}

fn settings(cluster: &str) -> Settings {
    Settings {
        api: ApiSettings::new(cluster),
        kubernetes_version: None,
        default_instance_profile: None,
    }
}

/// The output's documents, parsed, by kind and name.
fn documents(yaml: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(yaml)
        .map(|d| Value::deserialize(d).expect("the output is YAML"))
        .collect()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in {docs:#?}"))
}

fn run(sources: &[Source], settings: &Settings) -> (String, Vec<Value>) {
    let out = convert(sources, settings).unwrap_or_else(|e| panic!("{e}"));
    let docs = documents(&out.yaml);
    (out.yaml, docs)
}

fn errors(sources: &[Source], settings: &Settings) -> String {
    convert(sources, settings).expect_err("conversion fails").to_string()
}

const PROVISIONER: &str = "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata:\n  name: p\nspec:\n";
const TEMPLATE: &str = "apiVersion: karpenter.k8s.aws/v1alpha1\nkind: AWSNodeTemplate\nmetadata:\n  name: t\nspec:\n";

#[test]
fn converts_the_first_write_up_with_its_defaults() {
    let (yaml, docs) = run(
        &[
            fixture("first-writeup/provisioner.yaml"),
            fixture("first-writeup/awsnodetemplate.yaml"),
        ],
        &settings("ssungz-cluster"),
    );
    assert_eq!(docs.len(), 2, "{yaml}");
    let pool = find(&docs, "NodePool", "service");
    assert_eq!(pool["apiVersion"], "karpenter.sh/v1");
    assert_eq!(
        pool["spec"],
        json!({
            "template": {
                "metadata": {"labels": {"nodeType": "service-2023"}},
                "spec": {
                    "requirements": [
                        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["t3.large", "t3.xlarge"]},
                        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["ap-northeast-2a", "ap-northeast-2c"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
                    ],
                    "taints": [{"key": "service", "value": "true", "effect": "NoSchedule"}],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "service-lt"},
                    "expireAfter": "336h"
                }
            },
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s"}
        })
    );
    let class = find(&docs, "EC2NodeClass", "service-lt");
    assert_eq!(class["apiVersion"], "karpenter.k8s.aws/v1");
    assert_eq!(
        class["spec"],
        json!({
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery/ssungz-cluster": "*"}}],
            "securityGroupSelectorTerms": [{"tags": {"aws:eks:cluster-name": "ssungz-cluster"}}],
            "amiSelectorTerms": [{"alias": "al2@latest"}],
            "role": "KarpenterNodeRole-ssungz-cluster",
            "tags": {"karpenter.sh/discovery": "ssungz-cluster"},
            "metadataOptions": {"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled", "httpPutResponseHopLimit": 2, "httpTokens": "required"}
        })
    );
    // The defaults and choices are pointed out where they are.
    for note in [
        "# a karpenter-rs default for Provisioners that did not constrain this key",
        "# from ttlSecondsAfterEmpty: 30",
        "# from ttlSecondsUntilExpired: 1209600",
        "# REPLACE: instanceProfile was not set",
        "# amiFamily was not set: karpenter-rs uses AL2 up to Kubernetes 1.32",
        "Karpenter v1 would default httpPutResponseHopLimit to 1",
    ] {
        assert!(yaml.contains(note), "{note:?} in\n{yaml}");
    }
    let default_note = yaml.find("# a karpenter-rs default").unwrap();
    assert!(
        yaml[default_note..]
            .trim_start_matches(|c| c != '\n')
            .trim_start()
            .starts_with("- key: kubernetes.io/os"),
        "{yaml}"
    );
}

#[test]
fn picks_the_ami_family_by_kubernetes_version_and_the_instance_profile_setting() {
    let s = Settings {
        kubernetes_version: Some(KubernetesVersion { major: 1, minor: 33 }),
        default_instance_profile: Some("KarpenterNodeInstanceProfile".into()),
        ..settings("ssungz-cluster")
    };
    let (yaml, docs) = run(&[fixture("first-writeup/awsnodetemplate.yaml")], &s);
    let spec = &find(&docs, "EC2NodeClass", "service-lt")["spec"];
    assert_eq!(spec["amiSelectorTerms"], json!([{"alias": "al2023@latest"}]));
    assert_eq!(spec["instanceProfile"], "KarpenterNodeInstanceProfile");
    assert!(spec.get("role").is_none());
    assert!(yaml.contains("--kubernetes-version 1.33 gives this"), "{yaml}");
}

#[test]
fn converts_the_second_write_up_inline_providers() {
    let (yaml, docs) = run(
        &[fixture("second-writeup/provisioner-cluster-name.yaml")],
        &settings("your-cluster-name"),
    );
    let pool = find(&docs, "NodePool", "default");
    assert_eq!(pool["spec"]["template"]["spec"]["nodeClassRef"]["name"], "default");
    // No emptiness TTL typed: karpenter-rs's default of 30 s; the expiry default of 30 days.
    assert_eq!(
        pool["spec"]["disruption"],
        json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s"})
    );
    assert_eq!(pool["spec"]["template"]["spec"]["expireAfter"], "720h");
    let class = find(&docs, "EC2NodeClass", "default");
    assert_eq!(class["spec"]["instanceProfile"], "KarpenterNodeInstanceProfile");
    assert_eq!(
        class["spec"]["subnetSelectorTerms"],
        json!([{"tags": {"karpenter.sh/discovery": "your-cluster-name"}}])
    );
    assert_eq!(
        class["spec"]["securityGroupSelectorTerms"],
        json!([{"tags": {"karpenter.sh/discovery": "your-cluster-name"}}])
    );
    for note in [
        "# spec.provider (inline AWS settings) has no Karpenter v1 equivalent: they are in EC2NodeClass \"default\" below.",
        "# spec.provider.clusterName: your-cluster-name has no Karpenter v1 equivalent",
        "# ttlSecondsAfterEmpty was not set: karpenter-rs defaulted it to 30",
        "# ttlSecondsUntilExpired was not set: karpenter-rs defaulted it to 2592000",
    ] {
        assert!(yaml.contains(note), "{note:?} in\n{yaml}");
    }

    let (yaml, docs) = run(
        &[
            fixture("second-writeup/provisioner-spot-price.yaml"),
            fixture("second-writeup/provisioner-instance-types.yaml"),
            fixture("second-writeup/provisioner-selectors.yaml"),
        ],
        &settings("ssungz-cluster"),
    );
    assert_eq!(docs.len(), 6, "{yaml}");
    let spot = find(&docs, "NodePool", "spot");
    assert_eq!(spot["spec"]["disruption"]["consolidateAfter"], "5m");
    let reqs = spot["spec"]["template"]["spec"]["requirements"].as_array().unwrap();
    assert_eq!(reqs.len(), 4, "os added, no category/generation defaults: {reqs:?}");
    assert!(
        yaml.contains("# spec.provider.spotPrice: \"0.067\" has no Karpenter v1 equivalent"),
        "{yaml}"
    );
    assert_eq!(
        find(&docs, "EC2NodeClass", "spot")["spec"]["subnetSelectorTerms"],
        json!([{"tags": {"environment": "production"}}])
    );
    let m5 = find(&docs, "NodePool", "m5");
    let keys: Vec<&str> = m5["spec"]["template"]["spec"]["requirements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        [
            "node.kubernetes.io/instance-type",
            "kubernetes.io/os",
            "kubernetes.io/arch",
            "karpenter.sh/capacity-type"
        ]
    );
    find(&docs, "EC2NodeClass", "m5");
    find(&docs, "NodePool", "default");
    find(&docs, "EC2NodeClass", "default");
}

#[test]
fn denies_what_the_webhook_denies_naming_field_and_value() {
    let bad_ttl = format!("{PROVISIONER}  ttlSecondsAfterEmpty: -1\n  providerRef:\n    name: t\n");
    let got = errors(&[text("bad.yaml", &bad_ttl)], &settings("c"));
    assert_eq!(
        got,
        "bad.yaml: document 1: Provisioner \"p\" is invalid: spec.ttlSecondsAfterEmpty: invalid value -1: must be 0 or greater"
    );
    let typo = format!("{PROVISIONER}  provider:\n    subnetSelector: {{a: b}}\n    securityGroupSelecter: {{a: b}}\n");
    let got = errors(&[text("typo.yaml", &typo)], &settings("c"));
    assert!(
        got.contains("spec.provider.securityGroupSelecter: forbidden: unknown field, did you mean \"securityGroupSelector\"?"),
        "{got}"
    );
    let unknown = format!("{PROVISIONER}  providerRef:\n    name: t\n  ttlSecondsAfterEmty: 30\n");
    let got = errors(&[text("u.yaml", &unknown)], &settings("c"));
    assert!(got.contains("spec.ttlSecondsAfterEmty: forbidden: unknown field"), "{got}");
    let template = format!("{TEMPLATE}  subnetSelector:\n    aws-ids: subnet-1,sg-2\n");
    let got = errors(&[text("t.yaml", &template)], &settings("c"));
    assert!(
        got.contains("AWSNodeTemplate \"t\" is invalid: spec.subnetSelector[aws-ids]: invalid value \"subnet-1,sg-2\""),
        "{got}"
    );
    // Every problem at once, each with its file and document.
    let got = errors(&[text("bad.yaml", &bad_ttl), text("t.yaml", &template)], &settings("c"));
    assert_eq!(got.lines().count(), 2, "{got}");
}

#[test]
fn refuses_broken_yaml_other_versions_duplicates_and_empty_input() {
    let got = errors(&[text("x.yaml", "spec: [unclosed\n")], &settings("c"));
    assert!(got.starts_with("x.yaml: document 1: not valid YAML"), "{got}");
    let beta = "apiVersion: karpenter.sh/v1beta1\nkind: Provisioner\nmetadata: {name: p}\n";
    let got = errors(&[text("b.yaml", beta)], &settings("c"));
    assert!(got.contains("karpenter.sh/v1beta1 Provisioner is not converted"), "{got}");
    let one = format!("{PROVISIONER}  providerRef:\n    name: t\n");
    let got = errors(&[text("a.yaml", &one), text("b.yaml", &one)], &settings("c"));
    assert_eq!(
        got,
        "b.yaml: document 1: Provisioner \"p\" appears twice (also at a.yaml: document 1)"
    );
    let got = errors(&[fixture("first-writeup/nginx-deployment.yaml")], &settings("c"));
    assert!(got.contains("holds no karpenter.sh/v1alpha5 Provisioner"), "{got}");
}

#[test]
fn reads_lists_and_skips_other_kinds() {
    let list = json!({
        "apiVersion": "v1", "kind": "List",
        "items": [
            serde_yaml_ng::from_str::<Value>(&fixture("first-writeup/provisioner.yaml").text).unwrap(),
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}
        ]
    });
    let out = convert(
        &[text("list.json", &list.to_string()), fixture("first-writeup/nginx-deployment.yaml")],
        &settings("ssungz-cluster"),
    )
    .unwrap();
    assert_eq!(documents(&out.yaml).len(), 1);
    assert_eq!(out.skipped.len(), 2, "{:?}", out.skipped);
    assert!(
        out.skipped[0].starts_with("list.json: document 1, item 2: skipped v1 ConfigMap \"cm\""),
        "{:?}",
        out.skipped
    );
}

#[test]
fn consolidation_and_turned_off_defaults_become_disruption_settings() {
    let consolidating = format!("{PROVISIONER}  providerRef:\n    name: t\n  consolidation:\n    enabled: true\n  ttlSecondsUntilExpired: 90\n  weight: 10\n  limits:\n    resources:\n      cpu: 1000\n      memory: 1000Gi\n");
    let (_, docs) = run(&[text("c.yaml", &consolidating)], &settings("c"));
    let spec = &find(&docs, "NodePool", "p")["spec"];
    assert_eq!(
        spec["disruption"],
        json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"})
    );
    assert_eq!(spec["template"]["spec"]["expireAfter"], "1m30s");
    assert_eq!(spec["weight"], 10);
    assert_eq!(spec["limits"], json!({"cpu": "1000", "memory": "1000Gi"}));

    let off = Settings {
        api: ApiSettings {
            default_ttl_seconds_after_empty: None,
            default_ttl_seconds_until_expired: None,
            ..ApiSettings::new("c")
        },
        ..settings("c")
    };
    let plain = format!("{PROVISIONER}  providerRef:\n    name: t\n");
    let (yaml, docs) = run(&[text("p.yaml", &plain)], &off);
    let spec = &find(&docs, "NodePool", "p")["spec"];
    assert_eq!(
        spec["disruption"],
        json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"})
    );
    assert_eq!(spec["template"]["spec"]["expireAfter"], "Never");
    assert!(
        yaml.contains("so nodes never expired (Karpenter v1 would default expireAfter to 720h)"),
        "{yaml}"
    );
}

#[test]
fn kubelet_settings_move_to_the_node_class_or_a_copy_of_it() {
    let two = format!(
        "{TEMPLATE}  detailedMonitoring: false\n---\n{}---\n{}---\n{}",
        PROVISIONER.replace("name: p", "name: a")
            + "  providerRef:\n    name: t\n  kubeletConfiguration:\n    maxPods: 20\n    containerRuntime: dockerd\n    imageGCHighThresholdPercent: 80\n    imageGCLowThresholdPercent: 80\n",
        PROVISIONER.replace("name: p", "name: b") + "  providerRef:\n    name: t\n  kubeletConfiguration:\n    maxPods: 30\n",
        PROVISIONER.replace("name: p", "name: c") + "  providerRef:\n    name: elsewhere\n  kubeletConfiguration:\n    clusterDNS: [10.0.0.10]\n",
    );
    let (yaml, docs) = run(&[text("k.yaml", &two)], &settings("c"));
    let class = find(&docs, "EC2NodeClass", "t");
    assert_eq!(
        class["spec"]["kubelet"],
        json!({"maxPods": 20, "imageGCHighThresholdPercent": 80, "imageGCLowThresholdPercent": 79})
    );
    assert!(yaml.contains("containerRuntime: dockerd has no Karpenter v1 equivalent"), "{yaml}");
    let copy = find(&docs, "EC2NodeClass", "t-b");
    assert_eq!(copy["spec"]["kubelet"], json!({"maxPods": 30}));
    assert_eq!(copy["spec"]["subnetSelectorTerms"], class["spec"]["subnetSelectorTerms"]);
    assert_eq!(
        find(&docs, "NodePool", "a")["spec"]["template"]["spec"]["nodeClassRef"]["name"],
        "t"
    );
    assert_eq!(
        find(&docs, "NodePool", "b")["spec"]["template"]["spec"]["nodeClassRef"]["name"],
        "t-b"
    );
    // A template that is not in the input: the settings are written out as a comment.
    let c = find(&docs, "NodePool", "c");
    assert_eq!(c["spec"]["template"]["spec"]["nodeClassRef"]["name"], "elsewhere");
    let commented: Vec<&str> = yaml.lines().map(str::trim).filter(|l| l.starts_with('#')).collect();
    let at = commented
        .iter()
        .position(|l| *l == "#   kubelet:")
        .unwrap_or_else(|| panic!("{yaml}"));
    assert_eq!(commented[at + 1..at + 3], ["#     clusterDNS:", "#       - '10.0.0.10'"], "{yaml}");
}

#[test]
fn leaves_out_what_v1_refuses_and_says_so() {
    let p = format!(
        "{PROVISIONER}  providerRef:\n    name: t\n  labels:\n    notkubernetes.io/team: a\n    team: b\n  annotations:\n    karpenter.sh/do-not-consolidate: \"true\"\n  requirements:\n    - key: karpenter.k8s.aws/instance-pods\n      operator: Gt\n      values: [\"10\"]\n"
    );
    let t = format!("{TEMPLATE}  tags:\n    eks:eks-cluster-name: c\n    team: b\n");
    let (yaml, docs) = run(&[text("p.yaml", &p), text("t.yaml", &t)], &settings("c"));
    let pool = find(&docs, "NodePool", "p");
    assert_eq!(pool["spec"]["template"]["metadata"]["labels"], json!({"team": "b"}));
    assert_eq!(
        pool["spec"]["template"]["metadata"]["annotations"],
        json!({"karpenter.sh/do-not-disrupt": "true"})
    );
    let keys: Vec<&str> = pool["spec"]["template"]["spec"]["requirements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    assert!(!keys.contains(&"karpenter.k8s.aws/instance-pods"), "{keys:?}");
    assert_eq!(find(&docs, "EC2NodeClass", "t")["spec"]["tags"], json!({"team": "b"}));
    for note in [
        "# label notkubernetes.io/team: a is left out: it has no Karpenter v1 equivalent (label domain \"kubernetes.io\" is restricted).",
        "# requirement karpenter.k8s.aws/instance-pods Gt [\"10\"] is left out",
        "# karpenter.sh/do-not-consolidate has no Karpenter v1 equivalent: v1 reads karpenter.sh/do-not-disrupt instead",
        "# tag eks:eks-cluster-name: c is left out",
    ] {
        assert!(yaml.contains(note), "{note:?} in\n{yaml}");
    }
}

#[test]
fn converts_ami_selectors_volumes_and_ubuntu() {
    let t = format!(
        "{TEMPLATE}  amiFamily: Bottlerocket\n  amiSelector:\n    aws::name: my-ami-*\n    team: a,b\n  userData: |\n    [settings.kubernetes]\n    max-pods = 10\n  blockDeviceMappings:\n    - deviceName: /dev/xvdb\n      ebs:\n        volumeSize: 20000Mi\n        volumeType: gp3\n  detailedMonitoring: true\n"
    );
    let (yaml, docs) = run(&[text("t.yaml", &t)], &settings("c"));
    let spec = &find(&docs, "EC2NodeClass", "t")["spec"];
    assert_eq!(spec["amiFamily"], "Bottlerocket");
    assert_eq!(
        spec["amiSelectorTerms"],
        json!([
            {"tags": {"team": "a"}, "name": "my-ami-*", "owner": "self"},
            {"tags": {"team": "b"}, "name": "my-ami-*", "owner": "self"},
            {"tags": {"team": "a"}, "name": "my-ami-*", "owner": "amazon"},
            {"tags": {"team": "b"}, "name": "my-ami-*", "owner": "amazon"}
        ])
    );
    assert_eq!(spec["userData"], "[settings.kubernetes]\nmax-pods = 10\n");
    assert!(yaml.contains("userData: |\n    [settings.kubernetes]\n"), "{yaml}");
    assert_eq!(spec["blockDeviceMappings"][0]["ebs"]["volumeSize"], "20Gi");
    assert_eq!(spec["detailedMonitoring"], true);

    let ids = format!("{TEMPLATE}  amiFamily: Custom\n  amiSelector:\n    aws-ids: ami-1,ami-2\n");
    let (_, docs) = run(&[text("t.yaml", &ids)], &settings("c"));
    let spec = &find(&docs, "EC2NodeClass", "t")["spec"];
    assert_eq!(spec["amiFamily"], "Custom");
    assert_eq!(spec["amiSelectorTerms"], json!([{"id": "ami-1"}, {"id": "ami-2"}]));

    let ubuntu = format!("{TEMPLATE}  amiFamily: Ubuntu\n");
    let got = errors(&[text("u.yaml", &ubuntu)], &settings("c"));
    assert!(
        got.contains("has no Karpenter v1 equivalent: spec.amiFamily: required value: amiFamily Ubuntu"),
        "{got}"
    );
    let s = Settings {
        kubernetes_version: Some(KubernetesVersion { major: 1, minor: 29 }),
        ..settings("c")
    };
    let (_, docs) = run(&[text("u.yaml", &ubuntu)], &s);
    let spec = &find(&docs, "EC2NodeClass", "t")["spec"];
    assert_eq!(spec["amiFamily"], "AL2");
    assert_eq!(
        spec["amiSelectorTerms"][0]["ssmParameter"],
        "/aws/service/canonical/ubuntu/eks/20.04/1.29/stable/current/amd64/hvm/ebs-gp2/ami-id"
    );
    assert_eq!(spec["blockDeviceMappings"][0]["deviceName"], "/dev/sda1");
    assert_eq!(spec["blockDeviceMappings"][0]["rootVolume"], true);
    let selected = format!("{TEMPLATE}  amiFamily: Ubuntu\n  amiSelector:\n    aws-ids: ami-0123\n");
    let (_, docs) = run(&[text("u.yaml", &selected)], &settings("c"));
    let spec = &find(&docs, "EC2NodeClass", "t")["spec"];
    assert_eq!(spec["amiFamily"], "AL2");
    assert_eq!(spec["amiSelectorTerms"], json!([{"id": "ami-0123"}]));
    assert_eq!(spec["blockDeviceMappings"][0]["deviceName"], "/dev/sda1");
}

#[test]
fn refuses_launch_templates_and_splits_selector_values() {
    let lt = format!("{TEMPLATE}  launchTemplate: my-template\n");
    let got = errors(&[text("lt.yaml", &lt)], &settings("c"));
    assert!(
        got.contains(
            "AWSNodeTemplate \"t\" has no Karpenter v1 equivalent: spec.launchTemplate: forbidden: Karpenter v1 has no launchTemplate"
        ),
        "{got}"
    );
    let t =
        format!("{TEMPLATE}  subnetSelector:\n    environment: production,staging\n  securityGroupSelector:\n    aws::ids: sg-1, sg-2\n");
    let (_, docs) = run(&[text("t.yaml", &t)], &settings("c"));
    let spec = &find(&docs, "EC2NodeClass", "t")["spec"];
    assert_eq!(
        spec["subnetSelectorTerms"],
        json!([{"tags": {"environment": "production"}}, {"tags": {"environment": "staging"}}])
    );
    assert_eq!(spec["securityGroupSelectorTerms"], json!([{"id": "sg-1"}, {"id": "sg-2"}]));
}

#[test]
fn converting_the_output_of_defaulting_again_gives_the_same_documents() {
    // A Provisioner read back from a cluster already carries karpenter-rs's defaults.
    let s = settings("ssungz-cluster");
    let typed = fixture("first-writeup/provisioner.yaml");
    let value: Value = serde_yaml_ng::from_str(&typed.text).unwrap();
    let mut p: Provisioner = serde_json::from_value(value).unwrap();
    v1alpha5::defaults::set_defaults(&mut p.spec, &s.api);
    let stored = text("stored.json", &serde_json::to_string(&p).unwrap());
    let (_, from_typed) = run(&[typed], &s);
    let (_, from_stored) = run(&[stored], &s);
    assert_eq!(from_typed, from_stored);
}

#[test]
fn formats_durations_as_v1_writes_them() {
    assert_eq!(duration(0), "0s");
    assert_eq!(duration(30), "30s");
    assert_eq!(duration(90), "1m30s");
    assert_eq!(duration(3600), "1h");
    assert_eq!(duration(2_592_000), "720h");
    assert_eq!(duration(3661), "1h1m1s");
}

#[test]
fn json_output_is_one_list_of_the_yaml_objects_with_every_comment_as_a_note() {
    let out = convert(
        &[
            fixture("first-writeup/provisioner.yaml"),
            fixture("first-writeup/awsnodetemplate.yaml"),
        ],
        &settings("ssungz-cluster"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (yaml, yaml_notes) = out.render(Output::Yaml);
    assert_eq!(yaml, out.yaml);
    assert!(yaml_notes.is_empty(), "YAML keeps its comments in place: {yaml_notes:?}");

    let (json_text, notes) = out.render(Output::Json);
    let list: Value = serde_json::from_str(&json_text).expect("the output is JSON");
    assert_eq!(list["apiVersion"], "v1");
    assert_eq!(list["kind"], "List");
    assert_eq!(list["items"], Value::Array(documents(&yaml)), "the same objects as the YAML");
    // Every comment line of the YAML is in a note, headed by its object and field.
    let comments = yaml.lines().filter(|l| l.trim_start().starts_with('#')).count();
    assert!(notes.len() >= 6 && notes.len() <= comments, "{notes:#?}");
    for expected in [
        "NodePool \"service\" spec.template.spec.requirements[3]: a karpenter-rs default for Provisioners that did not constrain this key",
        "NodePool \"service\" spec.disruption: from ttlSecondsAfterEmpty: 30",
        "NodePool \"service\" spec.template.spec.expireAfter: from ttlSecondsUntilExpired: 1209600",
        "EC2NodeClass \"service-lt\" spec.role: REPLACE: instanceProfile was not set",
        "EC2NodeClass \"service-lt\": EC2NodeClass \"service-lt\", converted from AWSNodeTemplate \"service-lt\"",
    ] {
        assert!(notes.iter().any(|n| n.starts_with(expected)), "{expected:?} in {notes:#?}");
    }
    assert!(notes.iter().all(|n| !n.contains('\n')), "one line each: {notes:#?}");
}

#[test]
fn reads_a_directory_as_kubectl_does_by_name_and_only_manifests() {
    use cli::{is_manifest, plan, Entry, Step};
    for (name, manifest) in [
        ("a.yaml", true),
        ("b.yml", true),
        ("c.json", true),
        ("README.md", false),
        ("a.yaml.bak", false),
        ("yaml", false),
    ] {
        assert_eq!(is_manifest(name), manifest, "{name}");
    }
    let entry = |name: &str, is_dir: bool| Entry {
        name: name.to_string(),
        is_dir,
    };
    let entries = [
        entry("z.yaml", false),
        entry("sub", true),
        entry("B.yml", false),
        entry("a.json", false),
        entry("notes.txt", false),
        entry("m.yaml", true),
    ];
    let read = |name: &str| Step::Read(name.to_string());
    let descend = |name: &str| Step::Descend(name.to_string());
    assert_eq!(plan(&entries, false), [read("B.yml"), read("a.json"), read("z.yaml")]);
    assert_eq!(
        plan(&entries, true),
        [read("B.yml"), read("a.json"), descend("m.yaml"), descend("sub"), read("z.yaml")]
    );
    assert!(plan(&[entry("notes.txt", false)], true).is_empty());
}
