//! Least privilege, proven on the real API server: the chart's ServiceAccount, ClusterRole, Role
//! and bindings are applied exactly as rendered, and two replicas of the real `karpenter-rs run`
//! binary run with that ServiceAccount's token and the chart's environment (ports, paths and the
//! emulator's endpoint excepted) against the local cluster and moto. No certificate is mounted:
//! the replicas keep their certificate in the Secret the chart names, and the chart's webhook
//! configurations (pointed at the first replica by URL, with an empty caBundle) only admit the
//! first write-up's Provisioner once a replica has written its CA there. A pending pod with a
//! PodDisruptionBudget follows: one replica leads, a node is launched, the pod bound and the
//! Provisioner's status.resources written; the pod goes, the node is emptied and removed; the
//! leader stops and the other replica takes the Lease. Neither log may mention a forbidden
//! request. The same run with the `create` verb taken off the nodes rule must log "forbidden" and
//! launch no node, so the check can fail.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::helm::{self, documents};
use support::{cluster, fixture, kubectl, kubectl_ok, unique, Cluster, CLUSTER_NAME};

/// The two scenarios each run karpenter-rs binaries that provision for any pending pod: never both at once.
static SERIAL: Mutex<()> = Mutex::new(());

const LEASE: &str = "karpenter-rs-leader-election";

/// The RBAC objects, the webhook configurations and the container environment the chart renders
/// for `fullname` in `namespace`.
struct Rendered {
    rbac: Vec<Value>,
    webhooks: Vec<Value>,
    env: Vec<Value>,
}

fn render(fullname: &str, namespace: &str) -> Rendered {
    let docs = documents(&helm::template(
        "karpenter-rs",
        namespace,
        &[
            "--set",
            &format!("settings.aws.clusterName={CLUSTER_NAME}"),
            "--set",
            &format!("fullnameOverride={fullname}"),
        ],
    ));
    let rbac: Vec<Value> = docs
        .iter()
        .filter(|d| ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"].contains(&d["kind"].as_str().unwrap()))
        .cloned()
        .collect();
    assert_eq!(
        rbac.len(),
        5,
        "the chart renders a ServiceAccount, a ClusterRole, a Role and their bindings"
    );
    let webhooks: Vec<Value> = docs
        .iter()
        .filter(|d| d["kind"] == "MutatingWebhookConfiguration" || d["kind"] == "ValidatingWebhookConfiguration")
        .cloned()
        .collect();
    assert_eq!(webhooks.len(), 2, "the chart renders both webhook configurations");
    let deployment = docs.iter().find(|d| d["kind"] == "Deployment").expect("a Deployment");
    let env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .clone();
    Rendered { rbac, webhooks, env }
}

impl Rendered {
    /// The value the chart gives environment variable `name`.
    fn env(&self, name: &str) -> String {
        let entry = self.env.iter().find(|e| e["name"] == name);
        let value = entry.and_then(|e| e["value"].as_str());
        value.unwrap_or_else(|| panic!("the chart sets no plain {name}")).to_string()
    }

    /// The chart's webhook configurations with the Service swapped for `base_url` (same paths)
    /// and an empty caBundle: only karpenter-rs can make the API server trust the webhook.
    fn webhooks_at(&self, base_url: &str) -> Vec<Value> {
        let mut docs = self.webhooks.clone();
        for doc in &mut docs {
            for webhook in doc["webhooks"].as_array_mut().unwrap() {
                let path = webhook["clientConfig"]["service"]["path"]
                    .as_str()
                    .expect("a service path")
                    .to_string();
                webhook["clientConfig"] = json!({"url": format!("{base_url}{path}"), "caBundle": ""});
            }
        }
        docs
    }
}

/// Everything a scenario created in the cluster, deleted on drop (also when the test fails).
struct Objects<'a> {
    cluster: &'a Cluster,
    namespace: String,
    cluster_scoped: Vec<(String, String)>,
}

impl Drop for Objects<'_> {
    fn drop(&mut self) {
        // Pods first, and wait: a pending pod left in a terminating namespace would have the next
        // scenario's replicas provision for it and be refused its events there.
        kubectl(
            self.cluster,
            &[
                "delete",
                "pods",
                "--all",
                "-n",
                &self.namespace,
                "--grace-period=0",
                "--force",
                "--wait=true",
                "--timeout=30s",
            ],
            None,
        );
        for (kind, name) in self.cluster_scoped.iter().rev() {
            kubectl(self.cluster, &["delete", kind, name, "--ignore-not-found", "--wait=false"], None);
        }
        kubectl(
            self.cluster,
            &["delete", "namespace", &self.namespace, "--ignore-not-found", "--wait=false"],
            None,
        );
    }
}

