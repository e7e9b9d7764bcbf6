//! Leader election against the real kube-apiserver: of two replicas exactly one leads, and when
//! it stops, the other takes over.

mod support;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use karpenter_rs::controllers::leader::{self, LeaderConfig};
use kube::Api;
use support::{cluster, unique};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

fn config(name: &str, identity: &str) -> LeaderConfig {
    LeaderConfig {
        namespace: "default".into(),
        name: name.into(),
        identity: identity.into(),
        lease_duration: Duration::from_secs(3),
        retry_period: Duration::from_millis(200),
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
    leader_task.await.unwrap();
    wait_until("the other replica takes over", || *follower.borrow()).await;

    api.delete(&name, &Default::default()).await.unwrap();
}
