//! The soak run: the real `karpenter-rs run` binary on the local cluster for `SOAK_MINUTES`
//! (default 30) with a Deployment scaled to another size every minute, consolidation on, and the
//! fault proxy (tests/support/fault_proxy.rs) in front of moto throttling 10% of CreateFleet
//! calls and failing 5% of DescribeInstances and 10% of TerminateInstances calls. Every 10 s it
//! samples the process's resident memory, open file descriptors and threads (from /proc) and the
//! number of series on its /metrics. After a warm-up (the first fifth), the second half's peaks
//! may not exceed the first half's by more than 10% (a few descriptors, threads or series of
//! slack besides): no growth trend. That is judged on runs of at least two workload cycles (16
//! minutes), so that both halves see the same sizes. At the end the workload goes to zero and every node must
//! go, with no instance left without a Node and no Node stuck with its finalizer.
//!
//! Not part of `cargo test`'s default run (ignored): `tests/benches/soak.sh` runs it, writing
//! tests/benches/results/soak.md; `tests/run.sh` runs it for 2 minutes so that it cannot rot.

mod support;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_rs::cloudprovider::aws::AwsCloudProvider;
use karpenter_rs::cloudprovider::{instance_id_from_provider_id, CloudProvider};
use serde_json::json;
use support::fault_proxy::{Fault, FaultProxy, Rule};
use support::process::{http_get, wait_started, Running};
use support::{cluster, items, kubectl, kubectl_ok, unique, AdmissionWebhook, FirstWriteUp};

/// Replicas, one size a minute, round and round.
const SIZES: [u32; 8] = [8, 20, 4, 30, 0, 12, 25, 2];
const SAMPLE_EVERY: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    seconds: u64,
    rss_kib: u64,
    fds: u64,
    tasks: u64,
    series: u64,
    nodes: u64,
    running: u64,
}

fn proc_status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn count_dir(path: String) -> u64 {
    std::fs::read_dir(path).map(|d| d.count() as u64).unwrap_or(0)
}

/// One measured quantity over the run after the warm-up: peaks of the first and second half.
#[derive(Debug)]
struct Trend {
    name: &'static str,
    unit: &'static str,
    min: u64,
    max: u64,
    first_peak: u64,
    second_peak: u64,
    slack: u64,
}

impl Trend {
    fn of(name: &'static str, unit: &'static str, slack: u64, values: &[u64]) -> Trend {
        let half = values.len() / 2;
        let peak = |v: &[u64]| v.iter().copied().max().unwrap_or(0);
        Trend {
            name,
            unit,
            min: values.iter().copied().min().unwrap_or(0),
            max: peak(values),
            first_peak: peak(&values[..half]),
            second_peak: peak(&values[half..]),
            slack,
        }
    }

    /// Flat: the second half's peak within 10% (and `slack`) of the first half's.
    fn flat(&self) -> bool {
        self.second_peak <= self.first_peak + self.first_peak / 10 + self.slack
    }
}

