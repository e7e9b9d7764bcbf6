use std::collections::BTreeMap;

use super::*;
use crate::settings::GlobalSettings;

#[test]
fn karpenters_env_names_are_aliases_that_ours_override() {
    let run = |env: &[(&str, &str)], args: &[&str]| {
        let mut argv = vec!["karpenter-rs", "run", "--cluster-name", "c"];
        argv.extend_from_slice(args);
        let Command::Run(mut run) = parse_cli(argv).unwrap().command else {
            panic!("run subcommand");
        };
        run.apply_env_aliases(|name| env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string()));
        run
    };
    let r = run(&[("INTERRUPTION_QUEUE", "q"), ("KARPENTER_SERVICE", "karpenter")], &[]);
    assert_eq!(
        (r.interruption_queue_name.as_str(), r.webhook_service_name.as_str()),
        ("q", "karpenter")
    );
    assert!(
        r.explicit.contains("interruption_queue_name"),
        "over the settings ConfigMap, as a variable is"
    );
    let ours = run(&[("INTERRUPTION_QUEUE", "q")], &["--interruption-queue-name", "ours"]);
    assert_eq!(ours.interruption_queue_name, "ours");
    assert_eq!(run(&[("INTERRUPTION_QUEUE", "")], &[]).interruption_queue_name, "");
}

#[test]
fn parses_durations_and_ttl_defaults() {
    assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
    assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
    assert_eq!(parse_duration("365d"), Ok(Duration::from_secs(365 * 86400)));
    assert!(parse_duration("10").is_err());
    assert!(parse_duration("s").is_err());
    assert_eq!(parse_ttl_default("none"), Ok(TtlDefault(None)));
    assert_eq!(parse_ttl_default("0"), Ok(TtlDefault(Some(0))));
    assert!(parse_ttl_default("-1").unwrap_err().contains("\"-1\""));
    assert_eq!(parse_ttl_default("3153600000"), Ok(TtlDefault(Some(3_153_600_000))));
    let e = parse_ttl_default("9000000000000").unwrap_err();
    assert!(e.contains("\"9000000000000\"") && e.contains("3153600000"), "{e}");
}

#[test]
fn a_zero_interval_timeout_or_ttl_is_refused_naming_the_flag() {
    for flag in [
        "--deprovisioning-interval",
        "--gc-interval",
        "--cert-reload-interval",
        "--registration-ttl",
        "--replacement-timeout",
        "--gc-grace-period",
        "--webhook-client-timeout",
        "--webhook-idle-timeout",
        "--cert-validity",
    ] {
        for zero in ["0", "0s", "0ms"] {
            let err = Cli::try_parse_from(["karpenter-rs", "run", "--cluster-name", "c", flag, zero])
                .unwrap_err()
                .to_string();
            assert!(err.contains(flag) && err.contains("must be more than 0"), "{flag} {zero}: {err}");
        }
    }
    assert_eq!(parse_interval("1s"), Ok(Duration::from_secs(1)));
}

#[test]
fn parses_go_compound_durations() {
    assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
    assert_eq!(parse_duration("1h2m3.5s"), Ok(Duration::from_millis(3_723_500)));
    assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
    assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
    assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
    assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
    assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    assert_eq!(parse_duration("300us"), Ok(Duration::from_micros(300)));
    assert_eq!(parse_duration("1d12h"), Ok(Duration::from_secs(36 * 3600)));
    for bad in ["", "1m30", "-5s", "1x", "1..5s", ".s", "m30s", "10 s", "+"] {
        let e = parse_duration(bad).expect_err(bad);
        assert!(e.contains(&format!("{bad:?}")), "{e}");
    }
}

