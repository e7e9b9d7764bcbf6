//! The soak run: the real `karpenter-rs run` binary on the local cluster for `SOAK_MINUTES`
//! (default 30) carrying the scale benchmark's mixed workload (`workload()` of
//! tests/benches/scale.py, called from here so that both run the same Deployments: plain pods,
//! larger ones, zonal topology spread, hostname anti-affinity groups, zone and arch node
//! selectors) at another size every 3 minutes through `SIZES`, on the scale benchmark's
//! Provisioner with consolidation on, and the fault proxy (tests/support/fault_proxy.rs) in front
//! of moto throttling 10% of CreateFleet calls and failing 5% of DescribeInstances and 10% of
//! TerminateInstances calls.
//!
//! Every 10 s it samples the pods wanted and Running, the nodes of the Provisioner, the process's
//! resident memory, open file descriptors and threads (from /proc; the binary exposes no count of
//! its tokio tasks), the series on its /metrics, and its API requests (the API server's audit log,
//! by the binary's user agent; counted when the cluster audits every request, which soak.sh
//! arranges when it starts the cluster). After a warm-up (5 minutes; a fifth of shorter runs) it
//! fits a least-squares line to each quantity and reports its slope.
//!
//! It fails when a phase never had all its pods Running (the last one is given 2 more minutes),
//! when an instance is left without a Node or a Node stuck with its finalizer after the workload
//! went to zero, or when a quantity clearly grows: on runs measuring at least 10 minutes after
//! the warm-up, the fitted growth over that span (slope times span) may not exceed 10% of the
//! quantity's mean plus a slack (see `Trend::tolerance`); shorter runs report the slopes only.
//!
//! Not part of `cargo test`'s default run (ignored): `tests/benches/soak.sh` runs it, writing
//! tests/benches/results/soak.md; `tests/run.sh` runs it for 2 minutes (1-minute phases) so that
//! it cannot rot.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_rs::cloudprovider::aws::AwsCloudProvider;
use karpenter_rs::cloudprovider::{instance_id_from_provider_id, CloudProvider};
use serde_json::{json, Value};
use support::fault_proxy::{Fault, FaultProxy, Rule};
use support::process::{http_get, wait_started, Running};
use support::{cluster, items, kubectl, kubectl_ok, unique, AdmissionWebhook};

/// Pods of the mixed workload, one size a phase, round and round.
const SIZES: [u32; 10] = [50, 120, 20, 80, 0, 100, 30, 150, 10, 60];
const SAMPLE_EVERY: Duration = Duration::from_secs(10);
/// Runs measuring less than this after the warm-up report slopes without judging them.
const JUDGED_FROM_MINUTES: f64 = 10.0;
/// The binary's user agent, as the audit log records it.
const USER_AGENT: &str = "karpenter-rs/";

#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    seconds: u64,
    wanted: u32,
    running: u64,
    nodes: u64,
    rss_kib: u64,
    fds: u64,
    threads: u64,
    series: u64,
    /// The binary's API requests since the start, when the audit log records them.
    api_total: Option<u64>,
}

