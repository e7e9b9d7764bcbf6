//! Crash safety end to end: the real `karpenter-rs run` binary against the local cluster and the
//! EC2 emulator is made to exit at its crash points (`KARPENTER_RS_CRASH_AT`, src/failpoint.rs:
//! right after a launch before the Node exists, during a drain, after the instance is terminated
//! before the finalizer is released), then started again. Each round must converge: no instance
//! without a Node, no Node stuck with its finalizer, and never more than the one Node the one pod
//! needs. The crash points are the only injected fault; everything else is the real binary, API
//! server and emulator.
//!
//! The first round crashes at each point once, later rounds at points chosen at random from a
//! printed seed (`KARPENTER_RS_CRASH_SEED` replays it); `KARPENTER_RS_CRASH_ROUNDS` (default 20;
//! 2 in tests/run.sh, 100 in tests/benches/crash_rounds.sh) sets how many rounds run. The counts
//! are printed and must all be 0.
//!
//! Crashes at random across operations: each round of one test picks provisioning,
//! consolidation, expiration, drift or interruption, and ends its first run at one of that
//! operation's named points or with SIGKILL at a random moment of it, from the printed seed
//! (`KARPENTER_RS_RANDOM_CRASH_ROUNDS`, default 2; 100 in tests/benches/random_crashes.sh); it
//! counts from the EC2 emulator and the API server only.
//!
//! Consolidation has crash points of its own (after cordoning, before deleting the replaced node);
//! a test here crashes at both in every round, and one turns consolidation off after a crash. So
//! has interruption handling: a message acted on and not yet deleted is delivered again.
//!
//! Also here, as it runs the same processes: two replicas with leader election never launch a
//! node twice, and when the leader is killed the other one takes over; and the control plane
//! going away under the binary (kube-apiserver, etcd, 30 s each, stopped and started again with
//! tests/cluster/restart.sh) mid-launch, mid-drain and mid-consolidation
//! (`KARPENTER_RS_OUTAGE_COMPONENTS`, default both; tests/run.sh runs kube-apiserver's); a
//! leader whose API answers turn slow writes nothing once the other replica has taken over (the
//! API server's audit log); a controller that panics, stalls or is busy for minutes holds up no
//! other; and a watched object that cannot be read gets an event and a condition.

mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_rs::cloudprovider::aws::AwsCloudProvider;
use karpenter_rs::cloudprovider::{instance_id_from_provider_id, CloudProvider};
use karpenter_rs::controllers::supervisor::deadline::OVERRIDE_ENV as LIVENESS_DEADLINE_ENV;
use karpenter_rs::failpoint::{BUSY_IN_ENV, CRASH_AT_ENV, CRASH_EXIT_CODE, PANIC_IN_ENV, STALL_IN_ENV};
use kube::ResourceExt;
use serde_json::json;
use support::{cluster, fixture, items, kubectl, kubectl_ok, unique, wait_for, AdmissionWebhook, Cluster};

/// One run of the binary; killed (SIGKILL, a crash too) when dropped.
struct Binary {
    child: Child,
    log: PathBuf,
}

