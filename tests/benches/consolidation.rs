//! Benchmark of consolidation's decision (`deprovisioning::consolidation`), pure and in memory,
//! on a fragmented cluster of 100, 1,000 and 5,000 nodes.
//!
//! The cluster: the scheduling bench's catalogue, Provisioner (with `consolidation.enabled`) and
//! pod shape (tests/benches/fixture.rs). It grows the way clusters do, in bursts: pods arrive in
//! batches of 8, and each batch is placed by `scheduling::simulate` on a node of its own (the
//! cheapest type that holds the batch). Then a random 70% of the pods are removed (fixed seed):
//! what is left is the fragmented cluster a scale-down leaves behind.
//!
//! Measured, per size:
//! - *evaluation*: one full evaluation as a deprovisioning pass runs it: every node's candidacy
//!   (`consolidation::candidate`), then `consolidation::choose` (empty, multi-node, single-node);
//!   median of 3 (1 at 5,000 nodes). The first evaluation finds the empty nodes (cheap); the one
//!   after them, with no empty node left, is the multi-node search, the expensive case; and the
//!   slowest of all the evaluations while converging is reported too;
//! - *converged*: the chosen command applied again and again (nodes removed, a replacement added,
//!   the moved pods placed where the simulation puts them) until the evaluation finds nothing,
//!   and the cluster's $/h then, beside the scheduling bench's lower bound for the pods left
//!   (max of Σ cpu × cheapest $/vCPU and Σ memory × cheapest $/GiB): no set of nodes holding them
//!   costs less. A baseline from the same run: the $/h of `simulate` placing every remaining pod
//!   afresh onto new nodes (what a cluster rebuilt from scratch would cost).
//!
//! - *explain*: `karpenter-rs explain node` and `explain pod` (`explain::Question::answer`) for 20
//!   nodes and 20 pods spread over the fragmented cluster, median and slowest, beside the first
//!   evaluation as the baseline from the same run (results: tests/benches/results/explain.md).
//!
//! Run: `cargo bench --bench consolidation` (about 10 minutes; `CONSOLIDATION_BENCH_SIZES=1000`
//! for one size, `CONSOLIDATION_BENCH_EXPLAIN_ONLY=1` for the explain figures alone). Results:
//! tests/benches/results/consolidation.md. Under `cargo test` (no `--bench`) it runs the
//! 100-node case once and checks that consolidating never raises the cost, so it cannot rot.

mod fixture;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fixture::{allowed, catalogue, lower_bound, provisioner, Rng, Variant};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_rs::apis::v1alpha5::labels::INSTANCE_TYPE_LABEL;
use karpenter_rs::apis::v1alpha5::{Consolidation, Provisioner};
use karpenter_rs::controllers::deprovisioning::consolidation::{self, Action, Candidate, Choice, NodeView};
use karpenter_rs::scheduling::resources::pod_requests;
use karpenter_rs::scheduling::{simulate, ExistingNode, InstanceType, NodeRequest, PodKey, ProvisionerInput, Resources, SimulationInput};
use serde_json::json;

const BATCH: usize = 8;
const REMOVED: f64 = 0.7;

/// The bench Provisioner with consolidation on.
fn consolidating() -> Provisioner {
    let mut p = provisioner();
    p.spec.consolidation = Some(Consolidation { enabled: Some(true) });
    p
}

/// A node of the cluster: the Node object, its instance type and price, and its pods.
struct Member {
    node: Node,
    instance_type: Arc<InstanceType>,
    price: f64,
    pods: Vec<Arc<Pod>>,
}

struct Cluster {
    provisioner: Provisioner,
    types: Vec<Arc<InstanceType>>,
    members: Vec<Member>,
    next: usize,
}

fn node_object(name: &str, it: &InstanceType, zone: &str, capacity_type: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "creationTimestamp": "2023-06-01T00:00:00Z".parse::<Timestamp>().unwrap().to_string(),
            "labels": {
                "karpenter.sh/provisioner-name": "default",
                "karpenter.sh/initialized": "true",
                "node.kubernetes.io/instance-type": it.name,
                "topology.kubernetes.io/zone": zone,
                "karpenter.sh/capacity-type": capacity_type,
                "kubernetes.io/hostname": name,
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
            },
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .expect("bench node decodes")
}