#[test]
fn a_bad_duration_names_the_flag_and_the_value() {
    let err = Cli::try_parse_from(["karpenter-rs", "run", "--cluster-name", "c", "--batch-max-duration", "1m30"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("--batch-max-duration") && err.contains("1m30"), "{err}");
    let Command::Run(args) = Cli::try_parse_from(["karpenter-rs", "run", "--cluster-name", "c", "--batch-max-duration", "1m30s"])
        .unwrap()
        .command
    else {
        panic!("run subcommand");
    };
    assert_eq!(args.batch_max_duration, Duration::from_secs(90));
}

fn run_args(args: &[&str]) -> RunArgs {
    let mut argv = vec!["karpenter-rs", "run", "--cluster-name", "c"];
    argv.extend_from_slice(args);
    match parse_cli(argv).unwrap().command {
        Command::Run(args) => args,
        other => panic!("run subcommand, got {other:?}"),
    }
}

#[test]
fn the_settings_configmap_fills_only_what_no_flag_gave() {
    let configmap = GlobalSettings {
        cluster_name: Some("other".into()),
        cluster_endpoint: Some("https://from-configmap.example.com".into()),
        default_instance_profile: Some("FromConfigMap".into()),
        tags: Some(BTreeMap::from([("team".into(), "a".into())])),
        vm_memory_overhead_percent: Some(0.1),
        enable_eni_limited_pod_density: Some(false),
        reserved_enis: Some(1),
        interruption_queue_name: Some("from-configmap".into()),
        enable_pod_eni: Some(true),
        batch_max_duration: Some(Duration::from_secs(90)),
        batch_idle_duration: Some(Duration::from_secs(3)),
        cluster_ca_bundle: Some("Q0E=".into()),
        drift_enabled: Some(false),
    };
    // Nothing explicit: every value comes from the ConfigMap.
    let mut args = run_args(&[]);
    let notes = args.apply_settings(&configmap);
    assert_eq!(args.cluster_endpoint, "https://from-configmap.example.com");
    assert_eq!(args.default_instance_profile.as_deref(), Some("FromConfigMap"));
    assert_eq!(args.tags, BTreeMap::from([("team".to_string(), "a".to_string())]));
    let node = args.node_settings();
    assert_eq!(
        (node.vm_memory_overhead_percent, node.eni_limited_pod_density, node.reserved_enis),
        (0.1, false, 1)
    );
    assert_eq!(args.provisioning().windows.max, Duration::from_secs(90));
    assert_eq!(args.provisioning().windows.idle, Duration::from_secs(3));
    assert_eq!(args.cloud().tags["team"], "a");
    assert_eq!(args.interruption().queue_name, "from-configmap");
    assert_eq!(args.cloud().cluster_ca_bundle.as_deref(), Some("Q0E="), "aws.clusterCABundle");
    // --cluster-name is required and wins; the difference is reported.
    assert_eq!(args.cluster_name, "c");
    assert!(notes[0].contains("aws.clusterName") && notes[0].contains("\"other\""), "{notes:?}");
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(node.enable_pod_eni, "aws.enablePodENI is used");
    assert!(!args.deprovisioning().drift_enabled, "featureGates.driftEnabled is used");

    // Explicit flags win, even when they repeat the default; an empty endpoint does not.
    let mut args = run_args(&[
        "--cluster-endpoint=",
        "--batch-max-duration",
        "10s",
        "--vm-memory-overhead-percent",
        "0.05",
        "--tags",
        r#"{"team":"b"}"#,
        "--interruption-queue-name",
        "",
        "--drift-enabled=true",
    ]);
    args.apply_settings(&configmap);
    assert!(args.deprovisioning().drift_enabled, "--drift-enabled wins over the ConfigMap");
    assert_eq!(args.interruption().queue_name, "", "an explicit empty name turns it off");
    assert_eq!(args.batch_max_duration, Duration::from_secs(10));
    assert_eq!(args.batch_idle_duration, Duration::from_secs(3), "not given: the ConfigMap's");
    assert_eq!(args.vm_memory_overhead_percent, 0.05);
    assert_eq!(args.tags["team"], "b");
    assert_eq!(args.cluster_endpoint, "https://from-configmap.example.com");

    // No ConfigMap: the defaults.
    let mut args = run_args(&[]);
    assert!(args.apply_settings(&GlobalSettings::default()).is_empty());
    let node = args.node_settings();
    assert_eq!(
        (node.vm_memory_overhead_percent, node.eni_limited_pod_density, node.reserved_enis),
        (0.075, true, 0)
    );
    assert_eq!(args.batch_max_duration, Duration::from_secs(10));
    assert!(args.tags.is_empty());
    assert!(args.deprovisioning().drift_enabled, "drift is on by default");
}

#[test]
fn restricted_tags_and_bad_settings_flags_are_refused_naming_the_flag() {
    let parse = |flag: &str, value: &str| {
        parse_cli(["karpenter-rs", "run", "--cluster-name", "c", &format!("{flag}={value}")])
            .unwrap_err()
            .to_string()
    };
    let err = parse("--tags", r#"{"kubernetes.io/cluster/c":"owned"}"#);
    assert!(err.contains("--tags") && err.contains("kubernetes.io/cluster/c"), "{err}");
    let err = parse("--vm-memory-overhead-percent", "7.5");
    assert!(err.contains("--vm-memory-overhead-percent") && err.contains("7.5"), "{err}");
    let err = parse("--reserved-enis", "-1");
    assert!(err.contains("--reserved-enis") && err.contains("-1"), "{err}");
    let err = parse("--batch-idle-duration", "0s");
    assert!(err.contains("--batch-idle-duration") && err.contains("0s"), "{err}");
}

#[test]
fn every_flag_reads_an_env_var() {
    use clap::CommandFactory;
    let cmd = Cli::command();
    for sub in cmd.get_subcommands() {
        for arg in sub.get_arguments() {
            if arg.get_id() == "help" || arg.get_id() == "version" {
                continue;
            }
            assert!(arg.get_env().is_some(), "{} --{} has no env var", sub.get_name(), arg.get_id());
        }
    }
}

#[test]
fn self_managed_certificate_flags_default_to_the_shipped_names() {
    let Command::Webhook(args) = Cli::try_parse_from(["karpenter-rs", "webhook", "--cluster-name", "c"])
        .unwrap()
        .command
    else {
        panic!("webhook subcommand");
    };
    let certs = args.self_managed_certs().unwrap();
    assert_eq!(certs.secret, "karpenter-rs-cert");
    assert_eq!(certs.namespace, "karpenter");
    assert_eq!(certs.service, "karpenter-rs");
    assert_eq!(certs.mutating_configuration, "karpenter-rs-defaulting");
    assert_eq!(certs.validating_configuration, "karpenter-rs-validation");
    assert_eq!(certs.validity, Duration::from_secs(7 * 86400));
    assert_eq!(certs.renew_before, Duration::from_secs(86400));
    assert!(certs.extra_names.is_empty());
    let Command::Run(args) = Cli::try_parse_from([
        "karpenter-rs",
        "run",
        "--cluster-name",
        "c",
        "--cert-extra-san",
        "127.0.0.1,webhook.example.com",
        "--cert-validity",
        "1h",
        "--cert-renew-before",
        "2h",
    ])
    .unwrap()
    .command
    else {
        panic!("run subcommand");
    };
    assert_eq!(args.cert_extra_san, ["127.0.0.1", "webhook.example.com"]);
    assert!(args.self_managed_certs().unwrap_err().contains("--cert-validity"));
}

#[test]
fn cluster_name_is_required() {
    let err = Cli::try_parse_from(["karpenter-rs", "run"]).unwrap_err().to_string();
    assert!(err.contains("--cluster-name"), "{err}");
}

fn try_run_args(extra: &[&str]) -> Result<RunArgs, clap::Error> {
    let mut argv = vec!["karpenter-rs", "run", "--cluster-name", "c"];
    argv.extend_from_slice(extra);
    match Cli::try_parse_from(argv)?.command {
        Command::Run(args) => Ok(args),
        other => panic!("run subcommand, got {other:?}"),
    }
}

#[test]
fn kubernetes_version_is_read_from_the_api_server_unless_given() {
    let args = try_run_args(&[]).unwrap();
    assert_eq!(args.provisioning().kubernetes_version, None);
    let args = try_run_args(&["--kubernetes-version", "1.32"]).unwrap();
    assert_eq!(
        args.provisioning().kubernetes_version,
        Some(KubernetesVersion { major: 1, minor: 32 })
    );
    assert_eq!(parse_version_override(""), Ok(VersionOverride(None)), "an empty KUBERNETES_VERSION");
    let err = try_run_args(&["--kubernetes-version", "latest"]).unwrap_err().to_string();
    assert!(err.contains("\"latest\"") && err.contains("--kubernetes-version"), "{err}");
}

#[test]
fn cluster_ca_bundle_and_cidr_reach_the_cloud_settings() {
    use base64::Engine;
    let bundle = base64::engine::general_purpose::STANDARD.encode("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n");
    let args = try_run_args(&["--cluster-ca-bundle", &bundle, "--cluster-cidr", "10.100.0.0/16"]).unwrap();
    let cloud = args.cloud();
    assert_eq!(cloud.cluster_ca_bundle.as_deref(), Some(bundle.as_str()));
    assert_eq!(cloud.cluster_cidr.as_deref(), Some("10.100.0.0/16"));
    let cloud = try_run_args(&[]).unwrap().cloud();
    assert_eq!((cloud.cluster_ca_bundle, cloud.cluster_cidr), (None, None));
    let err = try_run_args(&["--cluster-ca-bundle", "not base64!"]).unwrap_err().to_string();
    assert!(err.contains("--cluster-ca-bundle") && err.contains("\"not base64!\""), "{err}");
    let not_pem = base64::engine::general_purpose::STANDARD.encode("hello");
    assert!(try_run_args(&["--cluster-ca-bundle", &not_pem]).is_err());
    for bad in ["10.100.0.0", "10.100.0.0/33", "fd00::/108", "ten/8"] {
        let err = try_run_args(&["--cluster-cidr", bad]).unwrap_err().to_string();
        assert!(err.contains(&format!("{bad:?}")), "{err}");
    }
}

/// A view of `explain`'s own resolves `run`'s settings as `run` does: the ConfigMap's values
/// under the explicit flags, in the cloud, provisioning and deprovisioning settings it builds.
#[test]
fn explains_own_view_takes_the_settings_configmap_under_the_explicit_flags() {
    use crate::explain::cli::RunSettings;
    let configmap = GlobalSettings {
        cluster_ca_bundle: Some("Q0E=".into()),
        vm_memory_overhead_percent: Some(0.1),
        drift_enabled: Some(false),
        ..Default::default()
    };
    let args = run_args(&["--system-namespace", "kube-system", "--drift-enabled=true"]);
    assert_eq!(args.system_namespace(), "kube-system");
    let settings = args.resolve(&configmap);
    assert_eq!(settings.cloud.cluster_ca_bundle.as_deref(), Some("Q0E="));
    assert_eq!(settings.provisioning.node_settings.vm_memory_overhead_percent, 0.1);
    assert!(settings.deprovisioning.drift_enabled, "the explicit flag wins");
    let nothing = args.resolve(&GlobalSettings::default());
    assert_eq!(nothing.cloud.cluster_ca_bundle, None);
    assert_eq!(nothing.provisioning.node_settings.vm_memory_overhead_percent, 0.075);
}