impl Binary {
    /// Starts the binary with `extra` arguments (e.g. leader election settings).
    fn spawn(
        cluster: &Cluster,
        certs: &std::path::Path,
        log_dir: &std::path::Path,
        crash_at: Option<&str>,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Binary {
        static RUN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = log_dir.join(format!("run-{n:03}-{}.log", crash_at.unwrap_or("normal")));
        let out = std::fs::File::create(&log).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_karpenter-rs"));
        command
            .arg("run")
            .args(["--cluster-name", support::CLUSTER_NAME, "--bind-address", "127.0.0.1"])
            // Any free ports: the tests talk to none of them.
            .args(["--webhook-port", "0", "--metrics-port", "0", "--health-probe-port", "0"])
            .args(["--cert-dir", certs.to_str().unwrap()])
            .args(["--default-instance-profile", "KarpenterNodeInstanceProfile"])
            .args(extra)
            .args(["--batch-idle-duration", "200ms", "--batch-max-duration", "1s"])
            .args(["--deprovisioning-interval", "1s"])
            .args(["--gc-interval", "2s", "--gc-grace-period", "5s"])
            .envs(&cluster.env)
            .env_remove(CRASH_AT_ENV)
            .env_remove(PANIC_IN_ENV)
            .env_remove(STALL_IN_ENV)
            .env_remove(BUSY_IN_ENV)
            .env_remove(LIVENESS_DEADLINE_ENV)
            .env("LOG_LEVEL", "info,karpenter_rs=debug")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        if let Some(point) = crash_at {
            command.env(CRASH_AT_ENV, point);
        }
        Binary {
            child: command.spawn().expect("starting karpenter-rs"),
            log,
        }
    }

    /// Waits up to `timeout` for the binary to exit at its crash point; if the operation got by
    /// without reaching it, the run is killed when the time is up (a crash too).
    fn expect_crash_or_pass(mut self, point: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert_eq!(status.code(), Some(CRASH_EXIT_CODE), "karpenter-rs was to exit at {point}; log {}", self.log.display());
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("{point} not reached within {timeout:?}; killed instead");
    }

    /// Waits for the binary to exit at its crash point.
    fn expect_crash(mut self, point: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                assert_eq!(
                    status.code(),
                    Some(CRASH_EXIT_CODE),
                    "karpenter-rs was to exit at {point}, exited with {status}; log {}:\n{log}",
                    self.log.display()
                );
                return;
            }
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                panic!(
                    "karpenter-rs did not reach {point} within {timeout:?}; log {}:\n{log}",
                    self.log.display()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Binary {
    fn identity(&self) -> String {
        format!("karpenter-rs-{}", self.child.id())
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Polls `check` every 250 ms until it returns a value. Fails naming `what`, with this
    /// process's log and the scenario's pods, nodes and events, when the process exits or
    /// `timeout` passes.
    fn wait_for<T>(&mut self, s: &Scenario, what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = check() {
                return v;
            }
            let exited = self.child.try_wait().unwrap();
            if exited.is_some() || Instant::now() > deadline {
                let why = match exited {
                    Some(status) => format!("karpenter-rs exited ({status})"),
                    None => format!("timed out after {timeout:?}"),
                };
                panic!(
                    "{why} waiting for {what}\n{}\nlog {}:\n{}",
                    s.describe(),
                    self.log.display(),
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The first write-up's Provisioner and template under names of their own, a namespace, and a
/// one-replica Deployment (scaled to 0 at first) that only fits on its nodes.
struct Scenario {
    cluster: &'static Cluster,
    provisioner: String,
    template: String,
    namespace: String,
}

impl Scenario {
    fn create(cluster: &'static Cluster) -> Scenario {
        Self::create_with(cluster, |_| {})
    }

    /// `create`, with `edit` applied to the Provisioner first.
    fn create_with(cluster: &'static Cluster, edit: impl FnOnce(&mut serde_json::Value)) -> Scenario {
        Self::create_with_template(cluster, edit, |_| {})
    }

    /// `create_with`, with `edit_template` applied to the AWSNodeTemplate first.
    fn create_with_template(
        cluster: &'static Cluster,
        edit: impl FnOnce(&mut serde_json::Value),
        edit_template: impl FnOnce(&mut serde_json::Value),
    ) -> Scenario {
        let suffix = unique("crash");
        let s = Scenario {
            cluster,
            provisioner: format!("service-{suffix}"),
            template: format!("lt-{suffix}"),
            namespace: format!("ns-{suffix}"),
        };
        let node_type = format!("service-{suffix}");
        let mut template = fixture("first-writeup/awsnodetemplate.yaml");
        template["metadata"]["name"] = json!(s.template);
        let mut provisioner = fixture("first-writeup/provisioner.yaml");
        provisioner["metadata"]["name"] = json!(s.provisioner);
        provisioner["spec"]["providerRef"]["name"] = json!(s.template);
        provisioner["spec"]["labels"]["nodeType"] = json!(node_type);
        let spec = provisioner["spec"].as_object_mut().unwrap();
        spec.remove("ttlSecondsAfterEmpty");
        spec.remove("ttlSecondsUntilExpired");
        edit(&mut provisioner);
        edit_template(&mut template);
        let mut deployment = fixture("first-writeup/nginx-deployment.yaml");
        deployment["metadata"]["namespace"] = json!(s.namespace);
        deployment["spec"]["replicas"] = json!(0);
        deployment["spec"]["template"]["spec"]["nodeSelector"]["nodeType"] = json!(node_type);
        kubectl_ok(cluster, &["create", "namespace", &s.namespace], None);
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(&template.to_string()));
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(&provisioner.to_string()));
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(&deployment.to_string()));
        s
    }

    /// Sets the workload's CPU request.
    fn request_cpu(&self, cpu: &str) {
        let requests = format!("--requests=cpu={cpu}");
        kubectl_ok(
            self.cluster,
            &[
                "set",
                "resources",
                "deployment",
                "nginx-karpenter",
                "-n",
                &self.namespace,
                &requests,
            ],
            None,
        );
    }

    fn scale(&self, replicas: u32) {
        kubectl_ok(
            self.cluster,
            &[
                "scale",
                "deployment",
                "nginx-karpenter",
                "-n",
                &self.namespace,
                &format!("--replicas={replicas}"),
            ],
            None,
        );
    }

    /// With 1.5-CPU pods: two of them Running on one t3.xlarge, then one left (a t3.large could
    /// hold it, so the node is worth replacing). Returns the node.
    fn one_of_two_pods_left_on_their_node(&self, setup: &Setup) -> String {
        self.scale(2);
        let mut normal = setup.start(None);
        let big = normal.wait_for(self, "two pods Running on one node", Duration::from_secs(120), || {
            let nodes: std::collections::BTreeSet<String> = self
                .pods()
                .into_iter()
                .filter(|p| p.status.as_ref().and_then(|st| st.phase.as_deref()) == Some("Running"))
                .filter_map(|p| p.spec?.node_name)
                .collect();
            (nodes.len() == 1 && self.pods().len() == 2).then(|| nodes.into_iter().next().unwrap())
        });
        drop(normal);
        self.scale(1);
        wait_for("one pod left", Duration::from_secs(60), || (self.pods().len() == 1).then_some(()));
        big
    }

    /// The Node called `name`, if it exists.
    fn node(&self, name: &str) -> Option<Node> {
        self.nodes().into_iter().find(|n| n.name_any() == name)
    }

    /// Scales the workload to zero, deletes the scenario's nodes, and waits until nothing is
    /// left (no node, no instance).
    fn scale_to_zero_and_settle(&self, setup: &Setup) {
        self.scale(0);
        for node in self.nodes() {
            kubectl(self.cluster, &["delete", "node", &node.name_any(), "--wait=false"], None);
        }
        settle(|| self.tally(setup), |t| *t == Tally::default());
    }

    fn pods(&self) -> Vec<Pod> {
        items(&kubectl_ok(
            self.cluster,
            &["get", "pods", "-n", &self.namespace, "-o", "json"],
            None,
        ))
    }

    fn nodes(&self) -> Vec<Node> {
        let selector = format!("karpenter.sh/provisioner-name={}", self.provisioner);
        items(&kubectl_ok(self.cluster, &["get", "nodes", "-l", &selector, "-o", "json"], None))
    }

    /// Instances of this scenario's Provisioner that EC2 still runs.
    fn instances(&self, setup: &Setup) -> Vec<String> {
        setup
            .rt
            .block_on(setup.cloud.list())
            .expect("listing instances")
            .into_iter()
            .filter(|i| i.tags.get("karpenter.sh/provisioner-name") == Some(&self.provisioner))
            .filter(|i| i.state == "pending" || i.state == "running")
            .map(|i| i.id)
            .collect()
    }

    /// Every instance ever launched for the scenario's Provisioner, terminated ones included, as
    /// the EC2 emulator lists them.
    fn instances_ever(&self, setup: &Setup) -> std::collections::BTreeSet<String> {
        setup.rt.block_on(support::instances_ever(setup.cloud.ec2(), &self.provisioner))
    }

    /// Leaked instances (running, no Node names them), stuck Nodes (being deleted) and Nodes.
    fn tally(&self, setup: &Setup) -> Tally {
        let nodes = self.nodes();
        let named: Vec<String> = nodes
            .iter()
            .filter_map(|n| n.spec.as_ref()?.provider_id.as_deref())
            .filter_map(instance_id_from_provider_id)
            .map(str::to_string)
            .collect();
        Tally {
            leaked: self.instances(setup).iter().filter(|i| !named.contains(i)).count(),
            stuck: nodes.iter().filter(|n| n.metadata.deletion_timestamp.is_some()).count(),
            nodes: nodes.len(),
        }
    }

    /// The scenario's pods, nodes and events, for a failure's message.
    fn describe(&self) -> String {
        let selector = format!("karpenter.sh/provisioner-name={}", self.provisioner);
        let show = |args: &[&str]| {
            let out = kubectl(self.cluster, args, None);
            format!(
                "$ kubectl {}\n{}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        };
        [
            show(&["get", "pods", "-n", &self.namespace, "-o", "wide"]),
            show(&["get", "nodes", "-o", "wide"]),
            show(&["describe", "nodes", "-l", &selector]),
            show(&["get", "events", "-n", &self.namespace]),
            log_tail("kwok", 40),
        ]
        .join("\n")
    }

    /// Who holds the leader election Lease in the scenario's namespace.
    fn lease_holder(&self) -> Option<String> {
        let out = kubectl(
            self.cluster,
            &[
                "get",
                "lease",
                "karpenter-rs-leader-election",
                "-n",
                &self.namespace,
                "-o",
                "jsonpath={.spec.holderIdentity}",
            ],
            None,
        );
        Some(String::from_utf8_lossy(&out.stdout).to_string()).filter(|h| !h.is_empty())
    }

    /// After a replacement cut short and finished by a normal run: nothing leaked, no node stuck
    /// deleting, one node, not cordoned, and `launches` (counted by the caller) were two: the
    /// first node and one replacement, nothing more. Returns the node.
    fn converged_on_one_node(&self, setup: &Setup, launches: usize) -> Node {
        let settled = settle(|| self.tally(setup), |t| t.leaked == 0 && t.stuck == 0 && t.nodes == 1);
        let nodes = self.nodes();
        let cordoned = nodes
            .iter()
            .filter(|n| n.spec.as_ref().and_then(|sp| sp.unschedulable) == Some(true))
            .count();
        eprintln!("{settled:?}, cordoned {cordoned}, launches {launches}");
        assert_eq!((settled.leaked, settled.stuck, settled.nodes), (0, 0, 1), "{}", self.describe());
        assert_eq!(cordoned, 0, "no node stays cordoned: {}", self.describe());
        assert_eq!(
            launches,
            2,
            "the first node and one replacement, nothing more (logs in {})",
            setup.logs.display()
        );
        nodes.into_iter().next().expect("one node")
    }

    fn running_pod_node(&self) -> Option<String> {
        self.pods()
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .find_map(|p| p.spec?.node_name)
    }

    /// Whatever a test left: a fresh binary releases the scenario's nodes (drained, instances
    /// terminated), then the namespace, Provisioner and template go.
    fn tear_down(&self, setup: &Setup) {
        let normal = setup.start(None);
        self.scale(0);
        for node in self.nodes() {
            kubectl(self.cluster, &["delete", "node", &node.name_any(), "--wait=false"], None);
        }
        settle(|| self.tally(setup), |t| t.nodes == 0);
        drop(normal);
        for id in self.instances(setup) {
            let _ = setup.rt.block_on(setup.cloud.delete(&id));
        }
        self.clean_up();
    }

    fn clean_up(&self) {
        kubectl(self.cluster, &["delete", "namespace", &self.namespace, "--wait=false"], None);
        kubectl(self.cluster, &["delete", "provisioner", &self.provisioner, "--wait=false"], None);
        kubectl(self.cluster, &["delete", "awsnodetemplate", &self.template, "--wait=false"], None);
    }
}

/// The `pods=N` of a "launched node" log line: how many pods the launch was planned for.
fn planned_pods(line: &str) -> Option<usize> {
    line.split_whitespace().find_map(|token| token.strip_prefix("pods=")?.parse().ok())
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Tally {
    leaked: usize,
    stuck: usize,
    nodes: usize,
}

/// Polls `tally` until `settled` holds or 90 s have passed; returns the last tally either way,
/// so that what did not converge is counted.
fn settle(mut tally: impl FnMut() -> Tally, settled: impl Fn(&Tally) -> bool) -> Tally {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let t = tally();
        if settled(&t) || Instant::now() > deadline {
            return t;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// What every test here shares: the cluster with this binary's admission webhook registered,
/// certificates for the karpenter-rs processes, a log directory, and EC2. The tests run one at a
/// time (the guard): each process they start provisions for every pending pod of the cluster.
struct Setup {
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
    cluster: &'static Cluster,
    _work: tempfile::TempDir,
    certs: PathBuf,
    logs: PathBuf,
    rt: tokio::runtime::Runtime,
    cloud: AwsCloudProvider,
}

fn setup(name: &str) -> Setup {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    static WEBHOOK: std::sync::OnceLock<AdmissionWebhook> = std::sync::OnceLock::new();
    let guard = LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let cluster = cluster();
    WEBHOOK.get_or_init(|| AdmissionWebhook::start(cluster));
    let work = tempfile::tempdir().unwrap();
    let certs = work.path().join("certs");
    support::process::make_certs(env!("CARGO_BIN_EXE_karpenter-rs"), &certs);
    // Logs of every run are kept for a failure's message; under target/ so CI keeps them too,
    // apart per local cluster (the same test may run on several side by side).
    let mut logs = support::repo_root().join("target/e2e-process-logs");
    if std::env::var_os("LOCAL_CLUSTER_STATE").is_some() {
        logs = logs.join(support::cluster_state_dir().file_name().expect("a state directory has a name"));
    }
    let logs = logs.join(name);
    let _ = std::fs::remove_dir_all(&logs);
    std::fs::create_dir_all(&logs).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cloud = rt.block_on(AwsCloudProvider::new(support::cloud_config(cluster))).unwrap();
    Setup {
        _one_at_a_time: guard,
        cluster,
        _work: work,
        certs,
        logs,
        rt,
        cloud,
    }
}

impl Setup {
    /// Starts the binary alone (no leader election), to exit at `crash_at` if given.
    fn start(&self, crash_at: Option<&str>) -> Binary {
        self.start_with(crash_at, &["--leader-elect", "false"])
    }

    /// A new SQS queue for interruption messages: its name and URL.
    fn interruption_queue(&self, prefix: &str) -> (String, String) {
        let name = unique(prefix);
        let url = self
            .rt
            .block_on(self.cloud.sqs().create_queue().queue_name(&name).send())
            .unwrap()
            .queue_url
            .unwrap();
        (name, url)
    }

    fn start_with(&self, crash_at: Option<&str>, extra: &[&str]) -> Binary {
        Binary::spawn(self.cluster, &self.certs, &self.logs, crash_at, extra, &[])
    }

    /// Starts the binary alone with `env` set (e.g. a failpoint that panics a controller).
    fn start_with_env(&self, env: &[(&str, &str)]) -> Binary {
        Binary::spawn(self.cluster, &self.certs, &self.logs, None, &["--leader-elect", "false"], env)
    }

    /// Nodes launched for the scenario's Provisioner, counted from every run's log ("launched
    /// node" lines): EC2 forgets terminated instances.
    fn launched(&self, s: &Scenario) -> usize {
        let needle = format!("provisioner={}", s.provisioner);
        std::fs::read_dir(&self.logs)
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| std::fs::read_to_string(entry.path()).unwrap_or_default())
            .map(|log| log.lines().filter(|l| l.contains("launched node") && l.contains(&needle)).count())
            .sum()
    }
}

/// Puts on the queue at `url` EC2's state-change notice that `node`'s instance is shutting down.
fn send_shutting_down(setup: &Setup, url: &str, node: &Node) {
    let provider_id = node.spec.as_ref().and_then(|sp| sp.provider_id.as_deref()).expect("our nodes name their instance");
    let instance = instance_id_from_provider_id(provider_id).expect("an EC2 provider id");
    let event = support::ec2_event(
        "aws.ec2",
        "EC2 Instance State-change Notification",
        json!({"instance-id": instance, "state": "shutting-down"}),
    );
    setup
        .rt
        .block_on(setup.cloud.sqs().send_message().queue_url(url).message_body(event).send())
        .unwrap();
}

/// The rounds the environment variable `name` asks for, else `default`.
fn env_rounds(name: &str, default: u32) -> u32 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Which of the three provisioning crash points each round crashes at: every point in the first
/// round, so that each is hit in every run; in later rounds each one at random (at least one a
/// round) from `KARPENTER_RS_CRASH_SEED`, or from the clock when it is unset. The seed is printed,
/// so that a failing order can be replayed.
struct CrashPlan {
    seed: u64,
    state: u64,
}

impl CrashPlan {
    const POINTS: [&'static str; 3] = ["after-launch", "during-drain", "after-terminate"];

    fn from_env() -> CrashPlan {
        let seed = std::env::var("KARPENTER_RS_CRASH_SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        CrashPlan { seed, state: seed }
    }

    /// splitmix64: enough to spread the rounds, and the same on every machine for one seed.
    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The points round `round` (from 1) crashes at, in the order they come up.
    fn round(&mut self, round: u32) -> [bool; 3] {
        if round == 1 {
            return [true; 3];
        }
        // One of the seven non-empty subsets of the three points.
        let subset = 1 + self.next() % 7;
        [subset & 1 != 0, subset & 2 != 0, subset & 4 != 0]
    }
}

#[test]
fn crashes_at_every_point_converge_without_leaks_stuck_nodes_or_double_launches() {
    let setup = setup("crash");
    let cluster = setup.cluster;
    let rounds = env_rounds("KARPENTER_RS_CRASH_ROUNDS", 20);
    let mut plan = CrashPlan::from_env();
    println!("crash safety: KARPENTER_RS_CRASH_SEED={} ({rounds} rounds)", plan.seed);

    let s = Scenario::create(cluster);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut totals = Tally::default();
        let mut double_launches = 0;
        let mut crashes = [0u32; 3];
        for round in 1..=rounds {
            let [at_launch, at_drain, at_terminate] = plan.round(round);
            let points: Vec<&str> = CrashPlan::POINTS
                .iter()
                .zip([at_launch, at_drain, at_terminate])
                .filter_map(|(point, on)| on.then_some(*point))
                .collect();
            eprintln!("round {round}/{rounds}: crashing at {points:?}");
            // 1. A pending pod; the binary exits right after launching its instance (when the
            //    round crashes there).
            let before = s.instances_ever(&setup);
            s.scale(1);
            if at_launch {
                setup
                    .start(Some("after-launch"))
                    .expect_crash("after-launch", Duration::from_secs(90));
                crashes[0] += 1;
            }

            // 2. (Re)started, it adopts the instance launched before the crash (or launches if
            //    none was), creates its Node and binds the pod: one instance for the one need.
            let mut normal = setup.start(None);
            let node = normal.wait_for(&s, "the pod Running on a node", Duration::from_secs(90), || s.running_pod_node());
            let settled = settle(|| s.tally(&setup), |t| t.leaked == 0 && t.stuck == 0 && t.nodes == 1);
            totals.leaked += settled.leaked;
            totals.stuck += settled.stuck;
            // Counted from the emulator, terminated instances included: an instance launched
            // again after the crash and then collected would count here, not only a second Node.
            let launched = s.instances_ever(&setup).difference(&before).count();
            double_launches += launched.saturating_sub(1);
            assert!(launched >= 1, "round {round}: no instance launched for the pod");

            drop(normal);

            // 3. The node is deleted; the binary exits in the middle of draining it (when the
            //    round crashes there; otherwise the run of step 5 drains it).
            kubectl_ok(cluster, &["delete", "node", &node, "--wait=false"], None);
            if at_drain {
                setup
                    .start(Some("during-drain"))
                    .expect_crash("during-drain", Duration::from_secs(60));
                crashes[1] += 1;
            }

            // 4. No workload left to place; the next run terminates the instance and exits before
            //    releasing the finalizer (when the round crashes there).
            s.scale(0);
            wait_for("the pods to be gone", Duration::from_secs(60), || s.pods().is_empty().then_some(()));
            if at_terminate {
                setup
                    .start(Some("after-terminate"))
                    .expect_crash("after-terminate", Duration::from_secs(60));
                crashes[2] += 1;
            }

            // 5. Restarted, it releases the node; whatever was launched meanwhile is cleaned up.
            let normal = setup.start(None);
            for extra in s.nodes() {
                kubectl(cluster, &["delete", "node", &extra.name_any(), "--wait=false"], None);
            }
            let end = settle(|| s.tally(&setup), |t| *t == Tally::default());
            drop(normal);
            totals.leaked += end.leaked;
            totals.stuck += end.stuck;
            eprintln!("round {round}/{rounds}: after launch {settled:?}, at the end {end:?}");
        }
        println!(
            "crash safety: {rounds} rounds, crashes after-launch {}, during-drain {}, after-terminate {} (seed {}): leaked instances {}, stuck nodes {}, double launches {}",
            crashes[0], crashes[1], crashes[2], plan.seed, totals.leaked, totals.stuck, double_launches
        );
        assert_eq!(
            (totals.leaked, totals.stuck, double_launches),
            (0, 0, 0),
            "leaked instances, stuck nodes and double launches after the rounds (seed {}; logs in {})",
            plan.seed,
            setup.logs.display()
        );
    }));
    s.tear_down(&setup);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// The operations the random crash rounds cut short, each with its named crash points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Operation {
    Provisioning,
    Consolidation,
    Expiration,
    Drift,
    Interruption,
}

impl Operation {
    const ALL: [Operation; 5] = [
        Operation::Provisioning,
        Operation::Consolidation,
        Operation::Expiration,
        Operation::Drift,
        Operation::Interruption,
    ];

    fn named_points(self) -> &'static [&'static str] {
        match self {
            Operation::Provisioning => &["after-launch"],
            Operation::Consolidation => &["consolidation-after-cordon", "consolidation-before-delete"],
            Operation::Expiration | Operation::Drift => &["replacement-after-cordon", "replacement-before-delete"],
            Operation::Interruption => &["interruption-before-delete", "during-drain", "after-terminate"],
        }
    }

    /// From its trigger, how long the operation runs with nothing cut short (generously, on a
    /// loaded machine): a random kill falls in this window.
    fn window(self) -> Duration {
        match self {
            Operation::Provisioning => Duration::from_secs(6),
            Operation::Consolidation => Duration::from_secs(40),
            Operation::Expiration | Operation::Drift => Duration::from_secs(30),
            Operation::Interruption => Duration::from_secs(20),
        }
    }

    /// Most instances one round may launch: one for the need (a pod, or a node's replacement
    /// holding both pods); after an interruption the two pods come back one at a time (the
    /// budget lets one go at once), two needs.
    fn most_launches(self) -> usize {
        if self == Operation::Interruption {
            2
        } else {
            1
        }
    }

    /// Whether the workload keeps a pod Running throughout: two replicas and a budget of one,
    /// for the operations that replace a node holding both.
    fn keeps_a_replica(self) -> bool {
        matches!(self, Operation::Expiration | Operation::Drift | Operation::Interruption)
    }
}

/// How a round's first run ends.
#[derive(Clone, Copy, Debug)]
enum Cut {
    /// At a named crash point (`KARPENTER_RS_CRASH_AT`).
    At(&'static str),
    /// SIGKILL this long after the trigger.
    KillAfter(Duration),
}

/// Samples, in the background, the fewest Running pods of the scenario's workload.
struct ReplicaWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: std::thread::JoinHandle<usize>,
}

impl ReplicaWatch {
    fn start(cluster: &'static Cluster, namespace: String) -> ReplicaWatch {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut fewest = usize::MAX;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let out = kubectl(cluster, &["get", "pods", "-n", &namespace, "-o", "json"], None);
                if out.status.success() {
                    let pods: Vec<Pod> = items(&String::from_utf8_lossy(&out.stdout));
                    let running = pods
                        .iter()
                        .filter(|p| p.metadata.deletion_timestamp.is_none())
                        .filter(|p| p.status.as_ref().and_then(|st| st.phase.as_deref()) == Some("Running"))
                        .count();
                    fewest = fewest.min(running);
                }
                std::thread::sleep(Duration::from_millis(500));
            }
            fewest
        });
        ReplicaWatch { stop, handle }
    }

    fn fewest(self) -> usize {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.handle.join().expect("the replica watch does not panic")
    }
}

/// Crashes at random across operations: each round picks an operation (provisioning,
/// consolidation, expiration, drift, interruption) and how its first run ends (at one of the
/// operation's named crash points, or SIGKILL at a random moment of the operation) from a printed
/// seed (`KARPENTER_RS_CRASH_SEED` replays it), then lets a fresh run converge. Everything is
/// counted from the EC2 emulator and the API server, before anything is deleted: instances
/// launched in the round (terminated ones included; at most one per need), instances running
/// without a Node, Nodes cordoned with no deletion in progress, Nodes stuck deleting, and, where
/// two replicas and a budget of one should keep a pod Running throughout, the fewest Running.
/// `KARPENTER_RS_RANDOM_CRASH_ROUNDS` (default 2) sets the rounds.
#[test]
fn random_crashes_across_operations_converge_without_leaks_or_second_launches() {
    let setup = setup("random-crash");
    let cluster = setup.cluster;
    let rounds = env_rounds("KARPENTER_RS_RANDOM_CRASH_ROUNDS", 2);
    let mut plan = CrashPlan::from_env();
    println!("random crashes: KARPENTER_RS_CRASH_SEED={} ({rounds} rounds)", plan.seed);
    let (queue, url) = setup.interruption_queue("random-crash");
    let sqs = setup.cloud.sqs();
    let with_queue = ["--leader-elect", "false", "--interruption-queue-name", queue.as_str()];
    let s = Scenario::create_with(cluster, |p| {
        p["spec"]["labels"]["round"] = json!("0");
    });
    let patch = |body: serde_json::Value| {
        kubectl_ok(
            cluster,
            &["patch", "provisioner", &s.provisioner, "--type=merge", "-p", &body.to_string()],
            None,
        );
    };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        s.request_cpu("1500m");
        let mut violations: Vec<String> = Vec::new();
        let mut cuts = std::collections::BTreeMap::<String, u32>::new();
        for round in 1..=rounds {
            let op = Operation::ALL[(plan.next() % 5) as usize];
            let cut = if plan.next().is_multiple_of(2) {
                let points = op.named_points();
                Cut::At(points[(plan.next() % points.len() as u64) as usize])
            } else {
                Cut::KillAfter(Duration::from_millis(plan.next() % op.window().as_millis() as u64))
            };
            eprintln!("round {round}/{rounds}: {op:?}, {cut:?}");
            let how = if matches!(cut, Cut::At(_)) { "named point" } else { "random moment" };
            *cuts.entry(format!("{op:?} at a {how}")).or_default() += 1;

            // 1. Where the operation starts from, made by a run that is not cut short.
            let old = match op {
                Operation::Provisioning => None,
                Operation::Consolidation => Some(s.one_of_two_pods_left_on_their_node(&setup)),
                _ => {
                    s.scale(2);
                    let mut prep = setup.start_with(None, &with_queue);
                    let node = prep.wait_for(&s, "two pods Running on one node", Duration::from_secs(150), || {
                        let on: std::collections::BTreeSet<String> = running(&s).into_iter().filter_map(|p| p.spec?.node_name).collect();
                        (on.len() == 1 && running(&s).len() == 2).then(|| on.into_iter().next().unwrap())
                    });
                    drop(prep);
                    let pdb = json!({
                        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                        "metadata": {"name": "one-at-a-time", "namespace": s.namespace},
                        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "nginx-karpenter"}}}
                    });
                    kubectl_ok(cluster, &["apply", "-f", "-"], Some(&pdb.to_string()));
                    Some(node)
                }
            };
            let before = s.instances_ever(&setup);
            let watch = op.keeps_a_replica().then(|| ReplicaWatch::start(cluster, s.namespace.clone()));

            // 2. The trigger, and the run it cuts short.
            let crashing = match cut {
                Cut::At(point) => setup.start_with(Some(point), &with_queue),
                Cut::KillAfter(_) => setup.start_with(None, &with_queue),
            };
            match op {
                Operation::Provisioning => s.scale(1),
                // (The webhook defaults ttlSecondsAfterEmpty while consolidation is off; the two
                // cannot be set together.)
                Operation::Consolidation => patch(json!({"spec": {"consolidation": {"enabled": true}, "ttlSecondsAfterEmpty": null}})),
                Operation::Expiration => {
                    // Expired now; its replacement, younger by the whole round, is not.
                    let node = s.node(old.as_deref().unwrap()).expect("the node to expire");
                    let created = node.metadata.creation_timestamp.as_ref().unwrap().0;
                    let age = jiff::Timestamp::now().duration_since(created).as_secs().max(0);
                    let ttl = age.max(150) + 1;
                    if age < ttl {
                        std::thread::sleep(Duration::from_secs((ttl - age) as u64));
                    }
                    patch(json!({"spec": {"ttlSecondsUntilExpired": ttl}}));
                }
                Operation::Drift => patch(json!({"spec": {"labels": {"round": round.to_string()}}})),
                Operation::Interruption => {
                    let node = s.node(old.as_deref().unwrap()).expect("the node to interrupt");
                    send_shutting_down(&setup, &url, &node);
                }
            }
            match cut {
                Cut::At(point) => crashing.expect_crash_or_pass(point, op.window() + Duration::from_secs(120)),
                Cut::KillAfter(after) => {
                    std::thread::sleep(after);
                    drop(crashing);
                }
            }

            // 3. A fresh run converges.
            let mut normal = setup.start_with(None, &with_queue);
            let wanted = if op == Operation::Provisioning || op == Operation::Consolidation { 1 } else { 2 };
            normal.wait_for(&s, "the operation done and the pods Running", Duration::from_secs(300), || {
                let pods = running(&s);
                let gone = old.as_ref().is_none_or(|old| s.node(old).is_none());
                let drifted = op != Operation::Drift
                    || pods.iter().filter_map(|p| p.spec.as_ref()?.node_name.clone()).all(|n| {
                        s.node(&n).is_some_and(|n| n.labels().get("round") == Some(&round.to_string()))
                    });
                (pods.len() == wanted && gone && drifted).then_some(())
            });
            if op == Operation::Expiration {
                patch(json!({"spec": {"ttlSecondsUntilExpired": null}}));
            }
            let fewest = watch.map(ReplicaWatch::fewest);

            // 4. Counted before anything is deleted.
            let settled = settle(|| s.tally(&setup), |t| t.leaked == 0 && t.stuck == 0);
            let launched = s.instances_ever(&setup).difference(&before).count();
            let cordoned = s
                .nodes()
                .iter()
                .filter(|n| n.metadata.deletion_timestamp.is_none() && n.spec.as_ref().and_then(|sp| sp.unschedulable) == Some(true))
                .count();
            eprintln!("round {round}/{rounds}: {settled:?}, launched {launched}, cordoned {cordoned}, fewest Running {fewest:?}");
            let mut fail = |what: String| violations.push(format!("round {round} ({op:?}, {cut:?}): {what}"));
            if settled.leaked > 0 {
                fail(format!("{} instances without a Node", settled.leaked));
            }
            if settled.stuck > 0 {
                fail(format!("{} Nodes stuck deleting", settled.stuck));
            }
            if cordoned > 0 {
                fail(format!("{cordoned} Nodes cordoned with no deletion in progress"));
            }
            if launched == 0 || launched > op.most_launches() {
                fail(format!("{launched} instances launched (1 to {} expected)", op.most_launches()));
            }
            if fewest == Some(0) {
                fail("every replica of the workload was down at once".to_string());
            }

            // 5. A clean slate for the next round.
            kubectl(cluster, &["delete", "pdb", "one-at-a-time", "-n", &s.namespace, "--ignore-not-found"], None);
            patch(json!({"spec": {"consolidation": {"enabled": false}}}));
            s.scale_to_zero_and_settle(&setup);
            drop(normal);
        }
        println!(
            "random crashes: {rounds} rounds (seed {}), {cuts:?}: {} violations",
            plan.seed,
            violations.len()
        );
        assert!(
            violations.is_empty(),
            "seed {} (logs in {}):\n{}",
            plan.seed,
            setup.logs.display(),
            violations.join("\n")
        );
    }));
    let _ = setup.rt.block_on(sqs.delete_queue().queue_url(&url).send());
    s.tear_down(&setup);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// Consolidation's crash points: a node left with one of its two 1.5-CPU pods (a t3.xlarge that a
