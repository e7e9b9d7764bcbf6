//! `scheduling::simulate` on Karpenter's own scheduling benchmark (sigs.k8s.io/karpenter
//! `pkg/controllers/provisioning/scheduling/scheduling_benchmark_test.go`): the instance types of
//! `fake.InstanceTypes(400)`, its NodePool (no requirements, limits only) and its diverse pod mix
//! (`makeDiversePods`: 1/5 each generic, zonal spread, hostname spread, zonal self-affinity and
//! hostname anti-affinity), as built by `fixture::fake_instance_types`, `karpenter_bench_input`.
//!
//! Timing follows Go's benchmark: after one untimed warm-up run, runs repeat until `--benchtime-ms`
//! (default 2000) has passed, at least 3 times; pods/s = pods / mean time per run. Two timings:
//! the whole `simulate` (templates and topology included), and the part Karpenter's timer covers
//! (its `Scheduler.Solve`; the scheduler with its templates is built before the timer): a
//! `Simulator` prepared once, then `simulate_without` nothing removed, per run (it still copies
//! the templates and builds the topology each time).
//!
//! Run: `cargo bench --bench scheduling_vs_karpenter [-- --sizes 1,100 --benchtime-ms 2000]`;
//! `bash tests/benches/scheduling_vs_karpenter.sh` runs it beside Karpenter's benchmark and writes
//! tests/benches/results/scheduling-vs-karpenter.md.

mod fixture;

use std::time::{Duration, Instant};

use fixture::{fake_instance_types, karpenter_bench_input};
use karpenter_rs::scheduling::{simulate, Simulator};

fn main() {
    // `cargo bench` passes `--bench`; `cargo test` runs it without, once at small sizes, to show
    // it still runs.
    let benchmarking = std::env::args().any(|a| a == "--bench");
    let mut sizes = if benchmarking {
        vec![1usize, 100, 1000, 5000, 20000]
    } else {
        vec![1, 100]
    };
    let mut benchtime = Duration::from_millis(if benchmarking { 2000 } else { 0 });
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--sizes" => {
                let list = args.next().expect("--sizes takes a comma-separated list");
                sizes = list.split(',').map(|s| s.trim().parse().expect("--sizes: numbers")).collect();
            }
            "--benchtime-ms" => {
                let ms = args.next().expect("--benchtime-ms takes a number");
                benchtime = Duration::from_millis(ms.parse().expect("--benchtime-ms: a number"));
            }
            // `cargo bench` passes `--bench`; criterion-style filters are not used here.
            _ => {}
        }
    }
    let types = fake_instance_types(400);
    println!("instance types: {} (fake.InstanceTypes(400))", types.len());
    println!("RESULT | pods | runs | mean ms | median ms | pods/s | µs per pod | nodes | unschedulable | solve pods/s |");
    for n in sizes {
        let input = karpenter_bench_input(n, &types);
        let plan = simulate(&input);
        let mut times = Vec::new();
        let started = Instant::now();
        while times.len() < 3 || started.elapsed() < benchtime {
            let start = Instant::now();
            let again = simulate(std::hint::black_box(&input));
            times.push(start.elapsed());
            assert_eq!(again.new_nodes.len(), plan.new_nodes.len(), "plans are deterministic");
        }
        let mean = times.iter().sum::<Duration>() / times.len() as u32;
        times.sort();
        let median = times[times.len() / 2];
        let simulator = Simulator::new(&input);
        let none = std::collections::HashSet::new();
        let mut solves = Vec::new();
        let started = Instant::now();
        while solves.len() < 3 || started.elapsed() < benchtime {
            let start = Instant::now();
            let again = std::hint::black_box(&simulator).simulate_without(&none, &[]);
            solves.push(start.elapsed());
            assert_eq!(again.new_nodes.len(), plan.new_nodes.len(), "the same plan as simulate");
        }
        let solve_mean = solves.iter().sum::<Duration>() / solves.len() as u32;
        println!(
            "RESULT | {n} | {} | {:.3} | {:.3} | {:.0} | {:.2} | {} | {} | {:.0} |",
            times.len(),
            mean.as_secs_f64() * 1000.0,
            median.as_secs_f64() * 1000.0,
            n as f64 / mean.as_secs_f64(),
            mean.as_secs_f64() * 1e6 / n as f64,
            plan.new_nodes.len(),
            plan.unschedulable.len(),
            n as f64 / solve_mean.as_secs_f64()
        );
    }
}
