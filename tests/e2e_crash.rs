//! Crash safety end to end: the real `karpenter-rs run` binary against the local cluster and the
//! EC2 emulator is made to exit at its crash points (`KARPENTER_RS_CRASH_AT`, src/failpoint.rs:
//! right after a launch before the Node exists, during a drain, after the instance is terminated
//! before the finalizer is released), then started again. Each round must converge: no instance
//! without a Node, no Node stuck with its finalizer, and never more than the one Node the one pod
//! needs. The crash points are the only injected fault; everything else is the real binary, API
//! server and emulator.
//!
//! Every round crashes at each point once; `KARPENTER_RS_CRASH_ROUNDS` (default 20) sets how many
//! rounds run. The counts are printed and must all be 0.

mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_rs::cloudprovider::aws::AwsCloudProvider;
use karpenter_rs::cloudprovider::{instance_id_from_provider_id, CloudProvider};
use karpenter_rs::failpoint::{CRASH_AT_ENV, CRASH_EXIT_CODE};
use kube::ResourceExt;
use serde_json::json;
use support::{cluster, fixture, free_port, kubectl, kubectl_ok, unique, AdmissionWebhook, Cluster};

/// One run of the binary; killed (SIGKILL, a crash too) when dropped.
struct Binary {
    child: Child,
    log: PathBuf,
}