/// One `karpenter-rs run` process; SIGTERM (then SIGKILL) on drop.
struct Replica {
    child: Option<Child>,
    log: PathBuf,
    identity: String,
    health: std::net::SocketAddr,
    webhook_url: String,
}

impl Replica {
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A kubeconfig that authenticates as the chart's ServiceAccount (a TokenRequest token).
fn service_account_kubeconfig(cluster: &Cluster, namespace: &str, account: &str, dir: &Path) -> PathBuf {
    let token = kubectl_ok(cluster, &["create", "token", account, "-n", namespace, "--duration", "1h"], None);
    let kubeconfig = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {
            "server": cluster.env["CLUSTER_ENDPOINT"],
            "certificate-authority": cluster.env["LOCAL_CLUSTER_CA_FILE"],
        }}],
        "users": [{"name": account, "user": {"token": token.trim()}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": account, "namespace": namespace}}],
        "current-context": "local",
    });
    let path = dir.join("kubeconfig");
    std::fs::write(&path, kubeconfig.to_string()).unwrap();
    path
}

/// Starts `karpenter-rs run` with the chart's environment; only what must differ on a loopback
/// test cluster is overridden, and the ports are 0 (any free port). Once the first replica
/// (`-0`) has started, the chart's webhook configurations point at it, by URL and without caBundle.
fn start_replica(cluster: &Cluster, rendered: &Rendered, namespace: &str, identity: &str, dir: &Path) -> Replica {
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for entry in &rendered.env {
        let name = entry["name"].as_str().unwrap().to_string();
        let value = if let Some(v) = entry["value"].as_str() {
            v.to_string()
        } else {
            match entry["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some("metadata.namespace") => namespace.to_string(),
                Some("metadata.name") => identity.to_string(),
                other => panic!("{name}: unexpected valueFrom {other:?}"),
            }
        };
        env.insert(name, value);
    }
    let cert_dir = dir.join(format!("{identity}-certs"));
    std::fs::create_dir_all(&cert_dir).unwrap();
    let overrides = [
        ("KUBECONFIG", dir.join("kubeconfig").display().to_string()),
        ("BIND_ADDRESS", "127.0.0.1".into()),
        // Any free ports, read back from the start line.
        ("WEBHOOK_PORT", "0".into()),
        ("METRICS_PORT", "0".into()),
        ("HEALTH_PROBE_PORT", "0".into()),
        // An empty directory, as in the chart's pod: the certificate is self-managed. The API
        // server reaches this webhook at https://127.0.0.1:<port>, so the certificate names it too.
        ("CERT_DIR", cert_dir.display().to_string()),
        ("CERT_EXTRA_SAN", "127.0.0.1".into()),
        ("CLUSTER_ENDPOINT", cluster.env["CLUSTER_ENDPOINT"].clone()),
        // AL2023 nodes (the default on 1.33) need the service CIDR; the CA comes from the kube config.
        ("CLUSTER_CIDR", cluster.env["CLUSTER_CIDR"].clone()),
        ("AWS_REGION", cluster.env["AWS_REGION"].clone()),
        ("AWS_ENDPOINT_URL", cluster.env["AWS_ENDPOINT_URL"].clone()),
        ("AWS_ACCESS_KEY_ID", cluster.env["AWS_ACCESS_KEY_ID"].clone()),
        ("AWS_SECRET_ACCESS_KEY", cluster.env["AWS_SECRET_ACCESS_KEY"].clone()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
        ("DEFAULT_INSTANCE_PROFILE", "KarpenterNodeInstanceProfile".into()),
        // Watch, event and status errors are logged at debug.
        ("LOG_LEVEL", "info,karpenter_rs=debug".into()),
    ];
    env.extend(overrides.into_iter().map(|(k, v)| (k.to_string(), v)));
    let log = dir.join(format!("{identity}.log"));
    let file = std::fs::File::create(&log).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_karpenter-rs"))
        .arg("run")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(&env)
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .expect("starting karpenter-rs");
    let addresses = support::process::wait_started(&mut child, &log, Duration::from_secs(30));
    let webhook_url = format!("https://{}", addresses.webhook);
    if identity.ends_with("-0") {
        register_webhook(cluster, rendered, &webhook_url);
    }
    let replica = Replica {
        child: Some(child),
        log,
        identity: identity.to_string(),
        health: addresses.health,
        webhook_url,
    };
    // Ready once it serves the certificate it read from (or wrote into) the Secret.
    wait_for(&format!("{identity} to be ready"), Duration::from_secs(60), || {
        support::process::http_get(replica.health, "/readyz").is_some_and(|(status, _)| status == 200)
    });
    replica
}

/// Applies the chart's webhook configurations pointing at `base_url`, with an empty caBundle.
fn register_webhook(cluster: &Cluster, rendered: &Rendered, base_url: &str) {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": rendered.webhooks_at(base_url)});
    kubectl_ok(
        cluster,
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        Some(&list.to_string()),
    );
}

/// The base64 bodies of the PEM certificates in `pem`, so that encodings can be compared.
fn pem_bodies(pem: &str) -> Vec<String> {
    pem.split("-----BEGIN CERTIFICATE-----")
        .skip(1)
        .filter_map(|rest| rest.split("-----END CERTIFICATE-----").next())
        .map(|body| body.split_whitespace().collect())
        .collect()
}

fn base64_decode(text: &str) -> String {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD.decode(text).expect("base64");
    String::from_utf8(bytes).expect("PEM is text")
}

/// The CA karpenter-rs keeps in the chart's certificate Secret, if it wrote one yet.
fn secret_ca(cluster: &Cluster, rendered: &Rendered, namespace: &str) -> Option<String> {
    let secret = get_json(cluster, &["secret", &rendered.env("CERT_SECRET"), "-n", namespace])?;
    let ca = secret["data"]["ca-cert.pem"].as_str()?;
    pem_bodies(&base64_decode(ca)).into_iter().next()
}

/// True when both configurations point at `base_url` and their first caBundle certificate is
/// the CA of the Secret: karpenter-rs wrote it there (the test never saw that CA).
fn webhook_trusted(cluster: &Cluster, rendered: &Rendered, namespace: &str, base_url: &str) -> bool {
    let Some(ca) = secret_ca(cluster, rendered, namespace) else {
        return false;
    };
    rendered.webhooks.iter().all(|doc| {
        let kind = doc["kind"].as_str().unwrap().to_lowercase();
        let Some(current) = get_json(cluster, &[&kind, doc["metadata"]["name"].as_str().unwrap()]) else {
            return false;
        };
        current["webhooks"].as_array().is_some_and(|webhooks| {
            webhooks.iter().all(|w| {
                let client = &w["clientConfig"];
                client["url"].as_str().is_some_and(|u| u.starts_with(base_url))
                    && client["caBundle"]
                        .as_str()
                        .is_some_and(|b| pem_bodies(&base64_decode(b)).first() == Some(&ca))
            })
        })
    })
}

/// Waits until karpenter-rs has put its CA into the configurations pointing at `replica`. Other
/// test processes on the cluster may take the shipped configuration names over meanwhile: then
/// they are registered again (empty caBundle) and karpenter-rs, which watches them, fills it again.
fn ensure_webhook_trusted(cluster: &Cluster, rendered: &Rendered, namespace: &str, replica: &Replica) {
    for _ in 0..3 {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if webhook_trusted(cluster, rendered, namespace, &replica.webhook_url) {
                return;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        register_webhook(cluster, rendered, &replica.webhook_url);
    }
    panic!(
        "karpenter-rs did not write its CA into the caBundle of both webhook configurations; its log:\n{}",
        replica.log()
    );
}

fn wait_for(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn get_json(cluster: &Cluster, args: &[&str]) -> Option<Value> {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    let out = kubectl(cluster, &all, None);
    out.status.success().then(|| serde_json::from_slice(&out.stdout).unwrap())
}

fn nodes_of(cluster: &Cluster, provisioner: &str) -> Vec<String> {
    let selector = format!("karpenter.sh/provisioner-name={provisioner}");
    let list = get_json(cluster, &["nodes", "-l", &selector]).unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

fn lease_holder(cluster: &Cluster, namespace: &str) -> Option<String> {
    let lease = get_json(cluster, &["lease", LEASE, "-n", namespace])?;
    lease["spec"]["holderIdentity"].as_str().map(str::to_string)
}

/// Applies the chart's RBAC (with `edit` applied to the ClusterRole first), writes the
/// ServiceAccount's kubeconfig into `dir` and names the first write-up's AWSNodeTemplate and
/// Provisioner (cleaned up with the rest).
fn set_up<'a>(cluster: &'a Cluster, dir: &Path, edit: impl Fn(&mut Value)) -> (Objects<'a>, Rendered, String) {
    let namespace = unique("rbac");
    let fullname = namespace.clone();
    let mut objects = Objects {
        cluster,
        namespace: namespace.clone(),
        cluster_scoped: Vec::new(),
    };
    kubectl_ok(cluster, &["create", "namespace", &namespace], None);
    let mut rendered = render(&fullname, &namespace);
    for doc in &mut rendered.rbac {
        if doc["kind"] == "ClusterRole" {
            edit(doc);
        }
        if doc["kind"] == "ClusterRole" || doc["kind"] == "ClusterRoleBinding" {
            objects
                .cluster_scoped
                .push((doc["kind"].as_str().unwrap().to_lowercase(), fullname.clone()));
        }
    }
    let list = json!({"apiVersion": "v1", "kind": "List", "items": rendered.rbac});
    kubectl_ok(cluster, &["apply", "-f", "-"], Some(&list.to_string()));
    service_account_kubeconfig(cluster, &namespace, &fullname, dir);

    let provisioner = unique("rbac");
    objects.cluster_scoped.push(("awsnodetemplate".into(), provisioner.clone()));
    objects.cluster_scoped.push(("provisioner".into(), provisioner.clone()));
    (objects, rendered, provisioner)
}

/// Applies the first write-up's AWSNodeTemplate and Provisioner (unique names, a short
/// ttlSecondsAfterEmpty) through the webhook of `replica`, once karpenter-rs made it trusted.
fn apply_provisioner(cluster: &Cluster, rendered: &Rendered, namespace: &str, replica: &Replica, name: &str) {
    let mut template = fixture("first-writeup/awsnodetemplate.yaml");
    template["metadata"]["name"] = json!(name);
    let mut provisioner = fixture("first-writeup/provisioner.yaml");
    provisioner["metadata"]["name"] = json!(name);
    provisioner["spec"]["providerRef"]["name"] = json!(name);
    provisioner["spec"]["labels"]["nodeType"] = json!(name);
    provisioner["spec"]["ttlSecondsAfterEmpty"] = json!(5);
    // Left to the defaulting webhook.
    provisioner["spec"].as_object_mut().unwrap().remove("ttlSecondsUntilExpired");
    for doc in [template, provisioner] {
        let mut attempt = 0;
        loop {
            attempt += 1;
            ensure_webhook_trusted(cluster, rendered, namespace, replica);
            let out = kubectl(cluster, &["apply", "-f", "-"], Some(&doc.to_string()));
            if out.status.success() {
                break;
            }
            // Another test process may have taken the configurations over just now.
            assert!(
                attempt < 3 && !webhook_trusted(cluster, rendered, namespace, &replica.webhook_url),
                "applying {} {name} through the self-managed webhook failed:\n{}",
                doc["kind"],
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    // The mutating webhook ran: the chart's default is stored.
    let stored = get_json(cluster, &["provisioner", name]).expect("the Provisioner is stored");
    assert_eq!(
        stored["spec"]["ttlSecondsUntilExpired"].to_string(),
        rendered.env("DEFAULT_TTL_SECONDS_UNTIL_EXPIRED"),
        "the defaulting webhook did not run"
    );
}

/// A pod only a node of `provisioner` fits, protected by a PodDisruptionBudget, so the
/// deprovisioning controller's PodDisruptionBudget watch has something to read.
fn create_pending_pod(cluster: &Cluster, namespace: &str, provisioner: &str) {
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": namespace, "labels": {"app": "web"}},
        "spec": {
            "nodeSelector": {"nodeType": provisioner},
            "tolerations": [{"key": "service", "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
            "containers": [{"name": "nginx", "image": "nginx", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
        },
    });
    let pdb = json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}},
    });
    for doc in [pdb, pod] {
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(&doc.to_string()));
    }
}

/// No request was forbidden, except by NamespaceLifecycle: events about pods of other test
/// processes whose namespace is being deleted are refused whatever the RBAC.
fn assert_nothing_forbidden(replicas: &[&Replica]) {
    for r in replicas {
        let log = r.log();
        let forbidden: Vec<&str> = log
            .lines()
            .filter(|l| l.to_lowercase().contains("forbidden") && !l.contains("because it is being terminated"))
            .take(5)
            .collect();
        assert!(
            forbidden.is_empty(),
            "{} ran into RBAC denials:\n{}",
            r.identity,
            forbidden.join("\n")
        );
    }
}

#[test]
fn runs_the_main_path_under_exactly_the_charts_rbac() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = cluster();
    let dir = tempfile::tempdir().unwrap();
    let (objects, rendered, provisioner) = set_up(cluster, dir.path(), |_| {});
    let ns = objects.namespace.clone();
    let mut first = start_replica(cluster, &rendered, &ns, &format!("{ns}-0"), dir.path());
    let mut second = start_replica(cluster, &rendered, &ns, &format!("{ns}-1"), dir.path());
    // 0. the replicas share one Secret and wrote its CA into both configurations' caBundle
    apply_provisioner(cluster, &rendered, &ns, &first, &provisioner);

    // 1. exactly one replica leads
    wait_for("a leader", Duration::from_secs(30), || lease_holder(cluster, &ns).is_some());
    let leader = lease_holder(cluster, &ns).unwrap();
    assert!(leader == first.identity || leader == second.identity, "unexpected holder {leader}");

    // 2. a pending pod gets one node and is bound to it
    create_pending_pod(cluster, &ns, &provisioner);
    let mut node = String::new();
    wait_for("the pod to be bound to a new node", Duration::from_secs(120), || {
        let pod = get_json(cluster, &["pod", "web", "-n", &ns]).unwrap();
        node = pod["spec"]["nodeName"].as_str().unwrap_or_default().to_string();
        !node.is_empty()
    });
    assert_eq!(nodes_of(cluster, &provisioner), [node.clone()], "one node, the pod's");
    // the leader writes the node's capacity into the Provisioner's status (status subresource)
    wait_for("the Provisioner's status.resources", Duration::from_secs(60), || {
        get_json(cluster, &["provisioner", &provisioner]).is_some_and(|p| p["status"]["resources"]["cpu"].is_string())
    });

    // 3. the pod goes; the empty node is removed (ttlSecondsAfterEmpty 5 s) through termination
    kubectl_ok(cluster, &["delete", "pod", "web", "-n", &ns, "--wait=true"], None);
    wait_for("the empty node to be removed", Duration::from_secs(150), || {
        nodes_of(cluster, &provisioner).is_empty()
    });

    // 4. the leader stops; the other replica takes the Lease over
    let (stopping, staying) = if leader == first.identity {
        (&mut first, &second)
    } else {
        (&mut second, &first)
    };
    stopping.stop();
    wait_for("the other replica to lead", Duration::from_secs(60), || {
        lease_holder(cluster, &ns).as_deref() == Some(staying.identity.as_str())
    });

    first.stop();
    second.stop();
    assert_nothing_forbidden(&[&first, &second]);
    // The leader did the work: launch, and termination of the instance through EC2.
    let leader_log = if leader == first.identity { first.log() } else { second.log() };
    for step in ["launched node", "terminated instance", "deleted node"] {
        assert!(leader_log.contains(step), "the leader's log lacks {step:?}");
    }
    drop(objects);
}

#[test]
fn a_missing_rule_shows_up_as_forbidden() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = cluster();
    let dir = tempfile::tempdir().unwrap();
    // The chart's rules with `create` taken off nodes.
    let (objects, rendered, provisioner) = set_up(cluster, dir.path(), |role| {
        let rule = role["rules"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|r| r["resources"] == json!(["nodes"]))
            .expect("the chart has a nodes rule");
        rule["verbs"].as_array_mut().unwrap().retain(|v| v != "create");
    });
    let ns = objects.namespace.clone();
    let mut replica = start_replica(cluster, &rendered, &ns, &format!("{ns}-0"), dir.path());
    apply_provisioner(cluster, &rendered, &ns, &replica, &provisioner);
    create_pending_pod(cluster, &ns, &provisioner);
    wait_for("the denied node creation in the log", Duration::from_secs(120), || {
        replica.log().to_lowercase().contains("forbidden")
    });
    replica.stop();
    assert!(
        nodes_of(cluster, &provisioner).is_empty(),
        "a node was created without the permission"
    );
    let log = replica.log();
    let line = log.lines().find(|l| l.to_lowercase().contains("forbidden")).unwrap();
    assert!(line.contains("nodes"), "the denial names nodes: {line}");
    drop(objects);
}
