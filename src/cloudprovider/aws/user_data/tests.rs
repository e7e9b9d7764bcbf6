use super::*;

fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
    Taint {
        key: key.into(),
        value: value.map(str::to_string),
        effect: effect.into(),
        ..Default::default()
    }
}

fn first_write_up_labels() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("nodeType".to_string(), "service-2023".to_string()),
        ("karpenter.sh/provisioner-name".to_string(), "service".to_string()),
        ("karpenter.sh/capacity-type".to_string(), "on-demand".to_string()),
    ])
}

#[test]
fn the_kubelet_gets_no_label_of_the_instance_the_fleet_picks() {
    // What the first write-up's launch plans: zones 2a and 2c, t3.large or t3.xlarge.
    let planned = BTreeMap::from([
        ("nodeType".to_string(), "service-2023".to_string()),
        ("team".to_string(), "a".to_string()),
        ("topology.kubernetes.io/zone".to_string(), "ap-northeast-2a".to_string()),
        ("node.kubernetes.io/instance-type".to_string(), "t3.large".to_string()),
        ("kubernetes.io/arch".to_string(), "amd64".to_string()),
        ("karpenter.k8s.aws/instance-size".to_string(), "large".to_string()),
        ("karpenter.sh/capacity-type".to_string(), "spot".to_string()),
    ]);
    let labels = kubelet_labels(&planned, "service", "on-demand");
    assert_eq!(
        labels,
        first_write_up_labels()
            .into_iter()
            .chain([("team".to_string(), "a".to_string())])
            .collect()
    );
}

#[test]
fn renders_the_eks_bootstrap_for_the_first_write_up() {
    let labels = first_write_up_labels();
    let taints = [
        taint("service", Some("true"), "NoSchedule"),
        taint("node.cilium.io/agent-not-ready", None, "NoExecute"),
    ];
    let kubelet = KubeletConfiguration {
        max_pods: Some(35),
        ..Default::default()
    };
    let b = Bootstrap {
        cluster_name: "ssungz-cluster",
        cluster_endpoint: "https://127.0.0.1:6443",
        ca_bundle: Some("Q0E="),
        cluster_cidr: None,
        cluster_dns: None,
        labels: &labels,
        taints: &taints,
        kubelet: &kubelet,
        custom_user_data: None,
    };
    let expected = "MIME-Version: 1.0\n\
Content-Type: multipart/mixed; boundary=\"//\"\n\
\n\
--//\n\
Content-Type: text/x-shellscript; charset=\"us-ascii\"\n\
\n\
#!/bin/bash -xe\n\
exec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1\n\
/etc/eks/bootstrap.sh 'ssungz-cluster' --apiserver-endpoint 'https://127.0.0.1:6443' --b64-cluster-ca 'Q0E=' \\\n\
--container-runtime containerd \\\n\
--use-max-pods false \\\n\
--kubelet-extra-args '--node-labels=karpenter.sh/capacity-type=on-demand,karpenter.sh/provisioner-name=service,nodeType=service-2023 --register-with-taints=service=true:NoSchedule,node.cilium.io/agent-not-ready:NoExecute --max-pods=35'\n\
--//--\n";
    assert_eq!(user_data(AmiFamily::Al2, &b).unwrap(), expected);
}

#[test]
fn puts_custom_user_data_before_the_bootstrap() {
    let labels = BTreeMap::new();
    let kubelet = KubeletConfiguration::default();
    let mut b = Bootstrap {
        cluster_name: "c",
        cluster_endpoint: "https://e",
        ca_bundle: None,
        cluster_cidr: None,
        cluster_dns: Some("10.96.0.10"),
        labels: &labels,
        taints: &[],
        kubelet: &kubelet,
        custom_user_data: Some("#!/bin/bash\r\necho custom\r\n"),
    };
    let out = eks_user_data(&b);
    let custom = out.find("echo custom").unwrap();
    let bootstrap = out.find("/etc/eks/bootstrap.sh 'c'").unwrap();
    assert!(custom < bootstrap, "{out}");
    assert!(!out.contains('\r'));
    assert!(out.contains("--dns-cluster-ip '10.96.0.10'"), "{out}");
    assert!(!out.contains("--kubelet-extra-args"), "{out}");
    assert_eq!(out.matches("--//\n").count(), 2);

    let mime = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"BOUNDARY\"\n\n--BOUNDARY\nContent-Type: text/x-shellscript\n\necho one\n--BOUNDARY\nContent-Type: text/cloud-config\n\npackages: [jq]\n--BOUNDARY--\n";
    b.custom_user_data = Some(mime);
    let out = eks_user_data(&b);
    assert_eq!(out.matches("--//\n").count(), 3, "{out}");
    assert!(
        out.contains("--//\nContent-Type: text/cloud-config\n\npackages: [jq]\n--//\n"),
        "{out}"
    );
    assert!(!out.contains("BOUNDARY"));
}

/// The parts of a generated MIME document, headers included.
fn parts_of(user_data: &str) -> Vec<String> {
    mime_parts(user_data).expect("a MIME multipart document")
}