fn bind(mut pod: Pod, node: &str) -> Pod {
    pod.spec.as_mut().expect("bench pods have a spec").node_name = Some(node.to_string());
    pod.status = Some(
        serde_json::from_value(json!({"phase": "Running", "startTime": "2023-06-01T00:00:00Z".parse::<Timestamp>().unwrap().to_string()}))
            .expect("status decodes"),
    );
    pod
}

fn unbind(pod: &Pod) -> Pod {
    let mut pod = pod.clone();
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = None;
    }
    pod.status = None;
    pod
}

impl Cluster {
    /// `nodes` nodes grown from batches of pods, then 70% of the pods removed.
    fn fragmented(nodes: usize) -> Cluster {
        let mut cluster = Cluster {
            provisioner: consolidating(),
            types: catalogue(),
            members: Vec::new(),
            next: 0,
        };
        let pods = fixture::pods(nodes * BATCH, Variant::Plain);
        for batch in pods.chunks(BATCH) {
            let plan = simulate(&SimulationInput {
                pods: batch.iter().cloned().map(Arc::new).collect(),
                provisioners: cluster.provisioner_input(),
                ..Default::default()
            });
            for request in &plan.new_nodes {
                let placed: Vec<Pod> = batch.iter().filter(|p| request.pods.contains(&PodKey::of(p))).cloned().collect();
                cluster.launch(request, placed);
            }
        }
        let mut rng = Rng(0xC0_501D);
        for member in &mut cluster.members {
            member.pods.retain(|_| (rng.next() % 1000) as f64 >= REMOVED * 1000.0);
        }
        cluster
    }

    fn provisioner_input(&self) -> Vec<ProvisionerInput> {
        vec![ProvisionerInput {
            provisioner: self.provisioner.clone(),
            instance_types: self.types.clone(),
        }]
    }

    /// Adds a node for `request` (its cheapest offering) holding `pods`.
    fn launch(&mut self, request: &NodeRequest, pods: Vec<Pod>) -> String {
        let (it, offering) = request.cheapest().expect("a planned node has an offering");
        let it = self.types.iter().find(|t| t.name == it.name).cloned().expect("from the catalogue");
        self.next += 1;
        let name = format!("node-{:05}", self.next);
        let node = node_object(&name, &it, &offering.zone, &offering.capacity_type);
        let price = offering.price;
        let pods = pods.into_iter().map(|p| Arc::new(bind(p, &name))).collect();
        self.members.push(Member {
            node,
            instance_type: it,
            price,
            pods,
        });
        name
    }

    fn cost(&self) -> f64 {
        self.members.iter().map(|m| m.price).sum()
    }

    fn pods(&self) -> Vec<Pod> {
        self.members.iter().flat_map(|m| m.pods.iter().map(|p| unbind(p))).collect()
    }

    /// The simulation's view: every node with its pods, nothing pending.
    fn input(&self) -> SimulationInput {
        SimulationInput {
            pods: Vec::new(),
            provisioners: self.provisioner_input(),
            nodes: self
                .members
                .iter()
                .map(|m| {
                    let mut e = ExistingNode::from_node(&m.node, m.pods.clone());
                    e.allocatable = m.instance_type.allocatable();
                    e.capacity = m.instance_type.capacity.clone();
                    e
                })
                .collect(),
            ..Default::default()
        }
    }

