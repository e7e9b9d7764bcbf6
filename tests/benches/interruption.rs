//! Benchmark of interruption handling: how many messages per second the interruption controller
//! (`controllers::interruption::run`, the real loop) takes off a queue of 100, 1,000 and 10,000
//! messages on moto's SQS, on the local cluster (tests/cluster, brought up if it is not).
//!
//! The messages are a mix as a busy account's EventBridge rules send them: state changes, spot
//! interruption warnings and scheduled changes for instances that are not this cluster's (the
//! common case: one queue per cluster, EventBridge sends every instance of the account), 10% rebalance
//! recommendations for nodes of ours (an event on the Node, the API call the handling makes) and
//! 5% that do not parse. Node deletions are left out on purpose: what they cost is the drain,
//! which the end-to-end tests measure.
//!
//! Baseline from the same run and queue: a bare loop of the same `ReceiveMessage` (10 messages)
//! and one `DeleteMessage` per message, 10 at a time, doing nothing else: the most the queue
//! gives. Each side drains a queue of its own filled alike; the 10,000-message queue (slow to fill
//! on moto) is filled once and each side is timed over a window of it, at about the same depth.
//! The controller's rate is reported as a ratio of the bare loop's.
//!
//! moto's SQS slows down with the depth of the queue (each receive and delete looks through all of
//! it), so each drain is timed over at most 60 s and the rate is what was deleted in that time.
//!
//! Run: `cargo bench --bench interruption` (about 8 minutes). Results:
//! tests/benches/results/interruption.md. Under `cargo test` (no `--bench`) it runs the
//! 100-message case once and checks every message was handled, so it cannot rot.

#[path = "../support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use k8s_openapi::api::core::v1::Node;
use karpenter_rs::cloudprovider::aws::AwsCloudProvider;
use karpenter_rs::cloudprovider::queue::Queue;
use karpenter_rs::cloudprovider::CloudProvider;
use karpenter_rs::controllers::interruption::{self, InterruptionConfig};
use karpenter_rs::controllers::provisioning;
use karpenter_rs::controllers::state::Cluster;
use karpenter_rs::metrics::Metrics;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::Api;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Nodes of ours the rebalance recommendations name.
const OUR_NODES: usize = 20;
const BENCH_LABEL: &str = "e2e.karpenter-rs/bench";

fn event(detail_type: &str, source: &str, detail: serde_json::Value) -> String {
    support::ec2_event(source, detail_type, detail)
}

/// The i-th message of the mix.
fn message(i: usize) -> String {
    let foreign = format!("i-{:017x}", 0xf000_0000_0000u64 + i as u64);
    match i % 20 {
        0 | 1 => event(
            "EC2 Instance Rebalance Recommendation",
            "aws.ec2",
            json!({"instance-id": our_instance(i % OUR_NODES)}),
        ),
        2 => "not an event".to_string(),
        3..=8 => event(
            "EC2 Spot Instance Interruption Warning",
            "aws.ec2",
            json!({"instance-id": foreign, "instance-action": "terminate"}),
        ),
        9..=11 => event(
            "AWS Health Event",
            "aws.health",
            json!({"service": "EC2", "eventTypeCategory": "scheduledChange",
                   "affectedEntities": [{"entityValue": foreign}]}),
        ),
        _ => event(
            "EC2 Instance State-change Notification",
            "aws.ec2",
            json!({"instance-id": foreign, "state": "terminated"}),
        ),
    }
}

fn our_instance(i: usize) -> String {
    format!("i-{:017x}", 0xbe00_0000_0000u64 + i as u64)
}

/// Puts `n` messages of the mix on the queue, 10 per `SendMessageBatch`.
async fn fill(sqs: &aws_sdk_sqs::Client, url: &str, n: usize) {
    use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
    let batches = (0..n).collect::<Vec<_>>();
    for chunk in batches.chunks(10) {
        let entries = chunk
            .iter()
            .map(|i| {
                SendMessageBatchRequestEntry::builder()
                    .id(format!("m{i}"))
                    .message_body(message(*i))
                    .build()
                    .unwrap()
            })
            .collect();
        sqs.send_message_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await
            .unwrap();
    }
}

async fn new_queue(sqs: &aws_sdk_sqs::Client, name: &str) -> String {
    sqs.create_queue().queue_name(name).send().await.unwrap().queue_url.unwrap()
}

/// Longest a drain is timed: moto's SQS slows down with the queue's depth (each receive and
/// delete looks through the whole queue), so a 10,000-message queue is measured over this window.
const WINDOW: Duration = Duration::from_secs(60);
/// From this many messages on, one queue is shared (see `main`).
const SHARED_FROM: usize = 5000;

/// The baseline: receive and delete, nothing else, until `n` messages are gone or the window
/// ends; the messages deleted and the time taken.
async fn drain_bare(queue: &dyn Queue, url: &str, n: usize) -> (u64, Duration) {
    let started = Instant::now();
    let mut deleted = 0;
    while deleted < n as u64 && started.elapsed() < WINDOW {
        let batch = queue.receive(url).await.unwrap();
        let results = join_all(batch.iter().map(|m| queue.delete(url, &m.receipt_handle))).await;
        deleted += results.into_iter().filter(Result::is_ok).count() as u64;
    }
    (deleted, started.elapsed())
}