/// One phase of the run: a size and when all its pods were first Running.
#[derive(Debug)]
struct Phase {
    size: u32,
    started: u64,
    reached_after: Option<u64>,
    max_nodes: u64,
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

/// The scale benchmark's workload at every size of `SIZES`, from tests/benches/scale.py itself.
fn scale_workloads() -> BTreeMap<u32, Vec<Value>> {
    let script = "import json, sys\nsys.path.insert(0, 'tests/benches')\nimport scale\nprint(json.dumps({n: scale.workload(int(n)) for n in sys.argv[1:]}))";
    let out = Command::new("python3")
        .current_dir(support::repo_root())
        .args(["-c", script])
        .args(SIZES.iter().map(u32::to_string))
        .output()
        .expect("running python3");
    assert!(out.status.success(), "scale.py's workload(): {}", String::from_utf8_lossy(&out.stderr));
    let by_size: BTreeMap<String, Vec<Value>> = serde_json::from_slice(&out.stdout).unwrap();
    by_size.into_iter().map(|(n, objects)| (n.parse().unwrap(), objects)).collect()
}

/// The workload at `size` in `namespace`: every Deployment any size has, those this size has not
/// at 0 replicas, so that one apply scales up and down.
fn workload_at(workloads: &BTreeMap<u32, Vec<Value>>, size: u32, namespace: &str) -> Value {
    let name = |o: &Value| o["metadata"]["name"].as_str().unwrap().to_string();
    let mut all: BTreeMap<String, Value> = BTreeMap::new();
    for o in workloads.values().flatten() {
        all.entry(name(o)).or_insert_with(|| o.clone());
    }
    let replicas: BTreeMap<String, Value> = workloads[&size].iter().map(|o| (name(o), o["spec"]["replicas"].clone())).collect();
    let items: Vec<Value> = all
        .into_iter()
        .map(|(n, mut o)| {
            o["metadata"]["namespace"] = json!(namespace);
            o["spec"]["replicas"] = replicas.get(&n).cloned().unwrap_or(json!(0));
            o
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "List", "items": items})
}

/// Counts the binary's requests in the API server's audit log, read from where it was when the
/// count started. `None` when the cluster's audit policy does not record every request.
struct AuditCount {
    path: PathBuf,
    offset: u64,
    rest: Vec<u8>,
    total: u64,
    every_request: bool,
}

impl AuditCount {
    fn start(state: &Path) -> AuditCount {
        let policy = std::fs::read_to_string(state.join("audit-policy.yaml")).unwrap_or_default();
        let path = state.join("logs/audit.log");
        AuditCount {
            offset: std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0),
            path,
            rest: Vec::new(),
            total: 0,
            every_request: !policy.is_empty() && !policy.contains("level: None"),
        }
    }

    fn poll(&mut self) -> Option<u64> {
        if !self.every_request {
            return None;
        }
        let mut file = std::fs::File::open(&self.path).ok()?;
        file.seek(SeekFrom::Start(self.offset)).ok()?;
        let mut fresh = Vec::new();
        file.read_to_end(&mut fresh).ok()?;
        self.offset += fresh.len() as u64;
        self.rest.extend_from_slice(&fresh);
        let complete = self.rest.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        let lines: Vec<u8> = self.rest.drain(..complete).collect();
        for line in lines.split(|b| *b == b'\n') {
            if !line.windows(USER_AGENT.len()).any(|w| w == USER_AGENT.as_bytes()) {
                continue;
            }
            let Ok(event) = serde_json::from_slice::<Value>(line) else { continue };
            if !event["userAgent"].as_str().is_some_and(|a| a.starts_with(USER_AGENT)) {
                continue;
            }
            // One event a request: a watch when it starts, anything else when it completes.
            let stage = event["stage"].as_str().unwrap_or("");
            let watch = event["verb"] == "watch";
            if (watch && stage == "ResponseStarted") || (!watch && stage == "ResponseComplete") {
                self.total += 1;
            }
        }
        Some(self.total)
    }
}

/// One quantity after the warm-up: its least-squares line against time.
#[derive(Debug)]
struct Trend {
    name: &'static str,
    unit: &'static str,
    min: f64,
    max: f64,
    mean: f64,
    /// Per minute.
    slope: f64,
    /// Minutes the line spans.
    span: f64,
    /// Growth allowed over the span: this fraction of the mean, plus `slack`.
    fraction: f64,
    slack: f64,
}

impl Trend {
    fn of(name: &'static str, unit: &'static str, fraction: f64, slack: f64, points: &[(f64, f64)]) -> Trend {
        let n = points.len().max(1) as f64;
        let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
        let mean = points.iter().map(|p| p.1).sum::<f64>() / n;
        let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
        let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean)).sum();
        Trend {
            name,
            unit,
            min: points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min),
            max: points.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max),
            mean,
            slope: if sxx > 0.0 { sxy / sxx } else { 0.0 },
            span: points.last().map_or(0.0, |l| l.0) - points.first().map_or(0.0, |f| f.0),
            fraction,
            slack,
        }
    }

    fn tolerance(&self) -> f64 {
        self.fraction * self.mean + self.slack
    }

    /// Flat: the fitted growth over the span within the tolerance.
    fn flat(&self) -> bool {
        self.slope * self.span <= self.tolerance()
    }
}