#[test]
#[ignore = "a long run; tests/benches/soak.sh runs it"]
fn soak_memory_descriptors_threads_and_series_stay_flat_and_nothing_leaks() {
    let minutes: u64 = std::env::var("SOAK_MINUTES").ok().and_then(|v| v.parse().ok()).unwrap_or(30);
    let out = std::env::var("SOAK_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| support::repo_root().join("tests/benches/results/soak.md"));
    let cluster = cluster();
    let _webhook = AdmissionWebhook::start(cluster);
    let proxy = FaultProxy::start(&cluster.env["AWS_ENDPOINT_URL"]);
    for rule in [
        Rule::new("CreateFleet", Fault::Throttle).fraction(0.1),
        Rule::new("DescribeInstances", Fault::Status(500)).fraction(0.05),
        Rule::new("TerminateInstances", Fault::Status(503)).fraction(0.1),
    ] {
        proxy.add(rule);
    }

    let work = tempfile::tempdir().unwrap();
    let certs = work.path().join("certs");
    support::process::make_certs(env!("CARGO_BIN_EXE_karpenter-rs"), &certs);
    let logs = support::repo_root().join("target/soak");
    std::fs::create_dir_all(&logs).unwrap();
    let log = logs.join("karpenter-rs.log");
    let log_file = std::fs::File::create(&log).unwrap();
    let mut binary = Running(
        Command::new(env!("CARGO_BIN_EXE_karpenter-rs"))
            .arg("run")
            .args(["--cluster-name", support::CLUSTER_NAME, "--bind-address", "127.0.0.1"])
            .args(["--webhook-port", "0", "--metrics-port", "0", "--health-probe-port", "0"])
            .args(["--cert-dir", certs.to_str().unwrap()])
            .args(["--default-instance-profile", "KarpenterNodeInstanceProfile"])
            .args(["--leader-elect", "false"])
            .envs(&cluster.env)
            .env("AWS_ENDPOINT_URL", proxy.url())
            .env("LOG_LEVEL", "info")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .expect("starting karpenter-rs"),
    );
    let addresses = wait_started(&mut binary, &log, Duration::from_secs(60));
    let pid = binary.id();

    let FirstWriteUp {
        template_name: template,
        provisioner_name: provisioner,
        namespace,
        template: t,
        provisioner: mut p,
        deployment: mut d,
        ..
    } = FirstWriteUp::named(&unique("soak"));
    let spec = p["spec"].as_object_mut().unwrap();
    spec.remove("ttlSecondsAfterEmpty");
    spec.insert("consolidation".into(), json!({"enabled": true}));
    d["spec"]["replicas"] = json!(0);
    d["spec"]["template"]["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "250m", "memory": "256Mi"}});
    kubectl_ok(cluster, &["create", "namespace", &namespace], None);
    kubectl_ok(cluster, &["apply", "-f", "-"], Some(&t.to_string()));
    kubectl_ok(cluster, &["apply", "-f", "-"], Some(&p.to_string()));
    kubectl_ok(cluster, &["apply", "-f", "-"], Some(&d.to_string()));
    let selector = format!("karpenter.sh/provisioner-name={provisioner}");
    let nodes = || -> Vec<Node> { items(&kubectl_ok(cluster, &["get", "nodes", "-l", &selector, "-o", "json"], None)) };
    let scale = |n: u32| {
        kubectl_ok(
            cluster,
            &[
                "scale",
                "deployment",
                "nginx-karpenter",
                "-n",
                &namespace,
                &format!("--replicas={n}"),
            ],
            None,
        );
    };

    let started = Instant::now();
    let run_for = Duration::from_secs(minutes * 60);
    let mut samples: Vec<Sample> = Vec::new();
    let mut minute = u64::MAX;
    while started.elapsed() < run_for {
        let tick = Instant::now();
        let now = started.elapsed().as_secs();
        if now / 60 != minute {
            minute = now / 60;
            scale(SIZES[(minute as usize) % SIZES.len()]);
        }
        assert!(binary.try_wait().unwrap().is_none(), "karpenter-rs exited; log {}", log.display());
        let series = http_get(addresses.metrics, "/metrics")
            .map(|(_, response)| {
                let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
                body.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).count() as u64
            })
            .unwrap_or(0);
        let pods: Vec<Pod> = items(&kubectl_ok(cluster, &["get", "pods", "-n", &namespace, "-o", "json"], None));
        samples.push(Sample {
            seconds: now,
            rss_kib: proc_status_kib(pid, "VmRSS:"),
            fds: count_dir(format!("/proc/{pid}/fd")),
            tasks: count_dir(format!("/proc/{pid}/task")),
            series,
            nodes: nodes().len() as u64,
            running: pods
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count() as u64,
        });
        std::thread::sleep(SAMPLE_EVERY.saturating_sub(tick.elapsed()));
    }

    // The end: nothing left running, nothing left behind.
    scale(0);
    let drained = wait_for_nodes_gone(&nodes);
    proxy.clear("CreateFleet");
    proxy.clear("DescribeInstances");
    proxy.clear("TerminateInstances");
    let moto = tokio::runtime::Runtime::new().unwrap();
    let cloud = moto.block_on(AwsCloudProvider::new(support::cloud_config(cluster))).unwrap();
    let left = nodes();
    let named: BTreeSet<String> = left
        .iter()
        .filter_map(|n| instance_id_from_provider_id(n.spec.as_ref()?.provider_id.as_deref()?).map(str::to_string))
        .collect();
    let leaked = moto
        .block_on(cloud.list())
        .unwrap()
        .into_iter()
        .filter(|i| i.tags.get("karpenter.sh/provisioner-name") == Some(&provisioner))
        .filter(|i| i.state == "pending" || i.state == "running")
        .filter(|i| !named.contains(&i.id))
        .count();
    let stuck = left.iter().filter(|n| n.metadata.deletion_timestamp.is_some()).count();
    let faulted: usize = ["CreateFleet", "DescribeInstances", "TerminateInstances"]
        .iter()
        .map(|a| proxy.calls(a).iter().filter(|c| c.fault.is_some()).count())
        .sum();
    let calls: usize = ["CreateFleet", "DescribeInstances", "TerminateInstances"]
        .iter()
        .map(|a| proxy.calls(a).len())
        .sum();
    drop(binary);
    kubectl(cluster, &["delete", "namespace", &namespace, "--wait=false"], None);
    kubectl(cluster, &["delete", "provisioner", &provisioner, "--wait=false"], None);
    kubectl(cluster, &["delete", "awsnodetemplate", &template, "--wait=false"], None);

    let warm = (samples.len() / 5).max(1).min(samples.len().saturating_sub(2));
    let measured = &samples[warm..];
    let column = |f: fn(&Sample) -> u64| measured.iter().map(f).collect::<Vec<_>>();
    let trends = [
        Trend::of("resident memory", "MiB", 4 * 1024, &column(|s| s.rss_kib)),
        Trend::of("open file descriptors", "", 8, &column(|s| s.fds)),
        Trend::of("threads", "", 2, &column(|s| s.tasks)),
        Trend::of("metric series", "", 50, &column(|s| s.series)),
    ];
    let flat = trends.iter().all(Trend::flat);
    let judged = minutes >= 2 * SIZES.len() as u64;
    let report = report(minutes, &samples, warm, &trends, leaked, stuck, drained, faulted, calls);
    std::fs::write(&out, &report).unwrap();
    println!("{report}");
    // Both halves must hold whole cycles of the workload to be compared.
    if judged {
        assert!(flat, "growth after warm-up: {trends:?}");
    } else {
        println!("{minutes} minutes is shorter than two workload cycles: the trend is reported, not judged");
    }
    assert_eq!((leaked, stuck), (0, 0), "leaked instances and stuck nodes; log {}", log.display());
    assert!(drained.is_some(), "every node gone after the workload went; log {}", log.display());
}

/// Waits (at most 5 minutes) until no node of the run is left; how long it took.
fn wait_for_nodes_gone(nodes: &dyn Fn() -> Vec<Node>) -> Option<Duration> {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(300);
    while Instant::now() < deadline {
        if nodes().is_empty() {
            return Some(started.elapsed());
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    None
}

#[allow(clippy::too_many_arguments)]
fn report(
    minutes: u64,
    samples: &[Sample],
    warm: usize,
    trends: &[Trend],
    leaked: usize,
    stuck: usize,
    drained: Option<Duration>,
    faulted: usize,
    calls: usize,
) -> String {
    let mut r = String::new();
    let _ = writeln!(r, "# Soak run\n");
    let _ = writeln!(
        r,
        "`tests/benches/soak.sh` (the ignored test `tests/soak.rs`): the `karpenter-rs run` binary (debug build) on the local cluster for {minutes} minutes, a Deployment of 250m/256Mi pods scaled every minute through {SIZES:?}, consolidation on, the fault proxy in front of moto throttling 10% of CreateFleet and failing 5% of DescribeInstances and 10% of TerminateInstances calls ({faulted} of {calls} such calls failed). Sampled every {}s; the first {warm} samples are the warm-up.\n",
        SAMPLE_EVERY.as_secs()
    );
    let _ = writeln!(r, "| quantity | min | max | first half's peak | second half's peak | flat |");
    let _ = writeln!(r, "|---|---|---|---|---|---|");
    for t in trends {
        let show = |v: u64| {
            if t.unit == "MiB" {
                format!("{:.1} MiB", v as f64 / 1024.0)
            } else {
                v.to_string()
            }
        };
        let _ = writeln!(
            r,
            "| {} | {} | {} | {} | {} | {} |",
            t.name,
            show(t.min),
            show(t.max),
            show(t.first_peak),
            show(t.second_peak),
            if t.flat() { "yes" } else { "**no**" }
        );
    }
    let _ = writeln!(
        r,
        "\nAt the end: leaked instances {leaked}, nodes stuck with their finalizer {stuck}, every node gone {}.\n",
        drained.map_or("**no, not within 5 minutes**".to_string(), |d| format!(
            "{}s after the workload went to zero",
            d.as_secs()
        ))
    );
    let _ = writeln!(r, "Samples, one a minute:\n");
    let _ = writeln!(r, "| s | RSS MiB | fds | threads | series | nodes | pods Running |");
    let _ = writeln!(r, "|---|---|---|---|---|---|---|");
    let step = (60 / SAMPLE_EVERY.as_secs()).max(1) as usize;
    for s in samples.iter().step_by(step) {
        let _ = writeln!(
            r,
            "| {} | {:.1} | {} | {} | {} | {} | {} |",
            s.seconds,
            s.rss_kib as f64 / 1024.0,
            s.fds,
            s.tasks,
            s.series,
            s.nodes,
            s.running
        );
    }
    r
}