impl Binary {
    fn start(cluster: &Cluster, certs: &std::path::Path, log_dir: &std::path::Path, crash_at: Option<&str>) -> Binary {
        static RUN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = log_dir.join(format!("run-{n:03}-{}.log", crash_at.unwrap_or("normal")));
        let out = std::fs::File::create(&log).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_karpenter-rs"));
        command
            .arg("run")
            .args(["--cluster-name", support::CLUSTER_NAME, "--bind-address", "127.0.0.1"])
            .args(["--webhook-port", &free_port().to_string()])
            .args(["--metrics-port", &free_port().to_string()])
            .args(["--health-probe-port", &free_port().to_string()])
            .args(["--cert-dir", certs.to_str().unwrap()])
            .args(["--default-instance-profile", "KarpenterNodeInstanceProfile"])
            .args(["--leader-elect", "false"])
            .args(["--batch-idle-duration", "200ms", "--batch-max-duration", "1s"])
            .args(["--deprovisioning-interval", "1s"])
            .args(["--gc-interval", "2s", "--gc-grace-period", "5s"])
            .envs(&cluster.env)
            .env_remove(CRASH_AT_ENV)
            .env("LOG_LEVEL", "info,karpenter_rs=debug")
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

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn items<T: serde::de::DeserializeOwned>(json_text: &str) -> Vec<T> {
    serde_json::from_value(serde_json::from_str::<serde_json::Value>(json_text).unwrap()["items"].clone()).unwrap()
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
    fn instances(&self, cloud: &AwsCloudProvider, rt: &tokio::runtime::Runtime) -> Vec<String> {
        rt.block_on(cloud.list())
            .expect("listing instances")
            .into_iter()
            .filter(|i| i.tags.get("karpenter.sh/provisioner-name") == Some(&self.provisioner))
            .filter(|i| i.state == "pending" || i.state == "running")
            .map(|i| i.id)
            .collect()
    }

    /// Leaked instances (running, no Node names them), stuck Nodes (being deleted) and Nodes.
    fn tally(&self, cloud: &AwsCloudProvider, rt: &tokio::runtime::Runtime) -> Tally {
        let nodes = self.nodes();
        let named: Vec<String> = nodes
            .iter()
            .filter_map(|n| n.spec.as_ref()?.provider_id.as_deref())
            .filter_map(instance_id_from_provider_id)
            .map(str::to_string)
            .collect();
        Tally {
            leaked: self.instances(cloud, rt).iter().filter(|i| !named.contains(i)).count(),
            stuck: nodes.iter().filter(|n| n.metadata.deletion_timestamp.is_some()).count(),
            nodes: nodes.len(),
        }
    }

    fn running_pod_node(&self) -> Option<String> {
        self.pods()
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .find_map(|p| p.spec?.node_name)
    }

    fn clean_up(&self) {
        kubectl(self.cluster, &["delete", "namespace", &self.namespace, "--wait=false"], None);
        kubectl(self.cluster, &["delete", "provisioner", &self.provisioner, "--wait=false"], None);
        kubectl(self.cluster, &["delete", "awsnodetemplate", &self.template, "--wait=false"], None);
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Tally {
    leaked: usize,
    stuck: usize,
    nodes: usize,
}

fn wait_for<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
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

#[test]
fn crashes_at_every_point_converge_without_leaks_stuck_nodes_or_double_launches() {
    let cluster = cluster();
    let _webhook = AdmissionWebhook::start(cluster);
    let rounds: u32 = std::env::var("KARPENTER_RS_CRASH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let work = tempfile::tempdir().unwrap();
    let certs = work.path().join("certs");
    let made = Command::new(env!("CARGO_BIN_EXE_karpenter-rs"))
        .args(["certs", "--out-dir", certs.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    // Logs of every run are kept for a failure's message; under target/ so CI keeps them too.
    let logs = support::repo_root().join("target/e2e-crash-logs");
    let _ = std::fs::remove_dir_all(&logs);
    std::fs::create_dir_all(&logs).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cloud = rt.block_on(AwsCloudProvider::new(support::cloud_config(cluster))).unwrap();

    let s = Scenario::create(cluster);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut totals = Tally::default();
        let mut double_launches = 0;
        for round in 1..=rounds {
            // 1. A pending pod; the binary exits right after launching its instance.
            s.scale(1);
            Binary::start(cluster, &certs, &logs, Some("after-launch")).expect_crash("after-launch", Duration::from_secs(90));

            // 2. Restarted, it launches again, binds the pod, and collects the first instance.
            let normal = Binary::start(cluster, &certs, &logs, None);
            let node = wait_for("the pod Running on a node", Duration::from_secs(90), || s.running_pod_node());
            let settled = settle(|| s.tally(&cloud, &rt), |t| t.leaked == 0 && t.stuck == 0 && t.nodes == 1);
            totals.leaked += settled.leaked;
            totals.stuck += settled.stuck;
            double_launches += settled.nodes.saturating_sub(1);
            drop(normal);

            // 3. The node is deleted; the binary exits in the middle of draining it.
            kubectl_ok(cluster, &["delete", "node", &node, "--wait=false"], None);
            Binary::start(cluster, &certs, &logs, Some("during-drain")).expect_crash("during-drain", Duration::from_secs(60));

            // 4. No workload left to place; the next run terminates the instance and exits before
            //    releasing the finalizer.
            s.scale(0);
            wait_for("the pods to be gone", Duration::from_secs(60), || s.pods().is_empty().then_some(()));
            Binary::start(cluster, &certs, &logs, Some("after-terminate")).expect_crash("after-terminate", Duration::from_secs(60));

            // 5. Restarted, it releases the node; whatever was launched meanwhile is cleaned up.
            let normal = Binary::start(cluster, &certs, &logs, None);
            for extra in s.nodes() {
                kubectl(cluster, &["delete", "node", &extra.name_any(), "--wait=false"], None);
            }
            let end = settle(|| s.tally(&cloud, &rt), |t| *t == Tally::default());
            drop(normal);
            totals.leaked += end.leaked;
            totals.stuck += end.stuck;
            eprintln!("round {round}/{rounds}: after launch {settled:?}, at the end {end:?}");
        }
        println!(
            "crash safety: {rounds} rounds x 3 crash points: leaked instances {}, stuck nodes {}, double launches {}",
            totals.leaked, totals.stuck, double_launches
        );
        assert_eq!(
            (totals.leaked, totals.stuck, double_launches),
            (0, 0, 0),
            "leaked instances, stuck nodes and double launches after the rounds (logs in {})",
            logs.display()
        );
    }));
    // Whatever happened, stop what the rounds left: nodes released, instances terminated.
    let normal = Binary::start(cluster, &certs, &logs, None);
    s.scale(0);
    for node in s.nodes() {
        kubectl(cluster, &["delete", "node", &node.name_any(), "--wait=false"], None);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while !s.nodes().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_secs(1));
    }
    drop(normal);
    for id in s.instances(&cloud, &rt) {
        let _ = rt.block_on(cloud.delete(&id));
    }
    s.clean_up();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