/// Our nodes, as Node objects with providerIDs (no kubelet: nothing else acts on them here).
async fn create_nodes(client: &kube::Client) {
    let api: Api<Node> = Api::all(client.clone());
    for i in 0..OUR_NODES {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": format!("bench-interruption-{i}"),
                         "labels": {"karpenter.sh/provisioner-name": "bench", BENCH_LABEL: "interruption"}},
            "spec": {"providerID": format!("aws:///ap-northeast-2a/{}", our_instance(i))}
        }))
        .unwrap();
        let _ = api.create(&PostParams::default(), &node).await;
    }
}

async fn delete_nodes(client: &kube::Client) {
    let api: Api<Node> = Api::all(client.clone());
    let _ = api
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(&format!("{BENCH_LABEL}=interruption")),
        )
        .await;
}

/// The controller, run until `n` messages are deleted or the window ends; the messages it
/// deleted and the time taken.
async fn drain_controller(ctx: Arc<interruption::Context>, metrics: &Metrics, n: usize) -> (u64, Duration) {
    let deleted = || metrics.interruption_deleted_messages.get();
    let before = deleted();
    let shutdown = CancellationToken::new();
    let (_leading_tx, leading) = tokio::sync::watch::channel(true);
    let started = Instant::now();
    let run = tokio::spawn(interruption::run(ctx, leading, shutdown.clone()));
    while deleted() - before < n as u64 && started.elapsed() < WINDOW {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let result = (deleted() - before, started.elapsed());
    shutdown.cancel();
    let _ = run.await;
    result
}

fn main() {
    let benchmarking = std::env::args().any(|a| a == "--bench");
    let sizes: Vec<usize> = if benchmarking { vec![100, 1000, 10000] } else { vec![100] };
    let cluster = support::cluster();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!("RESULT | queued | bare: deleted | bare msg/s | controller: deleted | controller msg/s | controller / bare |");
    rt.block_on(async {
        let client = support::client(cluster).await;
        let cloud = AwsCloudProvider::new(support::cloud_config(cluster)).await.unwrap();
        let sqs = cloud.sqs().clone();
        let queue = Arc::new(cloud.interruption_queue());
        let cloud: Arc<dyn CloudProvider> = Arc::new(cloud);
        create_nodes(&client).await;
        let shutdown = CancellationToken::new();
        let metrics = Metrics::new();
        let state = Cluster::start(&client, &shutdown, &metrics.liveness);
        state.ready().await.unwrap();
        let parts = karpenter_rs::controllers::Shared::new(client.clone(), cloud.clone(), metrics.clone(), state.clone());
        let provisioning = provisioning::Context::new(&parts, Default::default());
        for n in sizes {
            // Up to SHARED_FROM messages, each side drains a queue of its own, filled alike. A
            // deeper queue is filled once (moto's fill slows down with the depth too) and each side
            // gets a window of it, the bare loop first: both then run at about the same depth,
            // since neither gets through more than a small part of it.
            let shared = n >= SHARED_FROM;
            let bare_url = new_queue(&sqs, &support::unique("bench-bare")).await;
            fill(&sqs, &bare_url, n).await;
            let bare = drain_bare(queue.as_ref(), &bare_url, if shared { n / 2 } else { n }).await;
            let (name, url) = if shared {
                let name = bare_url.rsplit('/').next().unwrap_or_default().to_string();
                (name, bare_url.clone())
            } else {
                let name = support::unique("bench-controller");
                let url = new_queue(&sqs, &name).await;
                fill(&sqs, &url, n).await;
                (name, url)
            };
            let ctx = interruption::Context::new(
                &parts,
                queue.clone(),
                InterruptionConfig {
                    queue_name: name,
                    ..Default::default()
                },
                provisioning.clone(),
            );
            let handled = drain_controller(ctx, &metrics, if shared { n - n / 2 } else { n }).await;
            for u in [&bare_url, &url] {
                let _ = sqs.delete_queue().queue_url(u.as_str()).send().await;
            }
            let rate = |(count, took): (u64, Duration)| count as f64 / took.as_secs_f64();
            eprintln!("{n} messages: bare {bare:?}, controller {handled:?} (deleted, time)");
            if !benchmarking {
                assert_eq!(handled.0, n as u64, "the controller handled every message");
            }
            println!(
                "RESULT | {n} | {} | {:.0} | {} | {:.0} | {:.2} |",
                bare.0,
                rate(bare),
                handled.0,
                rate(handled),
                rate(handled) / rate(bare)
            );
        }
        let unknown = metrics.interruption_received_messages.with_label_values(&["unknown"]).get();
        assert!(unknown > 0, "the messages that do not parse were counted");
        shutdown.cancel();
        delete_nodes(&client).await;
    });
}