#[test]
#[ignore = "a long run; tests/benches/soak.sh runs it"]
fn soak_mixed_workload_runs_memory_descriptors_threads_and_requests_stay_flat_and_nothing_leaks() {
    let minutes: u64 = std::env::var("SOAK_MINUTES").ok().and_then(|v| v.parse().ok()).unwrap_or(30);
    let out = std::env::var("SOAK_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| support::repo_root().join("tests/benches/results/soak.md"));
    let phase_secs: u64 = if minutes >= 15 { 180 } else { 60 };
    let warm_secs: u64 = if minutes >= 15 { 300 } else { minutes * 60 / 5 };
    let workloads = scale_workloads();
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
    let mut audit = AuditCount::start(&support::cluster_state_dir());

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

    // The scale benchmark's AWSNodeTemplate and Provisioner, named for this run, consolidation
    // instead of its empty-node TTL.
    let name = unique("soak");
    let read_yaml = |file: &str| -> Value {
        let text = std::fs::read_to_string(support::repo_root().join("tests/benches/scale").join(file)).unwrap();
        serde_yaml_ng::from_str(&text).unwrap()
    };
    let (template, provisioner, namespace) = (name.clone(), name.clone(), name.clone());
    let mut t = read_yaml("awsnodetemplate.yaml");
    t["metadata"]["name"] = json!(template);
    let mut p = read_yaml("provisioner.yaml");
    p["metadata"]["name"] = json!(provisioner);
    p["spec"]["providerRef"]["name"] = json!(template);
    let spec = p["spec"].as_object_mut().unwrap();
    spec.remove("ttlSecondsAfterEmpty");
    spec.insert("consolidation".into(), json!({"enabled": true}));
    kubectl_ok(cluster, &["create", "namespace", &namespace], None);
    kubectl_ok(cluster, &["apply", "-f", "-"], Some(&t.to_string()));
    kubectl_ok(cluster, &["apply", "-f", "-"], Some(&p.to_string()));
    let selector = format!("karpenter.sh/provisioner-name={provisioner}");
    let nodes = || -> Vec<Node> { items(&kubectl_ok(cluster, &["get", "nodes", "-l", &selector, "-o", "json"], None)) };
    let running = || -> u64 {
        let pods: Vec<Pod> = items(&kubectl_ok(cluster, &["get", "pods", "-n", &namespace, "-o", "json"], None));
        pods.iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count() as u64
    };
    let apply = |size: u32| {
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(&workload_at(&workloads, size, &namespace).to_string()));
    };

    let started = Instant::now();
    let run_for = Duration::from_secs(minutes * 60);
    let mut samples: Vec<Sample> = Vec::new();
    let mut phases: Vec<Phase> = Vec::new();
    while started.elapsed() < run_for {
        let tick = Instant::now();
        let now = started.elapsed().as_secs();
        let index = (now / phase_secs) as usize;
        if phases.len() <= index {
            let size = SIZES[index % SIZES.len()];
            apply(size);
            phases.push(Phase {
                size,
                started: now,
                reached_after: None,
                max_nodes: 0,
            });
        }
        assert!(binary.try_wait().unwrap().is_none(), "karpenter-rs exited; log {}", log.display());
        let series = http_get(addresses.metrics, "/metrics")
            .map(|(_, response)| {
                let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
                body.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).count() as u64
            })
            .unwrap_or(0);
        let phase = phases.last_mut().unwrap();
        let sample = Sample {
            seconds: now,
            wanted: phase.size,
            running: running(),
            nodes: nodes().len() as u64,
            rss_kib: proc_status_kib(pid, "VmRSS:"),
            fds: count_dir(format!("/proc/{pid}/fd")),
            threads: count_dir(format!("/proc/{pid}/task")),
            series,
            api_total: audit.poll(),
        };
        phase.max_nodes = phase.max_nodes.max(sample.nodes);
        if sample.running == u64::from(phase.size) && phase.reached_after.is_none() {
            phase.reached_after = Some(now - phase.started);
        }
        samples.push(sample);
        std::thread::sleep(SAMPLE_EVERY.saturating_sub(tick.elapsed()));
    }
    // The last phase may have begun shortly before the end: 2 more minutes for its pods.
    let last = phases.last_mut().unwrap();
    let grace = Instant::now() + Duration::from_secs(120);
    while last.reached_after.is_none() && Instant::now() < grace {
        if running() == u64::from(last.size) {
            last.reached_after = Some(started.elapsed().as_secs() - last.started);
        }
        std::thread::sleep(Duration::from_secs(2));
    }

    // The end: nothing left running, nothing left behind.
    apply(0);
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

    // Requests a minute at each sample: over the minute before it.
    let per_minute: Vec<Option<f64>> = (0..samples.len())
        .map(|i| {
            let back = i.checked_sub((60 / SAMPLE_EVERY.as_secs()) as usize)?;
            let (a, b) = (&samples[back], &samples[i]);
            Some((b.api_total? - a.api_total?) as f64 * 60.0 / (b.seconds - a.seconds).max(1) as f64)
        })
        .collect();
    let measured: Vec<usize> = (0..samples.len()).filter(|&i| samples[i].seconds >= warm_secs).collect();
    let points = |f: &dyn Fn(usize) -> Option<f64>| -> Vec<(f64, f64)> {
        measured.iter().filter_map(|&i| Some((samples[i].seconds as f64 / 60.0, f(i)?))).collect()
    };
    let mut trends = vec![
        Trend::of("resident memory", "MiB", 0.10, 8.0, &points(&|i| Some(samples[i].rss_kib as f64 / 1024.0))),
        Trend::of("open file descriptors", "", 0.10, 8.0, &points(&|i| Some(samples[i].fds as f64))),
        Trend::of("threads", "", 0.10, 4.0, &points(&|i| Some(samples[i].threads as f64))),
        Trend::of("metric series", "", 0.10, 50.0, &points(&|i| Some(samples[i].series as f64))),
    ];
    let requests = points(&|i| per_minute[i]);
    if requests.len() >= 2 {
        trends.push(Trend::of("API requests a minute", "/min", 0.25, 30.0, &requests));
    }
    let span = trends[0].span;
    let judged = span >= JUDGED_FROM_MINUTES;
    let unreached: Vec<&Phase> = phases.iter().filter(|p| p.reached_after.is_none()).collect();
    let run = Run {
        minutes,
        phase_secs,
        warm_secs,
        faulted,
        calls,
        audited: audit.every_request,
    };
    let report = report(&run, &samples, &per_minute, &phases, &trends, judged, leaked, stuck, drained);
    std::fs::write(&out, &report).unwrap();
    println!("{report}");
    assert!(unreached.is_empty(), "phases whose pods were never all Running: {unreached:?}; log {}", log.display());
    if judged {
        let growing: Vec<&Trend> = trends.iter().filter(|t| !t.flat()).collect();
        assert!(growing.is_empty(), "growth after the warm-up: {growing:?}");
    } else {
        println!("{span:.1} minutes after the warm-up is less than {JUDGED_FROM_MINUTES}: the slopes are reported, not judged");
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

/// The run's settings, for the report.
struct Run {
    minutes: u64,
    phase_secs: u64,
    warm_secs: u64,
    faulted: usize,
    calls: usize,
    audited: bool,
}

#[allow(clippy::too_many_arguments)]
fn report(
    run: &Run,
    samples: &[Sample],
    per_minute: &[Option<f64>],
    phases: &[Phase],
    trends: &[Trend],
    judged: bool,
    leaked: usize,
    stuck: usize,
    drained: Option<Duration>,
) -> String {
    let mut r = String::new();
    let _ = writeln!(r, "# Soak run\n");
    let when = std::env::var("SOAK_RUN_ON").unwrap_or_else(|_| "(not recorded: run without tests/benches/soak.sh)".into());
    let _ = writeln!(r, "Run {when}.\n");
    let _ = writeln!(
        r,
        "`tests/benches/soak.sh` (the ignored test `tests/soak.rs`): the `karpenter-rs run` binary (debug build) on the local cluster for {} minutes carrying the mixed workload of `tests/benches/scale.py` (its `workload()`: 50% plain 250m/256Mi pods, 10% 1 CPU/1Gi, 20% zonal topology spread, 10% hostname anti-affinity groups of 10, 10% zone and arch node selectors), its size changed every {} s through {SIZES:?}, on the scale benchmark's Provisioner (12 c5/m5/r5 types, three zones) with consolidation on, the fault proxy in front of moto throttling 10% of CreateFleet and failing 5% of DescribeInstances and 10% of TerminateInstances calls ({} of {} such calls failed). Sampled every {} s; the first {} minutes are the warm-up. Tasks: threads from /proc (the binary exposes no count of its tokio tasks). API requests: the API server's audit log, by the binary's user agent ({}).\n",
        run.minutes,
        run.phase_secs,
        run.faulted,
        run.calls,
        SAMPLE_EVERY.as_secs(),
        run.warm_secs as f64 / 60.0,
        if run.audited {
            "the cluster audited every request"
        } else {
            "**not measured**: this cluster's audit policy does not record every request; soak.sh starts the cluster with `LOCAL_CLUSTER_AUDIT=1` when it is not up"
        }
    );
    let _ = writeln!(r, "## Phases\n");
    let _ = writeln!(r, "| from s | pods wanted | all Running after | most nodes |");
    let _ = writeln!(r, "|---|---|---|---|");
    for p in phases {
        let _ = writeln!(
            r,
            "| {} | {} | {} | {} |",
            p.started,
            p.size,
            p.reached_after.map_or("**never**".to_string(), |s| format!("≤ {s} s")),
            p.max_nodes
        );
    }
    let _ = writeln!(r, "\n## Trend after the warm-up\n");
    let _ = writeln!(
        r,
        "Least-squares slope against time over the samples after the warm-up. Flat: the fitted growth over the span (slope × span) at most the tolerance (10% of the mean plus a slack: 8 MiB, 8 descriptors, 4 threads, 50 series; 25% plus 30 for requests a minute, which follow the workload). {}\n",
        if judged {
            format!("Judged: {:.1} minutes measured.", trends[0].span)
        } else {
            format!(
                "Not judged: {:.1} minutes measured, fewer than {JUDGED_FROM_MINUTES}.",
                trends[0].span
            )
        }
    );
    let _ = writeln!(r, "| quantity | min | max | mean | slope a minute | growth over the span | tolerance | flat |");
    let _ = writeln!(r, "|---|---|---|---|---|---|---|---|");
    for t in trends {
        let u = if t.unit.is_empty() { String::new() } else { format!(" {}", t.unit) };
        let _ = writeln!(
            r,
            "| {} | {:.1}{u} | {:.1}{u} | {:.1}{u} | {:+.3}{u} ({:+.2}% of the mean) | {:+.1}{u} | {:.1}{u} | {} |",
            t.name,
            t.min,
            t.max,
            t.mean,
            t.slope,
            if t.mean > 0.0 { 100.0 * t.slope / t.mean } else { 0.0 },
            t.slope * t.span,
            t.tolerance(),
            match (t.flat(), judged) {
                (true, _) => "yes",
                (false, true) => "**no**",
                (false, false) => "no (not judged)",
            }
        );
    }
    let _ = writeln!(
        r,
        "\nAt the end: leaked instances {leaked}, nodes stuck with their finalizer {stuck}, every node gone {}.\n",
        drained.map_or("**no, not within 5 minutes**".to_string(), |d| format!(
            "{} s after the workload went to zero",
            d.as_secs()
        ))
    );
    let _ = writeln!(r, "## Samples, one a minute\n");
    let _ = writeln!(r, "| s | pods wanted | pods Running | nodes | RSS MiB | fds | threads | API requests/min | series |");
    let _ = writeln!(r, "|---|---|---|---|---|---|---|---|---|");
    let step = (60 / SAMPLE_EVERY.as_secs()).max(1) as usize;
    for (i, s) in samples.iter().enumerate().step_by(step) {
        let _ = writeln!(
            r,
            "| {} | {} | {} | {} | {:.1} | {} | {} | {} | {} |",
            s.seconds,
            s.wanted,
            s.running,
            s.nodes,
            s.rss_kib as f64 / 1024.0,
            s.fds,
            s.threads,
            per_minute[i].map_or("–".to_string(), |v| format!("{v:.0}")),
            s.series
        );
    }
    r
}