/// t3.large can replace) is consolidated by a binary that exits right after cordoning it, then by
/// one that exits once the replacement has initialised, before deleting the old node. Each round
/// must end with the pod Running on the one replacement, nothing cordoned, no instance leaked, and
/// exactly two launches in all (the first node and one replacement): no double replacement.
/// `KARPENTER_RS_CONSOLIDATION_CRASH_ROUNDS` (default 2) sets the rounds.
#[test]
fn consolidation_crashes_converge_without_leaks_cordoned_nodes_or_double_replacements() {
    let setup = setup("consolidation-crash");
    let cluster = setup.cluster;
    let rounds = env_rounds("KARPENTER_RS_CONSOLIDATION_CRASH_ROUNDS", 2);
    let s = Scenario::create_with(cluster, |p| {
        p["spec"]["consolidation"] = json!({"enabled": true});
    });
    let launched = |s: &Scenario| setup.launched(s);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        s.request_cpu("1500m");
        for round in 1..=rounds {
            let before = launched(&s);
            let big = s.one_of_two_pods_left_on_their_node(&setup);
            setup
                .start(Some("consolidation-after-cordon"))
                .expect_crash("consolidation-after-cordon", Duration::from_secs(120));
            setup
                .start(Some("consolidation-before-delete"))
                .expect_crash("consolidation-before-delete", Duration::from_secs(180));
            let mut normal = setup.start(None);
            normal.wait_for(
                &s,
                "the old node gone and the pod Running elsewhere",
                Duration::from_secs(180),
                || {
                    let node = s.running_pod_node()?;
                    (node != big && s.nodes().iter().all(|n| n.name_any() != big)).then_some(())
                },
            );
            eprintln!("round {round}/{rounds}");
            let node = s.converged_on_one_node(&setup, launched(&s) - before);
            assert_eq!(
                node.labels()["node.kubernetes.io/instance-type"],
                "t3.large",
                "the replacement is the cheaper type"
            );
            // Clean slate for the next round.
            s.scale_to_zero_and_settle(&setup);
            drop(normal);
        }
    }));
    s.tear_down(&setup);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// A consolidation command cut short (the binary exits right after cordoning the node), then the
