//! Support for the end-to-end tests on the real local control plane (tests/cluster/): brings the
//! cluster up once per test binary (or reuses a running one), installs the CRDs from
//! deploy/crds, runs the karpenter-rs webhook in this process with certificates made here,
//! registers it with the configurations the binary ships (`webhook::registration`), and hands
//! out `kubectl` and a `kube::Client`. Every test uses unique object names and cleans up.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

pub mod fault_proxy;
pub mod helm;
pub mod latency_proxy;
pub mod process;

use karpenter_rs::apis::ApiSettings;
use karpenter_rs::certs::{self, Ca};
use karpenter_rs::metrics::Metrics;
use karpenter_rs::webhook::registration::{self, Target};
use karpenter_rs::webhook::{self, WebhookConfig};
use tokio_util::sync::CancellationToken;

/// The cluster name the local cluster's fixtures use.
pub const CLUSTER_NAME: &str = "ssungz-cluster";
/// The Kubernetes version of the local API server, whose AMIs tests/cluster/fixtures.py seeds.
pub const KUBERNETES_VERSION: karpenter_rs::cloudprovider::KubernetesVersion =
    karpenter_rs::cloudprovider::KubernetesVersion { major: 1, minor: 33 };

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Where this test binary's in-process controllers log (`init_controller_log`).
pub fn controller_log_path(cluster: &Cluster) -> Option<std::path::PathBuf> {
    let state = cluster.env.get("LOCAL_CLUSTER_STATE")?;
    let binary = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "tests".to_string());
    Some(std::path::Path::new(state).join("logs").join(format!("controllers-{binary}.log")))
}

/// The last `count` lines of the controllers' log that contain any of `needles`, for a failure
/// message: what the controllers did about the test's objects.
pub fn controller_log_lines(cluster: &Cluster, needles: &[&str], count: usize) -> String {
    let Some(text) = controller_log_path(cluster).and_then(|p| std::fs::read_to_string(p).ok()) else {
        return "(no controller log: TEST_LOG prints it with the output)".to_string();
    };
    let lines: Vec<&str> = text.lines().filter(|l| needles.iter().any(|n| l.contains(n))).collect();
    lines[lines.len().saturating_sub(count)..]
        .iter()
        .map(|l| l.chars().take(400).collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The in-process controllers' log: TEST_LOG=<filter> (e.g. `karpenter_rs=debug`) prints it
/// with the tests' output; otherwise it goes, at debug for this crate, to
/// `<cluster state>/logs/controllers-<test binary>.log`, so that a test that failed on a loaded
/// CI machine can be read afterwards (tests/run.sh keeps the logs directory).
fn init_controller_log(cluster: &Cluster) {
    use tracing_subscriber::EnvFilter;
    if let Ok(filter) = std::env::var("TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
        return;
    }
    let Some(path) = controller_log_path(cluster) else { return };
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let Ok(file) = std::fs::OpenOptions::new().create(true).append(true).open(&path) else {
        return;
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new("info,karpenter_rs=debug"))
        .with_ansi(false)
        .with_writer(std::sync::Mutex::new(file))
        .try_init();
}

/// The directory of the local cluster's state: `LOCAL_CLUSTER_STATE` where set (tests/run.sh runs
/// several clusters side by side, one per lane), else target/local-cluster.
pub fn cluster_state_dir() -> PathBuf {
    match std::env::var_os("LOCAL_CLUSTER_STATE") {
        Some(dir) => repo_root().join(dir),
        None => repo_root().join("target/local-cluster"),
    }
}

/// The running local cluster: the variables of `cluster_state_dir()`/env.
pub struct Cluster {
    pub env: HashMap<String, String>,
}

impl Cluster {
    pub fn kubeconfig(&self) -> &str {
        &self.env["KUBECONFIG"]
    }

    /// The ids tests/cluster/fixtures.py seeded into moto (`LOCAL_CLUSTER_FIXTURES`).
    pub fn fixtures(&self) -> serde_json::Value {
        let path = &self.env["LOCAL_CLUSTER_FIXTURES"];
        serde_json::from_str(&std::fs::read_to_string(path).expect("reading the fixtures file")).expect("fixtures are JSON")
    }

    /// The seeded subnets, zone to subnet id.
    pub fn fixture_subnets(&self) -> std::collections::BTreeMap<String, String> {
        self.fixtures()["subnets"]
            .as_object()
            .expect("fixtures name the subnets")
            .iter()
            .map(|(zone, id)| (zone.clone(), id.as_str().unwrap().to_string()))
            .collect()
    }
}

/// The sum of the samples in Prometheus text `metrics` whose line starts with `prefix` (a metric
/// name and the first labels, e.g. `name{controller="x",`).
pub fn metric_sum(metrics: &str, prefix: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Starts the local cluster with tests/cluster/up.sh (a no-op when it is already up and healthy),
/// once per test binary, and installs the CRDs.
pub fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let up = Command::new("bash")
            .arg(repo_root().join("tests/cluster/up.sh"))
            .stdin(Stdio::null())
            .output()
            .expect("running tests/cluster/up.sh");
        assert!(
            up.status.success(),
            "tests/cluster/up.sh failed:\n{}{}",
            String::from_utf8_lossy(&up.stdout),
            String::from_utf8_lossy(&up.stderr)
        );
        let env_file = cluster_state_dir().join("env");
        let cluster = Cluster { env: read_env(&env_file) };
        let crds = repo_root().join("deploy/crds");
        kubectl_ok(
            &cluster,
            &["apply", "--server-side", "--force-conflicts", "-f", crds.to_str().unwrap()],
            None,
        );
        kubectl_ok(
            &cluster,
            &[
                "wait",
                "--for",
                "condition=established",
                "--timeout=60s",
                "crd/provisioners.karpenter.sh",
                "crd/awsnodetemplates.karpenter.k8s.aws",
            ],
            None,
        );
        cluster
    })
}

