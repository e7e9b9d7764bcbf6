//! Leader election against the real kube-apiserver: of two replicas exactly one leads, when it
//! stops the other takes over, and a leader whose connection to the API server turns slow stops
//! leading before the other may take over and writes nothing after (the API server's audit log).

mod support;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use karpenter_rs::controllers::leader::{self, Ended, LeaderConfig};
use kube::Api;
use support::{cluster, unique};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

fn config(name: &str, identity: &str) -> LeaderConfig {
    LeaderConfig {
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(200),
        ..LeaderConfig::new("default", name, identity)
    }
}

async fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn exactly_one_replica_leads_and_the_other_takes_over() {
    let cluster = cluster();
    let client = support::client(cluster).await;
    let api: Api<Lease> = Api::namespaced(client, "default");
    let name = unique("karpenter-rs-leader");

    let (a_tx, a) = watch::channel(false);
    let (b_tx, b) = watch::channel(false);
    let (stop_a, stop_b) = (CancellationToken::new(), CancellationToken::new());
    let task_a = tokio::spawn(leader::run(api.clone(), config(&name, "replica-a"), a_tx, stop_a.clone()));
    let task_b = tokio::spawn(leader::run(api.clone(), config(&name, "replica-b"), b_tx, stop_b.clone()));

    wait_until("one replica leads", || *a.borrow() || *b.borrow()).await;
    // Over a few renewals, never both.
    for _ in 0..40 {
        assert!(!(*a.borrow() && *b.borrow()), "two leaders");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (leader_stop, leader_task, follower) = if *a.borrow() {
        (stop_a, task_a, b.clone())
    } else {
        (stop_b, task_b, a.clone())
    };
    leader_stop.cancel();
    assert_eq!(leader_task.await.unwrap(), Ended::Stopped);
    wait_until("the other replica takes over", || *follower.borrow()).await;

    api.delete(&name, &Default::default()).await.unwrap();
}

/// The audit log's successful writes of Lease `name` from `source`, with when the API server
/// finished each.
fn lease_writes_from(audit_log: &str, name: &str, source: &str) -> Vec<jiff::Timestamp> {
    audit_log
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|e| e["objectRef"]["resource"] == "leases" && e["objectRef"]["name"] == name)
        .filter(|e| matches!(e["verb"].as_str(), Some("create" | "update" | "patch" | "delete")))
        .filter(|e| e["sourceIPs"].as_array().is_some_and(|ips| ips.iter().any(|ip| ip == source)))
        .filter(|e| e["responseStatus"]["code"].as_u64().is_some_and(|c| (200..300).contains(&c)))
        .filter_map(|e| e["stageTimestamp"].as_str()?.parse().ok())
        .collect()
}

#[tokio::test]
async fn a_leader_on_a_slow_connection_stops_before_the_other_takes_over_and_writes_nothing_after() {
    let cluster = cluster();
    let direct = support::client(cluster).await;
    let api: Api<Lease> = Api::namespaced(direct, "default");
    let name = unique("karpenter-rs-slow-leader");
    // Replica a reaches the API server through the proxy, from 127.0.0.2.
    let endpoint = &cluster.env["CLUSTER_ENDPOINT"];
    let upstream: std::net::SocketAddr = endpoint.trim_start_matches("https://").parse().unwrap();
    let latency = support::latency_proxy::Latency::default();
    let source = "127.0.0.2";
    let proxy = support::latency_proxy::start(upstream, source.parse().unwrap(), latency.clone()).await;
    let mut slow_config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(cluster.kubeconfig()).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    slow_config.cluster_url = format!("https://127.0.0.1:{}", proxy.port()).parse().unwrap();
    let slow: Api<Lease> = Api::namespaced(
        kube::Client::try_from(karpenter_rs::kube_client::configure(slow_config)).unwrap(),
        "default",
    );

    let (a_tx, a) = watch::channel(false);
    let (b_tx, b) = watch::channel(false);
    let (stop_a, stop_b) = (CancellationToken::new(), CancellationToken::new());
    let task_a = tokio::spawn(leader::run(slow, config(&name, "replica-a"), a_tx, stop_a.clone()));
    wait_until("replica a leads", || *a.borrow()).await;
    let task_b = tokio::spawn(leader::run(api.clone(), config(&name, "replica-b"), b_tx, stop_b.clone()));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(*a.borrow() && !*b.borrow(), "a keeps leading while its connection is fine");

    // 5 s per chunk: longer than the lease (3 s), so a's renewals reach the API server too late.
    latency.set_both(5_000);
    let slowed = tokio::time::Instant::now();
    let mut a_stopped = None;
    while !*b.borrow() {
        assert!(!(*a.borrow() && *b.borrow()), "two leaders");
        if a_stopped.is_none() && !*a.borrow() {
            a_stopped = Some(slowed.elapsed());
        }
        assert!(slowed.elapsed() < Duration::from_secs(60), "replica b never took over");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!*a.borrow(), "two leaders: a still leads as b takes over");
    let b_leads = slowed.elapsed();
    let a_stopped = a_stopped.expect("a stopped leading before b led");
    eprintln!("a stopped leading {a_stopped:?} after the latency began, b led after {b_leads:?}");
    assert_eq!(task_a.await.unwrap(), Ended::Lost, "a's election ends: the process stops acting");
    let taken_over = api.get(&name).await.unwrap().spec.unwrap();
    assert_eq!(taken_over.holder_identity.as_deref(), Some("replica-b"));
    let acquired = taken_over.acquire_time.unwrap().0;

    // a's last requests reach the API server late (5 s a chunk); then the audit log is flushed (1 s).
    tokio::time::sleep(Duration::from_secs(12)).await;
    let audit_path = std::path::Path::new(cluster.kubeconfig()).parent().unwrap().join("logs/audit.log");
    let audit = std::fs::read_to_string(&audit_path).expect("the local cluster's audit log");
    let writes = lease_writes_from(&audit, &name, source);
    assert!(!writes.is_empty(), "a's writes before the latency are in {}", audit_path.display());
    let late: Vec<_> = writes.iter().filter(|t| **t >= acquired).collect();
    assert!(late.is_empty(), "a wrote the Lease after b acquired it at {acquired}: {late:?}");
    assert!(*b.borrow(), "b still leads");

    stop_b.cancel();
    assert_eq!(task_b.await.unwrap(), Ended::Stopped);
    latency.set_both(0);
    api.delete(&name, &Default::default()).await.unwrap();
}