/// user turns consolidation off: the next run must put the node back into service (uncordoned,
/// the mark gone) and replace nothing, rather than leave it cordoned until it expires.
#[test]
fn a_cut_short_consolidation_is_released_when_consolidation_is_turned_off() {
    let setup = setup("consolidation-off");
    let cluster = setup.cluster;
    let s = Scenario::create_with(cluster, |p| {
        p["spec"]["consolidation"] = json!({"enabled": true});
    });
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        s.request_cpu("1500m");
        let big = s.one_of_two_pods_left_on_their_node(&setup);
        setup
            .start(Some("consolidation-after-cordon"))
            .expect_crash("consolidation-after-cordon", Duration::from_secs(120));
        let node = s.node(&big).expect("the node exists");
        assert_eq!(
            node.spec.as_ref().and_then(|sp| sp.unschedulable),
            Some(true),
            "the crash point comes after the cordon"
        );

        kubectl_ok(
            cluster,
            &[
                "patch",
                "provisioner",
                &s.provisioner,
                "--type=merge",
                "-p",
                r#"{"spec":{"consolidation":{"enabled":false},"ttlSecondsAfterEmpty":30}}"#,
            ],
            None,
        );
        let mut normal = setup.start(None);
        normal.wait_for(&s, "the node uncordoned and unmarked", Duration::from_secs(90), || {
            let node = s.node(&big)?;
            let cordoned = node.spec.as_ref().and_then(|sp| sp.unschedulable) == Some(true);
            let marked = node.annotations().contains_key("karpenter.sh/voluntary-disruption");
            (!cordoned && !marked).then_some(())
        });
        // Nothing was replaced over 10 deprovisioning passes: the pod still runs on the node,
        // which is the only one.
        let until = binary_passes(&normal, "deprovisioning") + 10;
        wait_for("10 more deprovisioning passes", Duration::from_secs(120), || {
            (binary_passes(&normal, "deprovisioning") >= until).then_some(())
        });
        assert_eq!(s.running_pod_node().as_deref(), Some(big.as_str()), "{}", s.describe());
        assert_eq!(s.nodes().len(), 1, "no replacement was launched: {}", s.describe());
        s.scale_to_zero_and_settle(&setup);
        drop(normal);
    }));
    s.tear_down(&setup);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// A drift replacement cut short twice: the binary exits right after cordoning the drifted node
/// (a Provisioner label edited from `team: a` to `team: b`), and the next one right after its
/// replacement is Ready, before the node is deleted. The run after that converges: the drifted
/// node gone, the pod Running on the one node left, labelled `team: b`, nothing leaked, nothing
/// left cordoned, and two launches in all (the first node and one replacement: the replacement
/// the second run launched is found and used, not launched again).
#[test]
fn a_drift_replacement_cut_short_converges_without_leaks_cordoned_nodes_or_double_replacements() {
    let setup = setup("drift-crash");
    let cluster = setup.cluster;
    let s = Scenario::create_with(cluster, |p| {
        p["spec"]["labels"]["team"] = json!("a");
    });
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        s.scale(1);
        let mut normal = setup.start(None);
        let first = normal.wait_for(&s, "the pod Running", Duration::from_secs(120), || s.running_pod_node());
        drop(normal);
        kubectl_ok(
            cluster,
            &[
                "patch",
                "provisioner",
                &s.provisioner,
                "--type=merge",
                "-p",
                r#"{"spec":{"labels":{"team":"b"}}}"#,
            ],
            None,
        );
        setup
            .start(Some("replacement-after-cordon"))
            .expect_crash("replacement-after-cordon", Duration::from_secs(120));
        let node = s.node(&first).expect("the drifted node is still there");
        assert_eq!(
            node.spec.as_ref().and_then(|sp| sp.unschedulable),
            Some(true),
            "the crash point comes after the cordon"
        );
        assert_eq!(
            node.annotations().get("karpenter.sh/voluntary-disruption").map(String::as_str),
            Some("drifted")
        );
        setup
            .start(Some("replacement-before-delete"))
            .expect_crash("replacement-before-delete", Duration::from_secs(180));
        let mut normal = setup.start(None);
        normal.wait_for(
            &s,
            "the drifted node gone and the pod Running on a node labelled team=b",
            Duration::from_secs(180),
            || {
                let on = s.running_pod_node()?;
                let labelled = s.node(&on)?.labels().get("team").map(String::as_str) == Some("b");
                (on != first && labelled && s.nodes().iter().all(|n| n.name_any() != first)).then_some(())
            },
        );
        s.converged_on_one_node(&setup, setup.launched(&s));
        s.scale_to_zero_and_settle(&setup);
        drop(normal);
    }));
    s.tear_down(&setup);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// An interruption message acted on (the node deleted) by a binary that exits before deleting
/// the message from the queue: SQS delivers it again to the next run, which must find nothing
/// more to do. The pod ends up Running on one new node, the old instance terminated, the queue
/// empty, two launches in all (the first node and its replacement).
#[test]
fn a_redelivered_interruption_message_after_a_crash_is_harmless() {
    let setup = setup("interruption-crash");
    let cluster = setup.cluster;
    let (queue, url) = setup.interruption_queue("interruption");
    let sqs = setup.cloud.sqs();
    let queued = || setup.rt.block_on(support::queued_messages(sqs, &url));
    let with_queue = ["--leader-elect", "false", "--interruption-queue-name", queue.as_str()];
    let s = Scenario::create(cluster);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        s.scale(1);
        let mut normal = setup.start_with(None, &with_queue);
        let old = normal.wait_for(&s, "the pod Running on a node", Duration::from_secs(90), || s.running_pod_node());
        drop(normal);
        let node = s.node(&old).expect("the node exists");

        let crashing = setup.start_with(Some("interruption-before-delete"), &with_queue);
        send_shutting_down(&setup, &url, &node);
        crashing.expect_crash("interruption-before-delete", Duration::from_secs(90));
        assert_eq!(queued(), 1, "the message is still on the queue");

        let mut normal = setup.start_with(None, &with_queue);
        normal.wait_for(
            &s,
            "the old node gone, the pod Running on another, the message deleted",
            Duration::from_secs(180),
            || {
                let now = s.running_pod_node()?;
                (now != old && s.nodes().iter().all(|n| n.name_any() != old) && queued() == 0).then_some(())
            },
        );
        let settled = settle(|| s.tally(&setup), |t| t.leaked == 0 && t.stuck == 0 && t.nodes == 1);
        assert_eq!((settled.leaked, settled.stuck, settled.nodes), (0, 0, 1), "{}", s.describe());
        assert_eq!(
            setup.launched(&s),
            2,
            "the first node and one replacement, nothing more (logs in {})",
            setup.logs.display()
        );
        s.scale_to_zero_and_settle(&setup);
        drop(normal);
    }));
    let _ = setup.rt.block_on(sqs.delete_queue().queue_url(&url).send());
    s.tear_down(&setup);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// A queue name that does not exist (yet) is an error in the log and in
/// `karpenter_cloudprovider_errors_total`, retried, and stops nothing else: a pod still gets its
/// node. Once the queue is created, the controller finds it and handles its messages.
#[test]
fn a_missing_interruption_queue_is_retried_and_provisioning_goes_on() {
    let setup = setup("interruption-missing-queue");
    let cluster = setup.cluster;
    let queue = unique("missing");
    let s = Scenario::create(cluster);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut binary = setup.start_with(None, &["--leader-elect", "false", "--interruption-queue-name", queue.as_str()]);
        let log_path = binary.log.clone();
        let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
        s.scale(1);
        binary.wait_for(&s, "the pod Running on a node", Duration::from_secs(90), || s.running_pod_node());
        binary.wait_for(&s, "the missing queue reported", Duration::from_secs(30), || {
            let log = log();
            (log.contains("interruption queue call failed") && log.contains("NonExistentQueue")).then_some(())
        });
        let metrics = binary_metrics(&binary);
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("karpenter_cloudprovider_errors_total{") && l.contains("method=\"sqs:GetQueueUrl\"")),
            "{metrics}"
        );
        setup
            .rt
            .block_on(setup.cloud.sqs().create_queue().queue_name(&queue).send())
            .unwrap();
        binary.wait_for(&s, "the queue found once it exists", Duration::from_secs(90), || {
            log().contains("handling interruption events from the queue").then_some(())
        });
        s.scale_to_zero_and_settle(&setup);
        drop(binary);
    }));
    if let Ok(url) = setup.rt.block_on(setup.cloud.sqs().get_queue_url().queue_name(&queue).send()) {
        let _ = setup
            .rt
            .block_on(setup.cloud.sqs().delete_queue().queue_url(url.queue_url.unwrap_or_default()).send());
    }
    s.tear_down(&setup);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// The addresses the binary's start line names, once it has started.
fn binary_addresses(binary: &Binary) -> support::process::Addresses {
    wait_for("the start line naming the addresses", Duration::from_secs(60), || {
        binary.log().lines().find_map(support::process::parse_started)
    })
}