/// Parses `export KEY=VALUE` lines (values as written by bash's `printf %q`).
fn read_env(path: &Path) -> HashMap<String, String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    text.lines()
        .filter_map(|l| l.strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.trim_matches('\'').replace("\\ ", " ")))
        .collect()
}

/// Runs kubectl against the local cluster, with `stdin` piped in when given.
pub fn kubectl(cluster: &Cluster, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", cluster.kubeconfig())
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl is installed");
    if let Some(input) = stdin {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    }
    child.wait_with_output().unwrap()
}

/// Runs kubectl and fails the test when it fails; returns stdout.
pub fn kubectl_ok(cluster: &Cluster, args: &[&str], stdin: Option<&str>) -> String {
    let out = kubectl(cluster, args, stdin);
    assert!(
        out.status.success(),
        "kubectl {} failed:\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The karpenter-rs webhook of this test binary, running in this process on its own runtime and
/// registered with the cluster. Tests can stop and restart it (same port, same certificate).
pub struct AdmissionWebhook {
    runtime: tokio::runtime::Runtime,
    port: u16,
    cert_dir: tempfile::TempDir,
    ca: Ca,
    running: Mutex<Option<CancellationToken>>,
}

impl AdmissionWebhook {
    /// Starts the webhook and registers it for both kinds.
    pub fn start(cluster: &Cluster) -> AdmissionWebhook {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let cert_dir = tempfile::tempdir().unwrap();
        let ca = Ca::generate("karpenter-rs e2e CA", Duration::from_secs(24 * 3600)).unwrap();
        let serving = ca.issue(&certs::serving_names(&[]), Duration::from_secs(24 * 3600)).unwrap();
        certs::write(cert_dir.path(), &ca, &serving).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let hook = AdmissionWebhook {
            runtime,
            port,
            cert_dir,
            ca,
            running: Mutex::new(None),
        };
        hook.resume();
        let yaml = registration::to_yaml(&Target::Url(hook.url()), hook.ca.cert_pem().as_bytes());
        kubectl_ok(cluster, &["apply", "--server-side", "--force-conflicts", "-f", "-"], Some(&yaml));
        hook
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// Stops serving: the port closes, as when the process is gone.
    pub fn stop(&self) {
        if let Some(token) = self.running.lock().unwrap().take() {
            token.cancel();
        }
        // Wait until the port is really closed.
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("webhook port {} still open after stop", self.port);
    }

    /// Serves again on the same port.
    pub fn resume(&self) {
        let mut running = self.running.lock().unwrap();
        if running.is_some() {
            return;
        }
        let token = CancellationToken::new();
        let _enter = self.runtime.enter();
        let config = WebhookConfig {
            cert_dir: self.cert_dir.path().to_path_buf(),
            cert_reload_interval: Duration::from_secs(1),
            client_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(90),
            shutdown_grace: Duration::from_secs(1),
            settings: ApiSettings::new(CLUSTER_NAME),
        };
        let std_listener = std::net::TcpListener::bind(("127.0.0.1", self.port)).expect("webhook port is free");
        std_listener.set_nonblocking(true).unwrap();
        let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
        webhook::start(listener, config, Metrics::new(), token.clone()).expect("webhook starts");
        *running = Some(token);
    }
}

/// The tests of one binary share its controllers and run concurrently (tests/run.sh sets
/// `RUST_TEST_THREADS`), each on a namespace and Provisioner of its own. A test whose check
/// depends on the controllers doing nothing else meanwhile holds [`alone`] (and says why); the
/// others hold [`shared`].
static ALONE: std::sync::RwLock<()> = std::sync::RwLock::new(());

thread_local! {
    /// How many [`Shared`] guards this thread holds.
    static SHARED_HELD: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// What [`shared`] returns: the read lock, taken once per thread however deeply scenarios nest
/// (a second read lock behind a waiting [`alone`] would wait for that writer, which waits for
/// the first: a deadlock).
pub struct Shared(#[allow(dead_code)] Option<std::sync::RwLockReadGuard<'static, ()>>);

impl Drop for Shared {
    fn drop(&mut self) {
        SHARED_HELD.with(|held| held.set(held.get() - 1));
    }
}

/// Held by a test that may run beside the others of its binary.
pub fn shared() -> Shared {
    let nested = SHARED_HELD.with(|held| {
        held.set(held.get() + 1);
        held.get() > 1
    });
    Shared((!nested).then(|| ALONE.read().unwrap_or_else(|poisoned| poisoned.into_inner())))
}

/// Held by a test that must run while no other test of its binary does.
pub fn alone() -> std::sync::RwLockWriteGuard<'static, ()> {
    ALONE.write().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A kube client for the local cluster (admin credentials).
pub async fn client(cluster: &Cluster) -> kube::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kubeconfig = kube::config::Kubeconfig::read_from(cluster.kubeconfig()).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
        .await
        .expect("kube config");
    kube::Client::try_from(karpenter_rs::kube_client::configure(config)).expect("kube client")
}

/// Polls `check` every 250 ms until it returns a value; panics naming `what` after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The `items` of a `kubectl get ... -o json` list.
pub fn items<T: serde::de::DeserializeOwned>(json_text: &str) -> Vec<T> {
    serde_json::from_value(serde_json::from_str::<serde_json::Value>(json_text).unwrap()["items"].clone()).unwrap()
}

/// A name no other test run uses: `base-<pid>-<n>`.
pub fn unique(base: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!("{base}-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A YAML manifest under tests/fixtures, as JSON.
pub fn fixture(path: &str) -> serde_json::Value {
    let full = repo_root().join("tests/fixtures").join(path);
    let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("reading {}: {e}", full.display()));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", full.display()))
}

/// The cloud provider settings for the local cluster's moto emulator.
pub fn cloud_config(cluster: &Cluster) -> karpenter_rs::cloudprovider::CloudConfig {
    let env = &cluster.env;
    let mut config = karpenter_rs::cloudprovider::CloudConfig::new(CLUSTER_NAME, env["CLUSTER_ENDPOINT"].clone());
    config.region = Some(env["AWS_REGION"].clone());
    config.endpoint_url = Some(env["AWS_ENDPOINT_URL"].clone());
    config.credentials = Some(karpenter_rs::cloudprovider::StaticCredentials {
        access_key_id: env["AWS_ACCESS_KEY_ID"].clone(),
        secret_access_key: env["AWS_SECRET_ACCESS_KEY"].clone(),
    });
    config.default_instance_profile = Some("KarpenterNodeInstanceProfile".into());
    // What the binary takes from CLUSTER_CIDR and its kube config: AL2023 nodes need both.
    config.cluster_cidr = env.get("CLUSTER_CIDR").cloned();
    config.cluster_ca_bundle = env.get("LOCAL_CLUSTER_CA_FILE").map(|file| {
        use base64::Engine;
        let pem = std::fs::read(file).expect("reading the local cluster's CA");
        base64::engine::general_purpose::STANDARD.encode(pem)
    });
    config
}

/// The provisioning controller of this test binary, running in this process on its own runtime
/// against the local cluster and moto, leading from the start (one replica).
pub struct Controller {
    runtime: tokio::runtime::Runtime,
    shutdown: CancellationToken,
    pub metrics: Metrics,
    /// `http://127.0.0.1:PORT` of the controllers' metrics port (`/metrics`, `/explain/...`).
    pub metrics_url: String,
}

impl Controller {
    /// Starts the provisioning controller alone.
    pub fn start(cluster: &Cluster) -> Controller {
        Self::start_with(cluster, None, cloud_config(cluster))
    }

    /// Runs a future on the controller's runtime.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.runtime.block_on(f)
    }
}

impl Controller {
    /// Passes `controller` (the label of `controller_runtime_reconcile_total`: `provisioner`,
    /// `metric_scraper`, `deprovisioning`, `garbagecollection`, `termination`, `interruption`)
    /// has finished so far, either way.
    pub fn passes(&self, controller: &str) -> u64 {
        ["success", "error"]
            .iter()
            .map(|result| self.metrics.reconcile_total.with_label_values(&[controller, result]).get())
            .sum()
    }

    /// Waits until `controller` has finished `n` passes more than it had: `n` chances to act,
    /// where a test shows that something does not happen. Panics after `timeout`.
    pub fn wait_passes(&self, controller: &str, n: u64, timeout: Duration) {
        let until = self.passes(controller) + n;
        wait_for(&format!("{n} more {controller} passes"), timeout, || {
            (self.passes(controller) >= until).then_some(())
        });
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// The controllers a `Controller::start_all` runs besides provisioning.
pub struct Loops {
    pub termination: karpenter_rs::controllers::termination::TerminationConfig,
    pub deprovisioning: karpenter_rs::controllers::deprovisioning::DeprovisioningConfig,
    pub garbage_collection: karpenter_rs::controllers::garbagecollection::GarbageCollectionConfig,
    /// Off unless a queue name is given.
    pub interruption: karpenter_rs::controllers::interruption::InterruptionConfig,
    /// How long a launched node may take to become Ready before it is replaced.
    pub registration_ttl: std::time::Duration,
}

impl Controller {
    /// Starts the provisioning controller plus termination, deprovisioning, garbage collection
    /// and interruption (when `loops` names a queue), all leading from the start (one replica), sharing one cloud provider.
    pub fn start_all(cluster: &Cluster, loops: Loops) -> Controller {
        Self::start_with(cluster, Some(loops), cloud_config(cluster))
    }

    /// `start_all` with other cloud settings (e.g. the endpoint of a fault proxy in front of moto).
    pub fn start_all_with_cloud(cluster: &Cluster, loops: Loops, cloud: karpenter_rs::cloudprovider::CloudConfig) -> Controller {
        Self::start_with(cluster, Some(loops), cloud)
    }

    /// Provisioning, plus `loops` when given, on a runtime of their own.
    fn start_with(cluster: &Cluster, loops: Option<Loops>, cloud_config: karpenter_rs::cloudprovider::CloudConfig) -> Controller {
        init_controller_log(cluster);
        use karpenter_rs::controllers::provisioning;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let shutdown = CancellationToken::new();
        let metrics = Metrics::new();
        let config = provisioning::ProvisioningConfig {
            cluster_name: CLUSTER_NAME.into(),
            region: cluster.env["AWS_REGION"].clone(),
            registration_ttl: loops
                .as_ref()
                .map_or(std::time::Duration::from_secs(15 * 60), |l| l.registration_ttl),
            // The local API server's own version, as on a real cluster.
            kubernetes_version: None,
            // kwok advertises vpc.amazonaws.com/pod-eni on trunking-compatible types, as the VPC
            // resource controller does on a cluster with security groups for pods.
            node_settings: karpenter_rs::scheduling::NodeSettings {
                enable_pod_eni: true,
                ..Default::default()
            },
            ..Default::default()
        };
        let (token, m) = (shutdown.clone(), metrics.clone());
        let kube_client = runtime.block_on(client(cluster));
        // The metrics port as the binary serves it: /metrics and the leader's /explain.
        let explain = karpenter_rs::controllers::term::TermSlot::default();
        let metrics_url = runtime.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a metrics port");
            let url = format!("http://{}", listener.local_addr().unwrap());
            let router = karpenter_rs::probes::metrics_router(metrics.clone()).merge(karpenter_rs::probes::explain_router(explain.clone()));
            karpenter_rs::probes::serve(listener, router, shutdown.clone());
            url
        });
        runtime.spawn(async move {
            let cloud = karpenter_rs::cloudprovider::aws::AwsCloudProvider::new(cloud_config)
                .await
                .expect("cloud provider");
            let queue = std::sync::Arc::new(cloud.interruption_queue());
            let cloud: std::sync::Arc<dyn karpenter_rs::cloudprovider::CloudProvider> = std::sync::Arc::new(cloud);
            let (_leading_tx, leading) = tokio::sync::watch::channel(true);
            let state = karpenter_rs::controllers::state::Cluster::start(&kube_client, &token, &m.liveness);
            // The binary's wiring, with the loops the test asked for.
            let mut shared = karpenter_rs::controllers::Shared::new(kube_client, cloud, m, state);
            shared.explain = explain;
            let settings = karpenter_rs::controllers::Settings {
                provisioning: config,
                termination: loops.as_ref().map(|l| l.termination.clone()),
                deprovisioning: loops.as_ref().map(|l| l.deprovisioning.clone()),
                garbage_collection: loops.as_ref().map(|l| l.garbage_collection.clone()),
                interruption: loops.map(|l| (l.interruption, queue as std::sync::Arc<dyn karpenter_rs::cloudprovider::queue::Queue>)),
            };
            karpenter_rs::controllers::run_all(shared, settings, leading, token).await;
        });
        Controller {
            runtime,
            shutdown,
            metrics,
            metrics_url,
        }
    }
}

impl AdmissionWebhook {
    /// Registers this webhook under the shipped configuration names again, e.g. after another
    /// test process that registered its own has exited and left them pointing at a closed port.
    pub fn register(&self, cluster: &Cluster) {
        let yaml = registration::to_yaml(&Target::Url(self.url()), self.ca.cert_pem().as_bytes());
        kubectl_ok(cluster, &["apply", "--server-side", "--force-conflicts", "-f", "-"], Some(&yaml));
    }

    /// True when both shipped configurations point at this webhook.
    pub fn is_registered(&self, cluster: &Cluster) -> bool {
        [
            ("mutatingwebhookconfiguration", registration::MUTATING_CONFIGURATION, "/mutate"),
            (
                "validatingwebhookconfiguration",
                registration::VALIDATING_CONFIGURATION,
                "/validate",
            ),
        ]
        .into_iter()
        .all(|(kind, name, path)| {
            let out = kubectl(
                cluster,
                &["get", kind, name, "-o", "jsonpath={.webhooks[0].clientConfig.url}"],
                None,
            );
            String::from_utf8_lossy(&out.stdout) == format!("{}{path}", self.url())
        })
    }
}

/// An EC2 event as EventBridge puts it on an interruption queue.
pub fn ec2_event(source: &str, detail_type: &str, detail: serde_json::Value) -> String {
    serde_json::json!({
        "version": "0", "id": unique("event"), "detail-type": detail_type, "source": source,
        "account": "123456789012", "time": jiff::Timestamp::now().to_string(),
        "region": "ap-northeast-2", "resources": [], "detail": detail
    })
    .to_string()
}

/// Every instance ever launched for `provisioner` (by its `karpenter.sh/provisioner-name` tag),
/// terminated ones included, as EC2 (the emulator) lists them.
pub async fn instances_ever(ec2: &aws_sdk_ec2::Client, provisioner: &str) -> std::collections::BTreeSet<String> {
    let tagged = aws_sdk_ec2::types::Filter::builder()
        .name("tag:karpenter.sh/provisioner-name")
        .values(provisioner)
        .build();
    let out = ec2.describe_instances().filters(tagged).send().await.expect("describing instances");
    out.reservations()
        .iter()
        .flat_map(|r| r.instances())
        .filter_map(|i| i.instance_id().map(str::to_string))
        .collect()
}

/// Messages on the queue at `url`, visible or being handled.
pub async fn queued_messages(sqs: &aws_sdk_sqs::Client, url: &str) -> u64 {
    use aws_sdk_sqs::types::QueueAttributeName;
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .unwrap();
    out.attributes
        .unwrap_or_default()
        .values()
        .filter_map(|v| v.parse::<u64>().ok())
        .sum()
}

/// The first write-up's AWSNodeTemplate, Provisioner and nginx Deployment under names of their
/// own: template `lt-<suffix>`, Provisioner `service-<suffix>` (with `providerRef` and the
/// `nodeType` label pointing at them), namespace `ns-<suffix>` for the Deployment, whose pods
/// select that node type. The caller edits and applies them.
pub struct FirstWriteUp {
    pub template_name: String,
    pub provisioner_name: String,
    pub namespace: String,
    pub node_type: String,
    pub template: serde_json::Value,
    pub provisioner: serde_json::Value,
    pub deployment: serde_json::Value,
}

impl FirstWriteUp {
    pub fn named(suffix: &str) -> FirstWriteUp {
        use serde_json::json;
        let (template_name, provisioner_name, namespace, node_type) = (
            format!("lt-{suffix}"),
            format!("service-{suffix}"),
            format!("ns-{suffix}"),
            format!("service-{suffix}"),
        );
        let mut template = fixture("first-writeup/awsnodetemplate.yaml");
        template["metadata"]["name"] = json!(template_name);
        let mut provisioner = fixture("first-writeup/provisioner.yaml");
        provisioner["metadata"]["name"] = json!(provisioner_name);
        provisioner["spec"]["providerRef"]["name"] = json!(template_name);
        provisioner["spec"]["labels"]["nodeType"] = json!(node_type);
        let mut deployment = fixture("first-writeup/nginx-deployment.yaml");
        deployment["metadata"]["namespace"] = json!(namespace);
        deployment["spec"]["template"]["spec"]["nodeSelector"]["nodeType"] = json!(node_type);
        FirstWriteUp {
            template_name,
            provisioner_name,
            namespace,
            node_type,
            template,
            provisioner,
            deployment,
        }
    }
}

/// The nodes of the Ready pods among `pods` that are not being deleted, one entry per pod.
pub fn ready_on(pods: &[k8s_openapi::api::core::v1::Pod]) -> Vec<String> {
    pods.iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.status
                    .as_ref()
                    .and_then(|st| st.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect()
}

/// Deletes everything a test scenario created: the namespace, the Provisioner's nodes (through
/// the termination controller, or by dropping the finalizer if that does not finish within 90 s),
/// their instances, the Provisioner and the template.
pub fn tear_down_scenario(cluster: &Cluster, controller: &Controller, namespace: &str, provisioner: &str, template: &str) {
    use k8s_openapi::api::core::v1::Node;
    use kube::ResourceExt;
    let nodes = || -> Vec<Node> {
        let selector = format!("karpenter.sh/provisioner-name={provisioner}");
        items(&kubectl_ok(cluster, &["get", "nodes", "-l", &selector, "-o", "json"], None))
    };
    kubectl(cluster, &["delete", "namespace", namespace, "--wait=false"], None);
    kubectl(cluster, &["delete", "provisioner", provisioner, "--wait=false"], None);
    let launched = nodes();
    for node in &launched {
        kubectl(cluster, &["delete", "node", &node.name_any(), "--wait=false"], None);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while !nodes().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_secs(1));
    }
    for node in nodes() {
        let patch = serde_json::json!({"metadata": {"finalizers": null}}).to_string();
        kubectl(cluster, &["patch", "node", &node.name_any(), "--type=merge", "-p", &patch], None);
    }
    use karpenter_rs::cloudprovider::CloudProvider;
    let cloud = controller
        .block_on(karpenter_rs::cloudprovider::aws::AwsCloudProvider::new(cloud_config(cluster)))
        .expect("a cloud provider for moto");
    for node in &launched {
        let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.clone()).unwrap_or_default();
        if let Some(id) = karpenter_rs::cloudprovider::instance_id_from_provider_id(&provider_id) {
            let _ = controller.block_on(cloud.delete(id));
        }
    }
    kubectl(cluster, &["delete", "awsnodetemplate", template, "--wait=false"], None);
}