    fn candidates(&self) -> Vec<Candidate> {
        let now = "2023-06-02T00:00:00Z".parse::<Timestamp>().unwrap();
        let mut out: Vec<Candidate> = self
            .members
            .iter()
            .filter_map(|m| {
                let view = NodeView {
                    node: &m.node,
                    pods: &m.pods,
                    provisioner: Some(&self.provisioner),
                    instance_type: m
                        .node
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(INSTANCE_TYPE_LABEL))
                        .and_then(|name| self.types.iter().find(|t| t.name == *name))
                        .map(|t| &**t),
                    nominated: false,
                    resuming: false,
                };
                consolidation::candidate(view, &[], &unbind, now).ok()
            })
            .collect();
        consolidation::sort_candidates(&mut out);
        out
    }

    /// One full evaluation: candidacy, then the three methods.
    fn evaluate(&self) -> Choice {
        let input = self.input();
        let candidates = self.candidates();
        consolidation::choose(&input, &candidates, &|| false, &|| false).choice
    }

    /// Applies `choice`; false when there was nothing to do.
    fn apply(&mut self, choice: Choice) -> bool {
        let (removed, replacement) = match choice {
            Choice::Nothing { .. } => return false,
            Choice::Empty(names) => (names, None),
            Choice::Command { command, .. } => match command.action {
                Action::Delete => (command.nodes, None),
                Action::Replace(request) => (command.nodes, Some(*request)),
            },
        };
        let mut moved = Vec::new();
        self.members.retain_mut(|m| {
            let name = m.node.metadata.name.as_deref().unwrap_or_default();
            if removed.iter().any(|r| r == name) {
                moved.extend(m.pods.drain(..).map(|p| unbind(&p)));
                false
            } else {
                true
            }
        });
        if let Some(request) = replacement {
            self.launch(&request, Vec::new());
        }
        if moved.is_empty() {
            return true;
        }
        let mut input = self.input();
        input.pods = moved.iter().cloned().map(Arc::new).collect();
        let plan = simulate(&input);
        assert!(
            plan.new_nodes.is_empty() && plan.unschedulable.is_empty(),
            "a validated command's pods fit the remaining nodes"
        );
        let by_key: HashMap<PodKey, Pod> = moved.into_iter().map(|p| (PodKey::of(&p), p)).collect();
        for (key, node) in plan.existing_assignments {
            let member = self
                .members
                .iter_mut()
                .find(|m| m.node.metadata.name.as_deref() == Some(node.as_str()))
                .expect("assigned to a node of the cluster");
            member.pods.push(Arc::new(bind(by_key[&key].clone(), &node)));
        }
        true
    }

    /// What the remaining pods would cost on nodes planned from scratch.
    fn rebuilt_cost(&self) -> f64 {
        let plan = simulate(&SimulationInput {
            pods: self.pods().into_iter().map(Arc::new).collect(),
            provisioners: self.provisioner_input(),
            ..Default::default()
        });
        plan.new_nodes.iter().map(|n| n.cheapest().map_or(0.0, |(_, o)| o.price)).sum()
    }

    fn lower_bound(&self) -> f64 {
        let mut total = Resources::zero();
        for p in self.members.iter().flat_map(|m| m.pods.iter()) {
            total.add(&pod_requests(p));
        }
        lower_bound(&total, &allowed(&self.types))
    }
}

fn describe(choice: &Choice) -> String {
    match choice {
        Choice::Empty(names) => format!("empty: delete {}", names.len()),
        Choice::Command { command, multi } => format!(
            "{}: {} {} node(s)",
            if *multi { "multi-node" } else { "single-node" },
            command.action_name(),
            command.nodes.len()
        ),
        Choice::Nothing { .. } => "nothing".to_string(),
    }
}