/// The binary's /metrics.
fn binary_metrics(binary: &Binary) -> String {
    addresses_metrics(&binary_addresses(binary))
}

fn addresses_metrics(addresses: &support::process::Addresses) -> String {
    support::process::http_get(addresses.metrics, "/metrics").expect("metrics answer").1
}

/// /healthz at `addresses`: status code and body.
fn addresses_health(addresses: &support::process::Addresses) -> (u16, String) {
    support::process::http_get(addresses.health, "/healthz").expect("healthz answers")
}

/// A controller whose passes panic (the `KARPENTER_RS_PANIC_IN` failpoint, the only injected
/// fault) is logged with its backtrace, counted and started again while the others go on: a
/// pod still gets a node. When its panics stop it is back (its passes succeed) and /healthz
/// says ok; when they never stop, /healthz fails naming it, so the kubelet would restart the
/// process, and provisioning still works meanwhile (a pod gets a node launched then: the first
/// phase's node is gone).
#[test]
fn a_controller_that_panics_is_restarted_and_the_others_go_on() {
    let setup = setup("supervision");
    let cluster = setup.cluster;
    let s = Scenario::create(cluster);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let panics = |a: &support::process::Addresses| {
            support::metric_sum(
                &addresses_metrics(a),
                "karpenter_controller_panics_total{controller=\"deprovisioning\"}",
            )
        };
        let succeeded = |a: &support::process::Addresses| {
            support::metric_sum(
                &addresses_metrics(a),
                "controller_runtime_reconcile_total{controller=\"deprovisioning\",result=\"success\"}",
            )
        };
        // Three panics, then it is back.
        let mut binary = setup.start_with_env(&[(PANIC_IN_ENV, "deprovisioning:3")]);
        s.scale(1);
        let addresses = binary_addresses(&binary);
        binary.wait_for(&s, "the pod Running on a node", Duration::from_secs(90), || s.running_pod_node());
        binary.wait_for(
            &s,
            "three panics counted and deprovisioning passing again",
            Duration::from_secs(60),
            || (panics(&addresses) == 3.0 && succeeded(&addresses) > 0.0).then_some(()),
        );
        let log = binary.log();
        assert!(log.contains("controller panicked; starting it again"), "{log}");
        assert!(log.contains("backtrace"), "the panic is logged with its backtrace:\n{log}");
        assert_eq!(addresses_health(&addresses).0, 200, "healthy once the controller passes again");
        // No node left, so that the pod of the next phase needs a launch.
        s.scale_to_zero_and_settle(&setup);
        drop(binary);

        // Panics that never stop: /healthz fails, provisioning goes on.
        let mut binary = setup.start_with_env(&[(PANIC_IN_ENV, "deprovisioning")]);
        let addresses = binary_addresses(&binary);
        let (status, body) = binary.wait_for(&s, "/healthz failing", Duration::from_secs(90), || {
            let (status, body) = addresses_health(&addresses);
            (status != 200).then_some((status, body))
        });
        assert_eq!(status, 500, "{body}");
        assert!(body.contains("deprovisioning: panicked"), "{body}");
        assert!(s.nodes().is_empty(), "no node of the scenario before the launch");
        s.scale(1);
        binary.wait_for(&s, "the pod Running on a node launched meanwhile", Duration::from_secs(90), || {
            s.running_pod_node()
        });
        assert!(panics(&addresses) >= 5.0);
        s.scale_to_zero_and_settle(&setup);
        drop(binary);
    }));
    s.tear_down(&setup);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// A loop that stops without a panic (the `KARPENTER_RS_STALL_IN` failpoint: the binder waits on
/// an await that never ends, the only injected fault) makes /healthz fail naming it once it is
/// silent past its deadline (set to 5 s by `KARPENTER_RS_LIVENESS_DEADLINE_SECONDS`), so the
/// kubelet would restart the process; the same binary without the failpoint never reports the
/// binder (its passes may still outrun a 5 s deadline, so other problems are allowed).
#[test]
fn a_loop_that_stalls_makes_healthz_fail_naming_it() {
    let setup = setup("stall");
    let deadline = (LIVENESS_DEADLINE_ENV, "5");
    let binary = setup.start_with_env(&[(STALL_IN_ENV, "binder"), deadline]);
    let addresses = binary_addresses(&binary);
    let (status, body) = wait_for("/healthz failing", Duration::from_secs(60), || {
        let (status, body) = addresses_health(&addresses);
        (status != 200).then_some((status, body))
    });
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("binder: its loop has not run for"), "{body}");
    drop(binary);

    let binary = setup.start_with_env(&[deadline]);
    let addresses = binary_addresses(&binary);
    // Well past the deadline and the slowest loop's beat (deprovisioning's, every 1 s here).
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(15) {
        let (status, body) = addresses_health(&addresses);
        assert!(!body.contains("binder"), "the binder beats without the failpoint: {status} {body}");
        std::thread::sleep(Duration::from_millis(500));
    }
    drop(binary);
}

/// SIGTERM (a rolling update) stops the leader's passes before it releases the Lease, so that
/// the next leader never acts beside a pass of this one, and releases it, so that the next one
/// need not wait for it to expire: the log has the two in that order, the process exits with
/// success, and the Lease has no holder.
#[test]
fn on_sigterm_the_passes_stop_before_the_lease_is_released() {
    let setup = setup("sigterm");
    let cluster = setup.cluster;
    let s = Scenario::create(cluster);
    let election = ["--leader-elect", "true", "--leader-election-namespace", s.namespace.as_str()];
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut binary = setup.start_with(None, &election);
        let identity = binary.identity();
        let holder = wait_for("a leader", Duration::from_secs(60), || s.lease_holder());
        assert_eq!(holder, identity);
        let pid = binary.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", pid.as_str()]).status().expect("running kill");
        assert!(sent.success());
        let status = wait_for("the process to exit", Duration::from_secs(60), || binary.child.try_wait().unwrap());
        let log = binary.log();
        assert!(status.success(), "exit status {status}:\n{log}");
        let stopped = log.find("controllers stopped; releasing the leader lease");
        let released = log.find("released the leader lease");
        assert!(
            matches!((stopped, released), (Some(a), Some(b)) if a < b),
            "the passes stop, then the Lease is released:\n{log}"
        );
        assert_eq!(s.lease_holder(), None, "the Lease is released");
    }));
    s.tear_down(&setup);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// Each controller is a task of its own: while deprovisioning is busy in blocking work for
/// fifteen minutes at a time (the `KARPENTER_RS_BUSY_IN` failpoint, the only injected fault, run
/// in `block_in_place` as the consolidation search is), a pod still gets a node launched and is
/// bound to it (provisioning, node lifecycle, binder); an interruption message for that node
/// still has it drained and replaced, the pod bound to the new node (interruption, termination,
/// provisioning, binder); and a Node deleted with kubectl is drained and terminated
/// (termination). On SIGTERM the process exits within the stop grace without waiting for the
/// busy pass, naming it.
#[test]
fn a_controller_busy_in_a_long_pass_holds_up_no_other() {
    let setup = setup("busy");
    let cluster = setup.cluster;
    let s = Scenario::create(cluster);
    let (queue, url) = setup.interruption_queue("busy");
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // Longer than the whole test: its first pass is busy throughout.
        let mut binary = Binary::spawn(
            setup.cluster,
            &setup.certs,
            &setup.logs,
            None,
            &["--leader-elect", "false", "--interruption-queue-name", queue.as_str()],
            &[(BUSY_IN_ENV, "deprovisioning:900")],
        );
        let log_path = binary.log.clone();
        binary.wait_for(&s, "deprovisioning busy", Duration::from_secs(60), || {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            log.contains("a failpoint keeps this pass busy").then_some(())
        });
        s.scale(1);
        let first = binary.wait_for(&s, "the pod Running on a node launched meanwhile", Duration::from_secs(120), || {
            s.running_pod_node()
        });
        send_shutting_down(&setup, &url, &s.node(&first).expect("the node exists"));
        let node = binary.wait_for(
            &s,
            "the interrupted node gone and the pod Running on its replacement",
            Duration::from_secs(180),
            || {
                let now = s.running_pod_node()?;
                (now != first && s.node(&first).is_none()).then_some(now)
            },
        );
        kubectl_ok(cluster, &["delete", "node", node.as_str(), "--wait=false"], None);
        binary.wait_for(&s, "the deleted node terminated and gone", Duration::from_secs(120), || {
            s.node(&node).is_none().then_some(())
        });
        let log = binary.log();
        assert_eq!(
            log.matches("a failpoint keeps this pass busy").count(),
            1,
            "deprovisioning was busy in its first pass throughout:\n{log}"
        );
        let pid = binary.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", pid.as_str()]).status().expect("running kill");
        assert!(sent.success());
        let status = wait_for("the process to exit", Duration::from_secs(40), || binary.child.try_wait().unwrap());
        let log = binary.log();
        assert!(status.success(), "exit status {status}:\n{log}");
        assert!(
            log.lines()
                .any(|l| l.contains("controllers still in a pass after the stop grace") && l.contains(r#"left=["deprovisioning"]"#)),
            "the busy controller, and only it, is left behind:\n{log}"
        );
        // The pod's next node (launched after the delete) is removed by a binary not held up.
        let _binary = setup.start(None);
        s.scale_to_zero_and_settle(&setup);
    }));
    let _ = setup.rt.block_on(setup.cloud.sqs().delete_queue().queue_url(&url).send());
    s.tear_down(&setup);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// `run` with no cluster endpoint configured looks it up with eks:DescribeCluster (moto knows the
/// local cluster's EKS cluster) and starts its controllers with it.
#[test]
fn without_a_cluster_endpoint_the_binary_looks_it_up_and_starts() {
    let setup = setup("endpoint-lookup");
    let binary = setup.start_with_env(&[("CLUSTER_ENDPOINT", "")]);
    let endpoint = setup.cluster.fixtures()["eks_endpoint"].as_str().unwrap().to_string();
    wait_for(
        "the endpoint looked up and the controllers started",
        Duration::from_secs(60),
        || {
            let log = binary.log();
            (log.contains("cluster endpoint from eks:DescribeCluster") && log.contains(&endpoint) && log.contains("controllers started"))
                .then_some(())
        },
    );
    drop(binary);
}

/// A change to the settings ConfigMap takes effect without a restart: the running binary reads
/// the ConfigMap again within its recheck interval (15 s), starts its controllers again with it,
/// and the next launch carries the new `aws.tags`.
#[test]
fn a_settings_configmap_change_takes_effect_without_a_restart() {
    let setup = setup("settings-change");
    let cluster = setup.cluster;
    let s = Scenario::create(cluster);
    let tag = unique("settings-change");
    // The binary's system namespace (--system-namespace's default).
    kubectl(cluster, &["create", "namespace", "karpenter"], None);
    let configmap = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "karpenter-global-settings", "namespace": "karpenter"},
        "data": {"aws.tags": json!({"settings-change": tag}).to_string()},
    });
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut binary = setup.start(None);
        let log_path = binary.log.clone();
        let log = move || std::fs::read_to_string(&log_path).unwrap_or_default();
        binary.wait_for(&s, "the controllers started", Duration::from_secs(60), || {
            log().contains("controllers started").then_some(())
        });
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(&configmap.to_string()));
        binary.wait_for(
            &s,
            "the change read and the controllers started again",
            Duration::from_secs(60),
            || {
                let log = log();
                let changed = log.find("the settings ConfigMap changed")?;
                log[changed..].contains("controllers started").then_some(())
            },
        );
        s.scale(1);
        binary.wait_for(&s, "the pod Running on a node", Duration::from_secs(120), || s.running_pod_node());
        let instances = s.instances(&setup);
        assert_eq!(instances.len(), 1, "{instances:?}");
        let described = setup
            .rt
            .block_on(setup.cloud.ec2().describe_instances().instance_ids(&instances[0]).send())
            .expect("describing the instance");
        let tags: Vec<(String, String)> = described
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .flat_map(|i| i.tags())
            .map(|t| (t.key().unwrap_or_default().to_string(), t.value().unwrap_or_default().to_string()))
            .collect();
        assert!(
            tags.contains(&("settings-change".to_string(), tag.clone())),
            "the launch carries the new tag: {tags:?}"
        );
        s.scale_to_zero_and_settle(&setup);
    }));
    kubectl(
        cluster,
        &[
            "delete",
            "configmap",
            "karpenter-global-settings",
            "-n",
            "karpenter",
            "--ignore-not-found",
        ],
        None,
    );
    s.tear_down(&setup);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// Passes `controller` of the running binary has finished (`controller_runtime_reconcile_total`).
