//! Criterion benchmark of `scheduling::simulate` on Karpenter's benchmark shape: pods whose CPU is
//! drawn from {100m, 250m, 500m, 1, 1.5} and memory from {100Mi, 256Mi, 512Mi, 1Gi, 2Gi, 4Gi}
//! (fixed seed), scheduled against a synthetic catalogue of 400+ instance types, for 1 / 100 /
//! 1,000 / 5,000 / 20,000 pods, in three variants: plain, zonal topology spread (maxSkew 1) and
//! hostname anti-affinity (every pod repels every other).
//!
//! Besides criterion's timings it prints, per case: pods/s, node count, total $/h of the cheapest
//! option of every planned node, that cost over a lower bound, and the node count of a
//! first-fit-decreasing baseline computed in the same run.
//!
//! The catalogue: 3 sizes (large .. 2xlarge) of t3/t3a, and 8 sizes (large .. 24xlarge) of 49
//! other families: 38 x86 c/m/r families of generations 5-7 (c5, c5a, c5ad, c5d, c5n, c6a, c6i,
//! c6id, c6in, c7a, c7i, m5, m5a, m5ad, m5d, m5dn, m5n, m6a, m6i, m6id, m6idn, m6in, m7a, m7i, r5,
//! r5a, r5ad, r5b, r5d, r5dn, r5n, r6a, r6i, r6id, r6idn, r6in, r7a, r7i), 9 arm64 Graviton
//! families (c6g, c6gd, c7g, m6g, m6gd, m7g, r6g, r6gd, r7g) and 2 GPU families (g4dn, g5: one
//! NVIDIA GPU per 4 vCPUs, at most 4); the 6th/7th-generation x86 families also get 32xlarge and
//! 48xlarge: 438 types (344 of them allowed by the bench Provisioner). vCPUs: large 2, xlarge 4,
//! 2xlarge 8 ... 24xlarge 96, 32xlarge 128, 48xlarge 192; memory per vCPU: c 2 GiB, m and t
//! 4 GiB, r 8 GiB, g 4 GiB; ENIs × IPv4 as EC2 publishes them per size. On-demand price =
//! (vCPU × $0.0304 + GiB × $0.0044) × family factor (5th gen 1.0, c 1.08, r 0.96, AMD `a` 0.9,
//! local-disk `d` 1.15, network `n` 1.25, 7th gen 1.05, Graviton 0.8, t 0.87, GPU types + $0.40
//! per GPU), which reproduces us-east-1 prices within ~10% (m5.large $0.096, c5.large $0.085).
//! Every type is offered on-demand and spot (spot 35% of on-demand) in 3 zones.
//!
//! The Provisioner is Karpenter's defaulted one: linux, amd64, on-demand, categories c/m/r,
//! generation > 2 (so t3, Graviton and GPU types are filtered out by the simulation itself). The
//! lower bound is max(Σ cpu requests × the cheapest on-demand $/vCPU, Σ memory requests × the
//! cheapest $/GiB) over the types that Provisioner allows: any set of nodes holding the pods costs
//! at least that. The first-fit-decreasing baseline packs pods sorted by cpu then memory into
//! nodes of the single largest allowed type (most allocatable cpu, then memory), by allocatable
//! cpu, memory and pods; with zonal spread it packs each zone's share separately; with hostname
//! anti-affinity it needs one node per pod.
//!
//! Run: `cargo bench --bench scheduling`. Results: tests/benches/results/scheduling.md.

mod fixture;

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fixture::{allowed, catalogue, input, lower_bound, Variant, ZONES};
use karpenter_rs::scheduling::{simulate, InstanceType, Resources};

/// First-fit-decreasing into nodes of the largest allowed type.
fn first_fit_decreasing(requests: &[Resources], allowed: &[Arc<InstanceType>]) -> usize {
    let bin = allowed
        .iter()
        .map(|it| it.allocatable())
        .max_by_key(|a| (a.cpu_millis, a.memory_bytes))
        .expect("some allowed type");
    let mut sorted: Vec<&Resources> = requests.iter().collect();
    sorted.sort_by_key(|r| std::cmp::Reverse((r.cpu_millis, r.memory_bytes)));
    let mut bins: Vec<Resources> = Vec::new();
    for r in sorted {
        match bins.iter_mut().find(|b| b.plus(r).fits(&bin)) {
            Some(b) => b.add(r),
            None => bins.push(r.clone()),
        }
    }
    bins.len()
}