/// The median time of `runs` evaluations of `cluster`, and the last choice.
fn time_evaluation(cluster: &Cluster, runs: usize) -> (Duration, Choice) {
    let mut times: Vec<Duration> = Vec::new();
    let mut last = None;
    for _ in 0..runs {
        let t = Instant::now();
        let choice = cluster.evaluate();
        times.push(t.elapsed());
        last = Some(choice);
    }
    times.sort();
    (times[times.len() / 2], last.expect("ran at least once"))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Runs `f` on `cluster` as explain sees it: its `World` (the view's nodes, its pods, the
/// simulation's input), the nodes and the pods.
fn with_world<R>(
    cluster: &Cluster,
    f: impl FnOnce(&karpenter_rs::explain::World<'_>, &[karpenter_rs::controllers::state::StateNode], &[Arc<Pod>]) -> R,
) -> R {
    use karpenter_rs::controllers::state::StateNode;
    use karpenter_rs::explain::World;
    let nodes: Vec<StateNode> = cluster
        .members
        .iter()
        .map(|m| StateNode {
            node: Arc::new(m.node.clone()),
            pods: m.pods.clone(),
            nominated: false,
            instance_type: Some(m.instance_type.clone()),
        })
        .collect();
    let pods: Vec<Arc<Pod>> = cluster.members.iter().flat_map(|m| m.pods.iter().cloned()).collect();
    let provisioners = [Arc::new(cluster.provisioner.clone())];
    let input = cluster.input();
    let world = World {
        nodes: &nodes,
        provisioners: &provisioners,
        pods: &pods,
        pdbs: &[],
        input: &input,
        unavailable: &[],
        prepare: &unbind,
        nomination: jiff::SignedDuration::from_secs(20),
        drift_enabled: true,
        now: "2023-06-02T00:00:00Z".parse::<Timestamp>().unwrap(),
    };
    f(&world, &nodes, &pods)
}

/// `karpenter-rs explain` on `cluster` (`explain::Question::answer`, what the controller's
/// `/explain` and the CLI run once they hold the view): `node` for up to `count` nodes and `pod`
/// for as many pods, spread over the cluster. Median and slowest of each, in the same units as the
/// evaluation beside them.
fn time_explain(cluster: &Cluster, count: usize) -> [Duration; 4] {
    use karpenter_rs::explain::{Explanation, Question};
    with_world(cluster, |world, nodes, pods| {
        let spread = |len: usize| (0..count.min(len)).map(move |i| i * len / count.min(len).max(1));
        let time = |questions: Vec<Question>| {
            let mut times: Vec<Duration> = questions
                .iter()
                .map(|q| {
                    let t = Instant::now();
                    let answer = q.answer(world).expect("every node and pod of the cluster is explained");
                    let took = t.elapsed();
                    match answer {
                        Explanation::Node(n) => assert!(!n.methods.is_empty()),
                        Explanation::Pod(p) => assert!(!p.summary.is_empty()),
                    }
                    took
                })
                .collect();
            times.sort();
            (times[times.len() / 2], times[times.len() - 1])
        };
        let node_questions = spread(nodes.len()).map(|i| Question::Node(nodes[i].name().to_string())).collect();
        let pod_questions = spread(pods.len())
            .map(|i| Question::Pod {
                namespace: pods[i].metadata.namespace.clone().unwrap_or_else(|| "default".into()),
                name: pods[i].metadata.name.clone().unwrap_or_default(),
            })
            .collect();
        let (node_median, node_slowest) = time(node_questions);
        let (pod_median, pod_slowest) = time(pod_questions);
        [node_median, node_slowest, pod_median, pod_slowest]
    })
}

/// A provisioning pass's simulation on `cluster` with `pending` new pods (copies of its pods,
/// unbound): the median of `runs`, alone and then while another thread answers `explain node`
/// for the cluster's nodes one after another, as `/explain` under steady load would; and how many
/// answers that thread gave meanwhile.
fn time_pass_under_explain(cluster: &Cluster, pending: usize, runs: usize) -> (Duration, Duration, usize) {
    use karpenter_rs::explain::Question;
    let mut input = cluster.input();
    let all: Vec<&Arc<Pod>> = cluster.members.iter().flat_map(|m| m.pods.iter()).collect();
    input.pods = (0..pending)
        .map(|i| {
            let mut pod = unbind(all[i % all.len()]);
            pod.metadata.name = Some(format!("pending-{i}"));
            pod.metadata.uid = Some(format!("pending-uid-{i}"));
            Arc::new(pod)
        })
        .collect();
    let median = |input: &SimulationInput| {
        let mut times: Vec<Duration> = (0..runs)
            .map(|_| {
                let t = Instant::now();
                let plan = simulate(input);
                let took = t.elapsed();
                assert!(!plan.new_nodes.is_empty() || !plan.existing_assignments.is_empty());
                took
            })
            .collect();
        times.sort();
        times[times.len() / 2]
    };
    let alone = median(&input);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let answering = std::sync::Barrier::new(2);
    let (loaded, answers) = std::thread::scope(|scope| {
        let explaining = scope.spawn(|| {
            with_world(cluster, |world, nodes, _| {
                let mut answers = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let node = &nodes[answers % nodes.len()];
                    Question::Node(node.name().to_string()).answer(world).expect("explained");
                    answers += 1;
                    // The pass is timed once the first answer is out (the world is built).
                    if answers == 1 {
                        answering.wait();
                    }
                }
                answers
            })
        });
        answering.wait();
        let loaded = median(&input);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (loaded, explaining.join().expect("the explaining thread ends"))
    });
    (alone, loaded, answers)
}

fn run(nodes: usize, runs: usize, converge: bool) {
    let start = Instant::now();
    let mut cluster = Cluster::fragmented(nodes);
    let built = start.elapsed();
    let pods = cluster.members.iter().map(|m| m.pods.len()).sum::<usize>();
    let initial_cost = cluster.cost();
    let (first_time, first) = time_evaluation(&cluster, runs);
    let [node_median, node_slowest, pod_median, pod_slowest] = time_explain(&cluster, 20);
    println!(
        "EXPLAIN | {nodes} | {pods} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} |",
        ms(node_median),
        ms(node_slowest),
        ms(pod_median),
        ms(pod_slowest),
        ms(first_time),
        node_median.as_secs_f64() / first_time.as_secs_f64().max(1e-9),
    );
    let (alone, loaded, answers) = time_pass_under_explain(&cluster, 100, if nodes > 1000 { 5 } else { 41 });
    println!(
        "UNDER_LOAD | {nodes} | {:.1} | {:.1} | {:.2} | {answers} |",
        ms(alone),
        ms(loaded),
        loaded.as_secs_f64() / alone.as_secs_f64().max(1e-9)
    );
    if std::env::var_os("CONSOLIDATION_BENCH_EXPLAIN_ONLY").is_some() {
        return;
    }
    let first_label = describe(&first);
    eprintln!(
        "{nodes} nodes ({pods} pods left, built in {built:?}): first evaluation {:.1} ms → {first_label}",
        ms(first_time)
    );
    // The expensive case: no empty node left, the multi-node search runs.
    let mut commands = 0usize;
    if matches!(first, Choice::Empty(_)) {
        cluster.apply(first);
        commands += 1;
    }
    let (second_time, second) = time_evaluation(&cluster, runs);
    let second_label = describe(&second);
    eprintln!("  next evaluation {:.1} ms → {second_label}", ms(second_time));
    if !converge {
        println!(
            "RESULT | {nodes} | {pods} | {:.1} ({first_label}) | {:.1} ({second_label}) | - | {initial_cost:.2} | - | - | - | - | - | - | - |",
            ms(first_time),
            ms(second_time),
        );
        return;
    }
    let t = Instant::now();
    let mut choice = second;
    let mut slowest = second_time;
    loop {
        if !cluster.apply(choice) {
            break;
        }
        commands += 1;
        assert!(commands < 100_000, "consolidation converges");
        let e = Instant::now();
        choice = cluster.evaluate();
        slowest = slowest.max(e.elapsed());
    }
    let converged = cluster.cost();
    let bound = cluster.lower_bound();
    let scratch = cluster.rebuilt_cost();
    assert!(converged <= initial_cost + 1e-9, "consolidation never raises the cost");
    let per_type: BTreeMap<&str, usize> = cluster.members.iter().fold(BTreeMap::new(), |mut m, n| {
        *m.entry(n.instance_type.name.as_str()).or_default() += 1;
        m
    });
    eprintln!(
        "  converged after {commands} commands in {:?}: {} nodes {per_type:?}; slowest evaluation {:.1} ms",
        t.elapsed(),
        cluster.members.len(),
        ms(slowest)
    );
    println!(
        "RESULT | {nodes} | {pods} | {:.1} ({first_label}) | {:.1} ({second_label}) | {:.1} | {initial_cost:.2} | {commands} | {:.1} s | {} | {converged:.2} | {bound:.2} | {:.2} | {scratch:.2} |",
        ms(first_time),
        ms(second_time),
        ms(slowest),
        t.elapsed().as_secs_f64(),
        cluster.members.len(),
        converged / bound,
    );
}

fn main() {
    let benchmarking = std::env::args().any(|a| a == "--bench");
    println!("RESULT | nodes | pods left | first evaluation ms | next evaluation ms | slowest while converging ms | $/h before | commands | converge time | nodes after | $/h after | lower bound $/h | after / bound | from scratch $/h |");
    println!("EXPLAIN | nodes | pods | explain node median ms | slowest ms | explain pod median ms | slowest ms | first evaluation ms | node median / evaluation |");
    println!("UNDER_LOAD | nodes | pass simulation (100 pending pods) alone median ms | beside explain node answering non-stop median ms | loaded / alone | explain answers during the loaded runs |");
    if !benchmarking {
        run(100, 1, true);
        return;
    }
    // `CONSOLIDATION_BENCH_SIZES=1000` runs one size (e.g. under a profiler).
    let sizes: Vec<usize> = std::env::var("CONSOLIDATION_BENCH_SIZES")
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|_| vec![100, 1000, 5000]);
    for nodes in sizes {
        let converge = nodes < 5000 || std::env::var("CONSOLIDATION_BENCH_CONVERGE_5000").is_ok();
        run(nodes, if nodes < 5000 { 3 } else { 1 }, converge);
    }
}