fn binary_passes(binary: &Binary, controller: &str) -> u64 {
    let prefix = format!("controller_runtime_reconcile_total{{controller=\"{controller}\",");
    support::metric_sum(&binary_metrics(binary), &prefix) as u64
}

#[test]
fn two_replicas_never_launch_twice_and_the_survivor_takes_over() {
    let setup = setup("replicas");
    let cluster = setup.cluster;
    let s = Scenario::create(cluster);
    let election = ["--leader-elect", "true", "--leader-election-namespace", s.namespace.as_str()];
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // One pod per t3.large: what the simulation packs is then easy to check.
        s.request_cpu("1500m");
        let mut replicas = vec![setup.start_with(None, &election), setup.start_with(None, &election)];
        let holder = || s.lease_holder();
        let leader = wait_for("a leader", Duration::from_secs(60), holder);
        let position = replicas
            .iter()
            .position(|r| r.identity() == leader)
            .unwrap_or_else(|| panic!("the Lease holder {leader:?} is one of the replicas"));

        // Every pod Running; each pod planned onto exactly one launched node, counted over both
        // replicas' launches (a double launch plans the same pods twice); no instance without a node.
        let logs: Vec<PathBuf> = replicas.iter().map(|r| r.log.clone()).collect();
        let check = |want: usize| {
            wait_for(&format!("{want} pods Running"), Duration::from_secs(150), || {
                let running = s
                    .pods()
                    .into_iter()
                    .filter(|p| p.status.as_ref().and_then(|st| st.phase.as_deref()) == Some("Running"))
                    .count();
                (running == want).then_some(())
            });
            let settled = settle(|| s.tally(&setup), |t| t.leaked == 0 && t.stuck == 0);
            let launches: Vec<String> = logs
                .iter()
                .flat_map(|log| {
                    std::fs::read_to_string(log)
                        .unwrap_or_default()
                        .lines()
                        .map(str::to_string)
                        .collect::<Vec<_>>()
                })
                .filter(|line| line.contains("launched node"))
                .collect();
            let planned: usize = launches.iter().filter_map(|line| planned_pods(line)).sum();
            assert_eq!(
                planned,
                want,
                "pods planned onto launched nodes, by both replicas:\n{}",
                launches.join("\n")
            );
            assert_eq!(settled.leaked, 0, "instances without a node");
            s.nodes().len()
        };
        s.scale(3);
        let first = check(3);

        // The leader dies (SIGKILL); the other replica takes over and carries on.
        drop(replicas.remove(position));
        s.scale(6);
        let second = check(6);
        let survivor = &replicas[0];
        assert_eq!(holder().as_deref(), Some(survivor.identity().as_str()), "the survivor leads");
        assert!(second >= first, "{first} then {second} nodes");
        assert!(
            survivor.log().contains("launched node"),
            "the survivor launched after the take-over:\n{}",
            survivor.log()
        );
    }));
    s.tear_down(&setup);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// The leader's answers from the API server turn slow during a scale-up (5 s a chunk, through a
/// proxy: the only injected fault; its requests still reach the API server when sent, so the
/// audit log's time of each write is when it was sent): it stops leading within its renew
/// deadline and every pass of it is dropped, the other replica takes over and gets the pods
/// Running, and the API server's audit log (every write of the slow replica, which runs as an
/// audited user) has no successful write of it after the other acquired the Lease.
#[test]
fn a_leader_whose_api_server_turns_slow_writes_nothing_after_the_other_takes_over() {
    let setup = setup("slow-leader");
    let cluster = setup.cluster;
    let s = Scenario::create(cluster);
    let election = ["--leader-elect", "true", "--leader-election-namespace", s.namespace.as_str()];
    let latency = support::latency_proxy::Latency::default();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // One pod per t3.large.
        s.request_cpu("1500m");
        let state = support::cluster_state_dir();
        let audited = std::fs::read_to_string(state.join("kubeconfig-audited")).expect("the local cluster's audited kubeconfig");
        let endpoint = &cluster.env["CLUSTER_ENDPOINT"];
        let upstream: std::net::SocketAddr = endpoint.trim_start_matches("https://").parse().unwrap();
        let proxy = setup.rt.block_on(support::latency_proxy::start(
            upstream,
            "127.0.0.3".parse().unwrap(),
            latency.clone(),
        ));
        assert!(audited.contains(endpoint.as_str()), "the kubeconfig names {endpoint}");
        let kubeconfig = setup.logs.join("kubeconfig-slow");
        std::fs::write(
            &kubeconfig,
            audited.replace(endpoint.as_str(), &format!("https://127.0.0.1:{}", proxy.port())),
        )
        .unwrap();
        let mut slow = Binary::spawn(
            cluster,
            &setup.certs,
            &setup.logs,
            None,
            &election,
            &[("KUBECONFIG", kubeconfig.to_str().unwrap())],
        );
        let holder = wait_for("a leader", Duration::from_secs(60), || s.lease_holder());
        assert_eq!(holder, slow.identity(), "the replica started first leads");
        let fast = setup.start_with(None, &election);
        s.scale(1);
        slow.wait_for(
            &s,
            "the pod Running on a node the leader launched",
            Duration::from_secs(120),
            || s.running_pod_node(),
        );

        latency.responses.store(5_000, std::sync::atomic::Ordering::Relaxed);
        s.scale(3);
        let fast_identity = fast.identity();
        slow.wait_for(&s, "the other replica to take over", Duration::from_secs(120), || {
            (s.lease_holder().as_deref() == Some(fast_identity.as_str())).then_some(())
        });
        let acquired = kubectl_ok(
            cluster,
            &[
                "get",
                "lease",
                "karpenter-rs-leader-election",
                "-n",
                &s.namespace,
                "-o",
                "jsonpath={.spec.acquireTime}",
            ],
            None,
        );
        let acquired: jiff::Timestamp = acquired.trim().parse().expect("an acquireTime");
        wait_for("3 pods Running", Duration::from_secs(180), || {
            let running = s
                .pods()
                .into_iter()
                .filter(|p| p.status.as_ref().and_then(|st| st.phase.as_deref()) == Some("Running"))
                .count();
            (running == 3).then_some(())
        });
        assert!(
            slow.log().contains("lost the leader lease"),
            "the slow replica stopped leading:\n{}",
            slow.log()
        );
        // The slow replica's last answers and the audit log's batches (1 s) are in.
        std::thread::sleep(Duration::from_secs(15));
        let audit = std::fs::read_to_string(state.join("logs/audit.log")).expect("the local cluster's audit log");
        let writes = audited_writes(&audit);
        let (after, before): (Vec<_>, Vec<_>) = writes.iter().partition(|(at, _)| *at >= acquired);
        assert!(
            before.iter().any(|(_, what)| what.starts_with("create nodes")),
            "the slow replica's writes while it led are in the audit log (its Node among them): {before:?}"
        );
        assert!(
            after.is_empty(),
            "the slow replica wrote after the other acquired the Lease at {acquired}: {after:?}"
        );
        let settled = settle(|| s.tally(&setup), |t| t.leaked == 0 && t.stuck == 0);
        assert_eq!(settled.leaked, 0, "instances without a node");
    }));
    latency.set_both(0);
    s.tear_down(&setup);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// The audit log's successful writes by the audited user (tests/cluster/up.sh), with when the API
/// server received each and "verb resource[/subresource] name".
fn audited_writes(audit_log: &str) -> Vec<(jiff::Timestamp, String)> {
    audit_log
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|e| e["user"]["username"] == "karpenter-rs-audited")
        .filter(|e| {
            matches!(
                e["verb"].as_str(),
                Some("create" | "update" | "patch" | "delete" | "deletecollection")
            )
        })
        .filter(|e| e["responseStatus"]["code"].as_u64().is_some_and(|c| (200..300).contains(&c)))
        .filter_map(|e| {
            let at = e["requestReceivedTimestamp"].as_str()?.parse().ok()?;
            let object = &e["objectRef"];
            let mut resource = object["resource"].as_str().unwrap_or_default().to_string();
            if let Some(sub) = object["subresource"].as_str() {
                resource = format!("{resource}/{sub}");
            }
            let what = format!(
                "{} {resource} {}",
                e["verb"].as_str().unwrap_or_default(),
                object["name"].as_str().unwrap_or_default()
            );
            Some((at, what))
        })
        .collect()
}