fn baseline(variant: Variant, requests: &[Resources], allowed: &[Arc<InstanceType>]) -> usize {
    match variant {
        Variant::Plain => first_fit_decreasing(requests, allowed),
        Variant::ZonalSpread => {
            let mut sorted: Vec<Resources> = requests.to_vec();
            sorted.sort_by_key(|r| std::cmp::Reverse((r.cpu_millis, r.memory_bytes)));
            (0..ZONES.len())
                .map(|z| {
                    let share: Vec<Resources> = sorted.iter().skip(z).step_by(ZONES.len()).cloned().collect();
                    if share.is_empty() {
                        0
                    } else {
                        first_fit_decreasing(&share, allowed)
                    }
                })
                .sum()
        }
        Variant::HostnameAntiAffinity => requests.len(),
    }
}

fn report(n: usize, variant: Variant, types: &[Arc<InstanceType>]) {
    let inp = input(n, variant, types);
    let runs = if n >= 5000 { 3 } else { 5 };
    let mut times = Vec::new();
    let mut plan = None;
    for _ in 0..runs {
        let start = Instant::now();
        plan = Some(simulate(&inp));
        times.push(start.elapsed());
    }
    times.sort();
    let median = times[times.len() / 2];
    let plan = plan.expect("ran at least once");
    let cost: f64 = plan
        .new_nodes
        .iter()
        .map(|node| node.cheapest().map_or(0.0, |(_, o)| o.price))
        .sum();
    let requests: Vec<Resources> = inp
        .pods
        .iter()
        .map(|p| karpenter_rs::scheduling::resources::pod_requests(p))
        .collect();
    let mut total = Resources::zero();
    for r in &requests {
        total.add(r);
    }
    let allowed = allowed(types);
    let lb = lower_bound(&total, &allowed);
    let ffd = baseline(variant, &requests, &allowed);
    println!(
        "RESULT | {n} | {} | {:.1} | {:.0} | {} | {} | {:.2} | {:.2} | {:.2} | {} |",
        variant.name(),
        median.as_secs_f64() * 1000.0,
        n as f64 / median.as_secs_f64(),
        plan.new_nodes.len(),
        ffd,
        cost,
        lb,
        cost / lb,
        plan.unschedulable.len()
    );
}

fn bench(c: &mut Criterion) {
    let types = catalogue();
    println!(
        "catalogue: {} instance types, {} allowed by the bench Provisioner",
        types.len(),
        allowed(&types).len()
    );
    println!("RESULT | pods | variant | median ms | pods/s | nodes | FFD nodes | $/h | lower bound $/h | $/h over bound | unschedulable |");
    // `cargo test` runs this once per case with no `--bench`: small sizes are enough to show it
    // still runs and its figures still come out.
    let benchmarking = std::env::args().any(|a| a == "--bench");
    let sizes: &[usize] = if benchmarking { &[1, 100, 1000, 5000, 20000] } else { &[1, 100] };
    for variant in [Variant::Plain, Variant::ZonalSpread, Variant::HostnameAntiAffinity] {
        let mut group = c.benchmark_group(format!("simulate/{}", variant.name()));
        for &n in sizes {
            if n == 20000 && variant == Variant::HostnameAntiAffinity {
                continue;
            }
            report(n, variant, &types);
            let inp = input(n, variant, &types);
            group.throughput(Throughput::Elements(n as u64));
            if n >= 1000 {
                group.sample_size(10).warm_up_time(Duration::from_millis(500));
                group.measurement_time(Duration::from_secs(if n >= 5000 { 8 } else { 3 }));
            } else {
                group.sample_size(30).warm_up_time(Duration::from_millis(300));
                group.measurement_time(Duration::from_secs(2));
            }
            group.bench_with_input(BenchmarkId::from_parameter(n), &inp, |b, inp| b.iter(|| simulate(black_box(inp))));
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