#[test]
fn renders_an_al2023_node_config_for_the_first_write_up() {
    let labels = first_write_up_labels();
    let taints = [
        taint("service", Some("true"), "NoSchedule"),
        taint("node.cilium.io/agent-not-ready", None, "NoExecute"),
    ];
    let kubelet = KubeletConfiguration {
        max_pods: Some(35),
        container_runtime: Some("containerd".into()),
        kube_reserved: Some(BTreeMap::from([("cpu".to_string(), Quantity("200m".into()))])),
        eviction_hard: Some(BTreeMap::from([("memory.available".to_string(), "5%".to_string())])),
        ..Default::default()
    };
    let b = Bootstrap {
        cluster_name: "ssungz-cluster",
        cluster_endpoint: "https://127.0.0.1:6443",
        ca_bundle: Some("Q0E="),
        cluster_cidr: Some("10.100.0.0/16"),
        cluster_dns: Some("10.100.0.10"),
        labels: &labels,
        taints: &taints,
        kubelet: &kubelet,
        custom_user_data: None,
    };
    let out = user_data(AmiFamily::Al2023, &b).unwrap();
    assert!(
        out.starts_with("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"\n\n--//\n"),
        "{out}"
    );
    assert!(out.ends_with("\n--//--\n"), "{out}");
    let parts = parts_of(&out);
    assert_eq!(parts.len(), 1, "{out}");
    let body = parts[0]
        .strip_prefix("Content-Type: application/node.eks.aws\n\n")
        .unwrap_or_else(|| panic!("{}", parts[0]));
    let config: serde_json::Value = serde_yaml_ng::from_str(body).unwrap();
    assert_eq!(
        config,
        serde_json::json!({
            "apiVersion": "node.eks.aws/v1alpha1",
            "kind": "NodeConfig",
            "spec": {
                "cluster": {
                    "name": "ssungz-cluster",
                    "apiServerEndpoint": "https://127.0.0.1:6443",
                    "certificateAuthority": "Q0E=",
                    "cidr": "10.100.0.0/16",
                },
                "kubelet": {
                    "config": {
                        "maxPods": 35,
                        "clusterDNS": ["10.100.0.10"],
                        "kubeReserved": {"cpu": "200m"},
                        "evictionHard": {"memory.available": "5%"},
                    },
                    "flags": [
                        "--node-labels=karpenter.sh/capacity-type=on-demand,karpenter.sh/provisioner-name=service,nodeType=service-2023",
                        "--register-with-taints=service=true:NoSchedule,node.cilium.io/agent-not-ready:NoExecute",
                    ],
                },
            },
        })
    );
    assert!(!out.contains("bootstrap.sh"), "{out}");
}

#[test]
fn puts_custom_al2023_user_data_after_the_generated_node_config() {
    let labels = BTreeMap::new();
    let kubelet = KubeletConfiguration::default();
    let mut b = Bootstrap {
        cluster_name: "c",
        cluster_endpoint: "https://e",
        ca_bundle: Some("Q0E="),
        cluster_cidr: Some("10.100.0.0/16"),
        cluster_dns: None,
        labels: &labels,
        taints: &[],
        kubelet: &kubelet,
        custom_user_data: Some("apiVersion: node.eks.aws/v1alpha1\r\nkind: NodeConfig\r\nspec:\r\n  kubelet:\r\n    config:\r\n      shutdownGracePeriod: 30s\r\n"),
    };
    let out = nodeadm_user_data(&b).unwrap();
    let parts = parts_of(&out);
    assert_eq!(parts.len(), 2, "{out}");
    assert!(parts[0].contains("# karpenter-rs generated NodeConfig"), "{out}");
    assert!(!parts[0].contains("flags"), "no labels, no taints: no flags\n{out}");
    assert!(
        parts[1].starts_with("Content-Type: application/node.eks.aws\n\napiVersion"),
        "{out}"
    );
    assert!(!out.contains('\r'));
    b.custom_user_data = Some("#!/bin/bash\necho custom\n");
    let parts = parts_of(&nodeadm_user_data(&b).unwrap());
    assert!(parts[1].starts_with("Content-Type: text/x-shellscript"), "{parts:?}");
    b.ca_bundle = None;
    let err = nodeadm_user_data(&b).unwrap_err().to_string();
    assert!(err.contains("CA bundle"), "{err}");
}

#[test]
fn al2023_templates_need_the_ca_bundle_and_the_service_cidr() {
    let mut config = CloudConfig::new("c", "https://e");
    for family in [AmiFamily::Al2, AmiFamily::Bottlerocket, AmiFamily::Ubuntu, AmiFamily::Custom] {
        assert!(check_bootstrap(family, &config).is_ok(), "{family}");
    }
    let err = check_bootstrap(AmiFamily::Al2023, &config).unwrap_err().to_string();
    assert!(err.contains("--cluster-ca-bundle") && err.contains("--cluster-cidr"), "{err}");
    config.cluster_ca_bundle = Some("Q0E=".into());
    let err = check_bootstrap(AmiFamily::Al2023, &config).unwrap_err().to_string();
    assert!(!err.contains("--cluster-ca-bundle") && err.contains("--cluster-cidr"), "{err}");
    config.cluster_cidr = Some("10.100.0.0/16".into());
    assert!(check_bootstrap(AmiFamily::Al2023, &config).is_ok());
}

#[test]
fn renders_bottlerocket_settings_over_custom_toml() {
    let labels = first_write_up_labels();
    let taints = [taint("service", Some("true"), "NoSchedule")];
    let kubelet = KubeletConfiguration {
        max_pods: Some(29),
        ..Default::default()
    };
    let b = Bootstrap {
        cluster_name: "ssungz-cluster",
        cluster_endpoint: "https://e",
        ca_bundle: None,
        cluster_cidr: None,
        cluster_dns: None,
        labels: &labels,
        taints: &taints,
        kubelet: &kubelet,
        custom_user_data: Some("[settings.kubernetes]\ncluster-name = \"wrong\"\n[settings.host-containers.admin]\nenabled = true\n"),
    };
    let out: toml::Table = toml::from_str(&user_data(AmiFamily::Bottlerocket, &b).unwrap()).unwrap();
    let k8s = &out["settings"]["kubernetes"];
    assert_eq!(k8s["cluster-name"].as_str(), Some("ssungz-cluster"));
    assert_eq!(k8s["api-server"].as_str(), Some("https://e"));
    assert_eq!(k8s["max-pods"].as_integer(), Some(29));
    assert_eq!(k8s["node-labels"]["nodeType"].as_str(), Some("service-2023"));
    assert_eq!(k8s["node-taints"]["service"][0].as_str(), Some("true:NoSchedule"));
    assert_eq!(out["settings"]["host-containers"]["admin"]["enabled"].as_bool(), Some(true));
    let bad = Bootstrap {
        custom_user_data: Some("not = [toml"),
        ..b
    };
    assert_eq!(
        user_data(AmiFamily::Bottlerocket, &bad).unwrap_err().kind(),
        "invalid_configuration"
    );
}

#[test]
fn renders_kubelet_settings_as_flags() {
    let labels = BTreeMap::new();
    let kubelet = KubeletConfiguration {
        system_reserved: Some(BTreeMap::from([
            ("memory".to_string(), Quantity("100Mi".into())),
            ("cpu".to_string(), Quantity("100m".into())),
        ])),
        eviction_hard: Some(BTreeMap::from([("memory.available".to_string(), "5%".to_string())])),
        image_gc_high_threshold_percent: Some(85),
        ..Default::default()
    };
    let b = Bootstrap {
        cluster_name: "c",
        cluster_endpoint: "e",
        ca_bundle: None,
        cluster_cidr: None,
        cluster_dns: None,
        labels: &labels,
        taints: &[],
        kubelet: &kubelet,
        custom_user_data: None,
    };
    assert_eq!(
        kubelet_extra_args(&b),
        vec![
            "--system-reserved=cpu=100m,memory=100Mi",
            "--eviction-hard=memory.available<5%",
            "--image-gc-high-threshold=85"
        ]
    );
}

/// The first write-up's node in each family, with kubelet settings and a template's own user
/// data where the family merges one, against `testdata/user_data/<family>.txt`.
#[test]
fn each_family_renders_its_golden_file() {
    let labels = first_write_up_labels();
    let taints = [taint("service", Some("true"), "NoSchedule")];
    let kubelet = KubeletConfiguration {
        max_pods: Some(35),
        ..Default::default()
    };
    let custom = |family: AmiFamily| match family {
        AmiFamily::Al2 | AmiFamily::Ubuntu => Some("#!/bin/bash\necho custom\n"),
        AmiFamily::Al2023 => Some(
            "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n      shutdownGracePeriod: 30s\n",
        ),
        AmiFamily::Bottlerocket => Some("[settings.host-containers.admin]\nenabled = true\n"),
        AmiFamily::Custom => Some("#!/bin/bash\n/opt/join-cluster.sh\n"),
    };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cloudprovider/aws/testdata/user_data");
    for (family, file) in [
        (AmiFamily::Al2, "al2.txt"),
        (AmiFamily::Al2023, "al2023.txt"),
        (AmiFamily::Bottlerocket, "bottlerocket.txt"),
        (AmiFamily::Ubuntu, "ubuntu.txt"),
        (AmiFamily::Custom, "custom.txt"),
    ] {
        let b = Bootstrap {
            cluster_name: "ssungz-cluster",
            cluster_endpoint: "https://ABCDEF.gr7.ap-northeast-2.eks.amazonaws.com",
            ca_bundle: Some("Q0E="),
            cluster_cidr: Some("10.100.0.0/16"),
            cluster_dns: Some("10.100.0.10"),
            labels: &labels,
            taints: &taints,
            kubelet: &kubelet,
            custom_user_data: custom(family),
        };
        let rendered = user_data(family, &b).unwrap();
        let path = dir.join(file);
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &rendered).unwrap();
        }
        let golden = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display()));
        assert_eq!(rendered, golden, "{family:?} user data differs from {}", path.display());
    }
}