/// Stops (`stop`) or starts again (`start`) one control-plane component with
/// tests/cluster/restart.sh, which keeps its command line and data.
fn control_plane(what: &str, component: &str) {
    let out = Command::new("bash")
        .arg(support::repo_root().join("tests/cluster/restart.sh"))
        .args([what, component])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "restart.sh {what} {component} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The binary's webhook answers a validation review (from its own process, whatever the API
/// server does): true when it allowed the first write-up's Provisioner.
fn webhook_allows(binary: &Binary, certs: &std::path::Path) -> bool {
    let Some(address) = binary.log().lines().find_map(support::process::parse_started).map(|a| a.webhook) else {
        return false;
    };
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "outage-check", "operation": "CREATE",
            "kind": {"group": "karpenter.sh", "version": "v1alpha5", "kind": "Provisioner"},
            "resource": {"group": "karpenter.sh", "version": "v1alpha5", "resource": "provisioners"},
            "object": fixture("first-writeup/provisioner.yaml"),
        }
    });
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "5", "--cacert"])
        .arg(certs.join("ca.crt"))
        .args(["-H", "content-type: application/json", "--data-binary", "@-"])
        .arg(format!("https://{address}/validate"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(review.to_string().as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    serde_json::from_slice::<serde_json::Value>(&out.stdout).is_ok_and(|v| v["response"]["allowed"] == true)
}

/// The control plane goes away under the binary (leader election on), 30 s each time:
/// kube-apiserver, then etcd, each while a provisioning pass launches for a new pod, while a
/// deleted node drains, and while a node is consolidated. Throughout, the binary stays up and
/// its webhook answers from its own process; on recovery it works from what the API server says
/// now: each time the pod ends Running, with no instance leaked, no node stuck or cordoned, one
/// launch per need, and the Lease held by the binary again.
#[test]
fn api_server_and_etcd_outages_mid_launch_drain_and_consolidation_leave_nothing_behind() {
    const OUTAGE: Duration = Duration::from_secs(30);
    let setup = setup("outages");
    let cluster = setup.cluster;
    let s = Scenario::create_with(cluster, |p| {
        p["spec"]["consolidation"] = json!({"enabled": true});
    });
    let election = ["--leader-elect", "true", "--leader-election-namespace", s.namespace.as_str()];
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut binary = setup.start_with(None, &election);
        let holder = || s.lease_holder().unwrap_or_default();
        let identity = binary.identity();
        binary.wait_for(&s, "the binary to lead", Duration::from_secs(60), || {
            (holder() == identity).then_some(())
        });
        // During each outage: the process stays up and the webhook answers.
        let outage = |binary: &mut Binary, component: &str| {
            control_plane("stop", component);
            let deadline = Instant::now() + OUTAGE;
            let mut answered = 0;
            while Instant::now() < deadline {
                assert!(
                    binary.child.try_wait().unwrap().is_none(),
                    "karpenter-rs exited during the {component} outage:\n{}",
                    binary.log()
                );
                answered += usize::from(webhook_allows(binary, &setup.certs));
                std::thread::sleep(Duration::from_secs(2));
            }
            control_plane("start", component);
            assert!(
                answered >= 10,
                "the webhook answered {answered} reviews during the {component} outage"
            );
        };
        let converged = |binary: &mut Binary, what: &str| {
            // The pod Running on a node that is not being deleted (right after an outage the pod
            // may still run on the node that is to drain). 180 s, and 120 s more for kwok to take
            // its node back should the watchdog restart it (seen in CI: 40 s before the new kwok
            // synced the node's lease).
            let mut kwok = KwokWatchdog::default();
            let node = binary.wait_for(&s, what, Duration::from_secs(300), || {
                kwok.check(&s);
                let node = s.running_pod_node()?;
                s.node(&node).filter(|n| n.metadata.deletion_timestamp.is_none())?;
                Some(node)
            });
            let settled = settle(|| s.tally(&setup), |t| t.leaked == 0 && t.stuck == 0 && t.nodes == 1);
            let cordoned = s
                .nodes()
                .iter()
                .filter(|n| n.spec.as_ref().and_then(|sp| sp.unschedulable) == Some(true))
                .count();
            eprintln!("{what}: {settled:?}, cordoned {cordoned}, launched {}", setup.launched(&s));
            assert_eq!(
                (settled.leaked, settled.stuck, settled.nodes, cordoned),
                (0, 0, 1, 0),
                "{what}: {}",
                s.describe()
            );
            binary.wait_for(&s, "the binary to lead again", Duration::from_secs(60), || {
                (holder() == identity).then_some(())
            });
            node
        };

        let provider_id = |node: &str| kubectl_ok(cluster, &["get", "node", node, "-o", "jsonpath={.spec.providerID}"], None);
        s.request_cpu("1500m");
        // Each component in turn, in the middle of each of the three. tests/run.sh takes
        // kube-apiserver alone (`KARPENTER_RS_OUTAGE_COMPONENTS`, 5 minutes less);
        // tests/benches/crash_rounds.sh takes both.
        let components = std::env::var("KARPENTER_RS_OUTAGE_COMPONENTS").unwrap_or_else(|_| "kube-apiserver,etcd".into());
        let components: Vec<&str> = components.split(',').map(str::trim).filter(|c| !c.is_empty()).collect();
        for component in ["kube-apiserver", "etcd"].into_iter().filter(|c| components.contains(c)) {
            let launched_at_start = setup.launched(&s);
            // 1. A provisioning pass: the pod appears, and the component goes as the pass launches.
            s.scale(1);
            binary.wait_for(&s, "the pod pending", Duration::from_secs(30), || {
                (!s.pods().is_empty()).then_some(())
            });
            outage(&mut binary, component);
            let first = converged(&mut binary, &format!("after the {component} outage mid-launch"));
            assert_eq!(
                setup.launched(&s) - launched_at_start,
                1,
                "one launch for one pod (logs in {})",
                setup.logs.display()
            );

            // 2. A drain: the node is deleted, and the component goes while its pod is evicted
            //    and replaced.
            let first_instance = provider_id(&first);
            kubectl_ok(cluster, &["delete", "node", &first, "--wait=false"], None);
            outage(&mut binary, component);
            let second = converged(&mut binary, &format!("after the {component} outage mid-drain"));
            // Private addresses, and so node names, can be reused: compare the instances.
            assert_ne!(
                provider_id(&second),
                first_instance,
                "the pod moved off the deleted node's instance"
            );
            assert_eq!(
                setup.launched(&s) - launched_at_start,
                2,
                "one replacement for the drained node (logs in {})",
                setup.logs.display()
            );

            // 3. A consolidation: a second pod gets a node of its own; once it goes,
            //    consolidation takes the emptied node away, and the component goes as soon as
            //    that node is cordoned for it.
            s.scale(2);
            binary.wait_for(&s, "two pods Running on two nodes", Duration::from_secs(180), || {
                let running = s
                    .pods()
                    .into_iter()
                    .filter(|p| p.status.as_ref().and_then(|st| st.phase.as_deref()) == Some("Running"))
                    .count();
                (running == 2 && s.nodes().len() == 2).then_some(())
            });
            let launched_before = setup.launched(&s);
            let cordons = || log_lines(&setup, "cordoned node to deprovision it");
            let cordoned_before = cordons();
            s.scale(1);
            binary.wait_for(&s, "a node cordoned for consolidation", Duration::from_secs(180), || {
                (cordons() > cordoned_before).then_some(())
            });
            outage(&mut binary, component);
            converged(&mut binary, &format!("after the {component} outage mid-consolidation"));
            let launches = setup.launched(&s) - launched_before;
            assert!(launches <= 1, "at most one replacement in a consolidation, {launches} launched");

            // A clean slate for the next component.
            s.scale_to_zero_and_settle(&setup);
        }
    }));
    s.tear_down(&setup);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// The last `lines` lines of a control-plane component's log (target/local-cluster/logs).
fn log_tail(component: &str, lines: usize) -> String {
    let path = support::cluster_state_dir().join(format!("logs/{component}.log"));
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    let tail = all[all.len().saturating_sub(lines)..].join("\n");
    format!("$ tail -n {lines} {}\n{tail}\n", path.display())
}

/// Restarts kwok, once, when a pod has been bound to a Ready node that is not being deleted for
/// 60 s and kwok has still not started it, or when a node the kubelet stand-in registered has
/// not been made Ready by kwok for 60 s. This works around kwok, not karpenter-rs: once the pod
/// is bound, starting it is the node's (kwok's) job alone, and so is reporting a registered node
/// Ready; kwok v0.7.0 has been seen in CI, after an outage, to stop starting the pods of a node
/// it keeps heartbeating, and to stop initialising nodes whose leases it keeps. A real kubelet
/// keeps going after an outage, so the test stands in for that; the restart is printed, and a
/// second occurrence fails the wait as before.
#[derive(Default)]
struct KwokWatchdog {
    bound_since: Option<Instant>,
    restarted: bool,
}

impl KwokWatchdog {
    const PATIENCE: Duration = Duration::from_secs(60);

    fn check(&mut self, s: &Scenario) {
        if self.restarted {
            return;
        }
        let nodes: Vec<Node> = s.nodes().into_iter().filter(|n| n.metadata.deletion_timestamp.is_none()).collect();
        let ready_nodes: Vec<String> = nodes
            .iter()
            .filter(|n| karpenter_rs::scheduling::nodes::is_ready(n))
            .map(|n| n.name_any())
            .collect();
        let registered_not_ready = nodes.iter().any(|n| {
            n.annotations().get("kubelet.local-cluster/registered").map(String::as_str) == Some("true")
                && !karpenter_rs::scheduling::nodes::is_ready(n)
        });
        let waiting = registered_not_ready
            || s.pods().into_iter().any(|p| {
                let phase = p.status.as_ref().and_then(|st| st.phase.as_deref());
                p.metadata.deletion_timestamp.is_none()
                    && phase == Some("Pending")
                    && p.spec.and_then(|sp| sp.node_name).is_some_and(|n| ready_nodes.contains(&n))
            });
        if !waiting {
            self.bound_since = None;
            return;
        }
        let since = *self.bound_since.get_or_insert_with(Instant::now);
        if since.elapsed() >= Self::PATIENCE {
            eprintln!(
                "kwok has not started a pod bound to a Ready node, or made a registered node Ready, for {:?}: restarting kwok",
                Self::PATIENCE
            );
            control_plane("stop", "kwok");
            control_plane("start", "kwok");
            self.restarted = true;
        }
    }
}

/// How many lines of this test's runs' logs contain `text`.
fn log_lines(setup: &Setup, text: &str) -> usize {
    std::fs::read_dir(&setup.logs)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| std::fs::read_to_string(entry.path()).unwrap_or_default())
        .map(|log| log.lines().filter(|l| l.contains(text)).count())
        .sum()
}

/// Watched objects the controllers cannot read, end to end: a kind of the test's own whose CRD
/// is looser than its type (as Karpenter's CRDs, which migrating users keep, are for some objects
/// karpenter-rs reads), watched as the Provisioners and AWSNodeTemplates are.
mod unreadable {
    use super::*;
    use karpenter_rs::controllers::state::{watch_tolerant, Tolerant, VALIDATION_CONDITION};
    use kube::CustomResource;
    use serde::{Deserialize, Serialize};

    #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default)]
    #[kube(
        group = "tolerance.karpenter-rs.test",
        version = "v1",
        kind = "Widget",
        status = "WidgetStatus",
        schema = "disabled"
    )]
    pub struct WidgetSpec {
        weight: i32,
    }

    #[derive(Serialize, Deserialize, Clone, Debug, Default)]
    pub struct WidgetStatus {
        #[serde(default)]
        conditions: Vec<serde_json::Value>,
    }

    impl Tolerant for Widget {
        fn placeholder(metadata: kube::api::ObjectMeta) -> Self {
            Widget {
                metadata,
                spec: WidgetSpec::default(),
                status: None,
            }
        }
    }

    const CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.tolerance.karpenter-rs.test}
spec:
  group: tolerance.karpenter-rs.test
  scope: Cluster
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
";

    /// The widget's ValidationSucceeded condition: status and message.
    fn validation(cluster: &Cluster, name: &str) -> Option<(String, String)> {
        let out = kubectl_ok(cluster, &["get", "widget", name, "-o", "json"], None);
        let widget: serde_json::Value = serde_json::from_str(&out).ok()?;
        let condition = widget["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == VALIDATION_CONDITION)?
            .clone();
        Some((
            condition["status"].as_str()?.to_string(),
            condition["message"].as_str()?.to_string(),
        ))
    }

    /// One that cannot be read is left out of the store and gets a Warning event `InvalidObject`
    /// and a `ValidationSucceeded: False` condition naming the field; the other objects and the
    /// watch go on; once fixed it is read, and the condition says so.
    #[test]
    fn an_unreadable_object_gets_an_event_and_a_condition_naming_the_field_and_the_others_go_on() {
        let cluster = cluster();
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(CRD));
        kubectl_ok(
            cluster,
            &[
                "wait",
                "--for=condition=Established",
                "crd/widgets.tolerance.karpenter-rs.test",
                "--timeout=60s",
            ],
            None,
        );
        let (good, bad) = (unique("good-widget"), unique("bad-widget"));
        let widget = |name: &str, weight: &str| {
            format!("apiVersion: tolerance.karpenter-rs.test/v1\nkind: Widget\nmetadata: {{name: {name}}}\nspec: {{weight: {weight}}}\n")
        };
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(&widget(&good, "1")));
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(&widget(&bad, "heavy")));

        let rt = tokio::runtime::Runtime::new().unwrap();
        let shutdown = tokio_util::sync::CancellationToken::new();
        let store = rt.block_on(async {
            let client = support::client(cluster).await;
            watch_tolerant::<Widget>(&client, &shutdown, &Default::default())
        });
        let has = |name: &str| store.state().iter().any(|w| w.name_any() == name);
        wait_for("the readable widget in the store", Duration::from_secs(60), || {
            has(&good).then_some(())
        });
        let (status, message) = wait_for("the unreadable widget's condition", Duration::from_secs(60), || {
            validation(cluster, &bad)
        });
        assert_eq!(status, "False");
        assert!(message.contains("spec.weight"), "the condition names the field: {message}");
        assert!(!has(&bad), "the unreadable widget is left out");
        let events = wait_for("the InvalidObject event", Duration::from_secs(60), || {
            let out = kubectl_ok(
                cluster,
                &[
                    "get",
                    "events",
                    "-A",
                    "--field-selector",
                    &format!("involvedObject.name={bad},reason=InvalidObject"),
                    "-o",
                    "jsonpath={.items[*].message}",
                ],
                None,
            );
            (!out.trim().is_empty()).then_some(out)
        });
        assert!(events.contains("spec.weight"), "the event names the field: {events}");
        assert_eq!(validation(cluster, &good), None, "a readable widget is never written");

        // Fixed: read, and marked readable.
        kubectl_ok(
            cluster,
            &["patch", "widget", &bad, "--type", "merge", "-p", r#"{"spec":{"weight":2}}"#],
            None,
        );
        wait_for("the fixed widget in the store", Duration::from_secs(60), || has(&bad).then_some(()));
        wait_for("the condition True", Duration::from_secs(60), || {
            validation(cluster, &bad).filter(|(status, _)| status == "True").map(|_| ())
        });

        shutdown.cancel();
        kubectl(cluster, &["delete", "widget", &good, &bad, "--wait=false"], None);
    }
}

// ---- what a real kubelet makes of the user data ----------------------------------------------
//
// The local cluster's kubelet stand-in (tests/cluster/kubelet_standin.py) reads each launched
// instance's user data from the EC2 emulator and registers what that AMI's bootstrap and kubelet
// would (labels reconciled on an existing Node, max pods, reservations, no Ready without the
// cluster's endpoint and CA); kwok marks the Node Ready only after that. These tests run the
// binary with the settings each case needs.

/// The annotations the kubelet stand-in wrote on `node`.
fn standin(node: &Node, key: &str) -> String {
    node.annotations()
        .get(&format!("kubelet.local-cluster/{key}"))
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "the kubelet stand-in wrote no {key} on {}: {:?}",
                node.name_any(),
                node.annotations()
            )
        })
}

/// The zone and type EC2 launched `node`'s instance as.
fn launched_as(setup: &Setup, node: &Node) -> (String, String) {
    let id = instance_id_from_provider_id(node.spec.as_ref().and_then(|s| s.provider_id.as_deref()).unwrap_or_default())
        .expect("the node has a provider id")
        .to_string();
    let described = setup
        .rt
        .block_on(setup.cloud.ec2().describe_instances().instance_ids(&id).send())
        .expect("describing the instance");
    let instance = described.reservations()[0].instances()[0].clone();
    (
        instance
            .placement()
            .and_then(|p| p.availability_zone())
            .unwrap_or_default()
            .to_string(),
        instance.instance_type().map(|t| t.as_str().to_string()).unwrap_or_default(),
    )
}

/// Pods of the scenario Running.
fn running(s: &Scenario) -> Vec<Pod> {
    s.pods()
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && p.status.as_ref().and_then(|st| st.phase.as_deref()) == Some("Running"))
        .collect()
}

/// With 2a's offerings refused by EC2, the fleet launches in 2c: the Node is labelled 2c and the
/// type EC2 started after its kubelet registers. A zone or type in the kubelet's `--node-labels`
/// (a value sampled from the Provisioner's 2a and 2c) would be written over the Node's labels
/// when the kubelet registers (`updateDefaultLabels`).
#[test]
fn a_node_launched_in_2c_keeps_its_zone_and_type_after_its_kubelet_registers() {
    use support::fault_proxy::{Fault, FaultProxy, Rule};
    let setup = setup("kubelet-zone");
    let cluster = setup.cluster;
    let proxy = FaultProxy::start(&cluster.env["AWS_ENDPOINT_URL"]);
    let refused = ["t3.large", "t3.xlarge"].map(|t| (t.to_string(), "ap-northeast-2a".to_string()));
    proxy.add(Rule::new("CreateFleet", Fault::InsufficientCapacity(refused.to_vec())));
    let s = Scenario::create(cluster);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let url = proxy.url();
        let mut binary = Binary::spawn(
            cluster,
            &setup.certs,
            &setup.logs,
            None,
            &["--leader-elect", "false"],
            &[("AWS_ENDPOINT_URL", url.as_str())],
        );
        s.scale(1);
        let name = binary.wait_for(&s, "the pod Running on a node", Duration::from_secs(120), || s.running_pod_node());
        let node = s.node(&name).expect("the node");
        assert_eq!(standin(&node, "source"), "user-data");
        let (zone, instance_type) = launched_as(&setup, &node);
        assert_eq!(zone, "ap-northeast-2c", "2a was refused");
        assert_eq!(node.labels()["topology.kubernetes.io/zone"], zone, "{:?}", node.labels());
        assert_eq!(
            node.labels()["node.kubernetes.io/instance-type"],
            instance_type,
            "{:?}",
            node.labels()
        );
        let registered = standin(&node, "node-labels");
        for key in [
            "topology.kubernetes.io/zone",
            "node.kubernetes.io/instance-type",
            "kubernetes.io/arch",
        ] {
            assert!(!registered.contains(key), "the kubelet is given {key}: {registered}");
        }
        assert!(
            registered.contains(&format!("karpenter.sh/provisioner-name={}", s.provisioner)),
            "{registered}"
        );
        drop(binary);
    }));
    s.tear_down(&setup);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// With `aws.enableENILimitedPodDensity` off, 110 pods are planned on a t3.large: its AL2 kubelet
/// must be told so (`--max-pods=110`), or bootstrap.sh applies its ENI table (35) and 60 small
/// pods need more nodes than planned. One node is launched, and all 60 run on it.
#[test]
fn with_eni_limited_density_off_60_small_pods_run_on_the_one_node_planned() {
    let setup = setup("kubelet-max-pods");
    let cluster = setup.cluster;
    let s = Scenario::create_with_template(
        cluster,
        |p| p["spec"]["requirements"][0]["values"] = json!(["t3.large"]),
        |t| t["spec"]["amiFamily"] = json!("AL2"),
    );
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut binary = setup.start_with_env(&[("ENABLE_ENI_LIMITED_POD_DENSITY", "false")]);
        s.request_cpu("10m");
        s.scale(60);
        binary.wait_for(&s, "60 pods Running", Duration::from_secs(300), || {
            (running(&s).len() == 60).then_some(())
        });
        let nodes = s.nodes();
        assert_eq!(
            nodes.len(),
            1,
            "one node for 60 pods: {:?}",
            nodes.iter().map(|n| n.name_any()).collect::<Vec<_>>()
        );
        assert_eq!(setup.launched(&s), 1);
        assert_eq!(standin(&nodes[0], "family"), "AL2");
        assert_eq!(standin(&nodes[0], "max-pods"), "110");
        let capacity = nodes[0].status.as_ref().and_then(|st| st.capacity.clone()).unwrap_or_default();
        assert_eq!(capacity["pods"].0, "110");
        drop(binary);
    }));
    s.tear_down(&setup);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// With no cluster endpoint configured, the binary looks it up (eks:DescribeCluster): AL2023 and
/// Bottlerocket nodes, whose bootstraps cannot look it up themselves, join and run their pods.
#[test]
fn al2023_and_bottlerocket_nodes_join_with_the_endpoint_looked_up() {
    let setup = setup("kubelet-endpoint");
    let cluster = setup.cluster;
    let al2023 = Scenario::create_with_template(cluster, |_| {}, |t| t["spec"]["amiFamily"] = json!("AL2023"));
    let bottlerocket = Scenario::create_with_template(cluster, |_| {}, |t| t["spec"]["amiFamily"] = json!("Bottlerocket"));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut binary = setup.start_with_env(&[("CLUSTER_ENDPOINT", "")]);
        al2023.scale(1);
        bottlerocket.scale(1);
        for (s, family) in [(&al2023, "AL2023"), (&bottlerocket, "Bottlerocket")] {
            let name = binary.wait_for(s, &format!("the {family} pod Running"), Duration::from_secs(120), || {
                s.running_pod_node()
            });
            let node = s.node(&name).expect("the node");
            assert_eq!(standin(&node, "family"), family);
        }
        assert!(binary.log().contains("cluster endpoint from eks:DescribeCluster"));
        drop(binary);
    }));
    al2023.tear_down(&setup);
    bottlerocket.tear_down(&setup);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// A GPU type launched for a pod that asks for no GPU, on a cluster without the device plugin
/// (the node never advertises nvidia.com/gpu): the node is initialised all the same, as only the
/// extended resources its pods asked for are waited on.
#[test]
fn a_gpu_node_for_a_pod_without_gpus_is_initialised_without_its_device_plugin() {
    let setup = setup("kubelet-gpu-init");
    let cluster = setup.cluster;
    let s = Scenario::create_with(cluster, |p| {
        p["spec"]["requirements"][0]["values"] = json!(["g4dn.xlarge"]);
        p["spec"]["labels"]["kubelet.local-cluster/no-device-plugin"] = json!("true");
    });
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut binary = setup.start(None);
        s.scale(1);
        let name = binary.wait_for(&s, "the pod Running on a node", Duration::from_secs(120), || s.running_pod_node());
        binary.wait_for(&s, "the node initialised", Duration::from_secs(60), || {
            let node = s.node(&name)?;
            (node.labels().get("karpenter.sh/initialized").map(String::as_str) == Some("true")).then_some(())
        });
        let node = s.node(&name).expect("the node");
        let capacity = node.status.as_ref().and_then(|st| st.capacity.clone()).unwrap_or_default();
        assert!(
            capacity.get("nvidia.com/gpu").is_none_or(|q| q.0 == "0"),
            "no device plugin, no GPUs advertised: {capacity:?}"
        );
        drop(binary);
    }));
    s.tear_down(&setup);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// While Karpenter runs in the cluster (here: its Lease renewed every 2 s and one of the webhook
/// configurations only it registers), `run` does not start its controllers and says what it found
/// and how to proceed; `--allow-coexistence` starts them anyway; once Karpenter is gone, the
/// waiting binary starts them at its next look.
#[test]
fn the_controllers_wait_while_karpenter_runs_unless_coexistence_is_allowed() {
    let setup = setup("coexistence");
    let cluster = setup.cluster;
    let webhook = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "validation.webhook.karpenter.k8s.aws"},
    });
    kubectl(cluster, &["create", "namespace", "karpenter"], None);
    let lease = |holder: &str| {
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "karpenter-leader-election", "namespace": "karpenter"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
        })
        .to_string()
    };
    kubectl_ok(cluster, &["apply", "-f", "-"], Some(&webhook.to_string()));
    kubectl_ok(cluster, &["apply", "-f", "-"], Some(&lease("karpenter-7d9f-0")));
    // Karpenter's renewals: the Lease written again every 2 s until the test ends.
    let renewing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let renewer = {
        let renewing = renewing.clone();
        std::thread::spawn(move || {
            let mut n = 0;
            while renewing.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                kubectl(cluster, &["apply", "-f", "-"], Some(&lease(&format!("karpenter-7d9f-{n}"))));
                std::thread::sleep(Duration::from_secs(2));
            }
        })
    };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let waiting = setup.start(None);
        wait_for("the refusal naming what was found", Duration::from_secs(60), || {
            let log = waiting.log();
            (log.contains("Karpenter is running in this cluster")
                && log.contains("ValidatingWebhookConfiguration validation.webhook.karpenter.k8s.aws")
                && log.contains("Lease karpenter/karpenter-leader-election renewed by")
                && log.contains("--allow-coexistence"))
            .then_some(())
        });
        assert!(!waiting.log().contains("controllers started"), "{}", waiting.log());
        let allowed = setup.start_with(None, &["--leader-elect", "false", "--allow-coexistence", "true"]);
        wait_for("controllers started with --allow-coexistence", Duration::from_secs(60), || {
            allowed.log().contains("controllers started").then_some(())
        });
        drop(allowed);
        // Karpenter uninstalled: the waiting binary starts at its next look (back-off at most 60 s).
        renewing.store(false, std::sync::atomic::Ordering::Relaxed);
        kubectl_ok(
            cluster,
            &["delete", "validatingwebhookconfiguration", "validation.webhook.karpenter.k8s.aws"],
            None,
        );
        wait_for("controllers started once Karpenter is gone", Duration::from_secs(120), || {
            waiting.log().contains("controllers started").then_some(())
        });
        drop(waiting);
    }));
    renewing.store(false, std::sync::atomic::Ordering::Relaxed);
    let _ = renewer.join();
    kubectl(
        cluster,
        &[
            "delete",
            "validatingwebhookconfiguration",
            "validation.webhook.karpenter.k8s.aws",
            "--ignore-not-found",
        ],
        None,
    );
    kubectl(
        cluster,
        &[
            "delete",
            "lease",
            "karpenter-leader-election",
            "-n",
            "karpenter",
            "--ignore-not-found",
        ],
        None,
    );
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
