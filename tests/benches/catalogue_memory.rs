//! Memory of the instance-type catalogue: how many bytes the controller keeps for the EC2
//! catalogue and, per Provisioner, for its translated instance types (`TypeCache`), over the
//! shipped snapshot of ap-northeast-2 (`src/simulate/catalogue.json`, moto's EC2 data).
//!
//! Counted by a global allocator that adds up the bytes of live allocations (what was asked
//! for, not the allocator's own rounding and headers). Pure and quick: `cargo test` runs it too
//! (and checks what it prints); `cargo bench --bench catalogue_memory` writes
//! tests/benches/results/catalogue-memory.md.
//!
//! Baseline, same run: every catalogue type translated for the Provisioner, which is what the
//! cache held per Provisioner before it kept only the types a Provisioner's requirements allow.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use karpenter_rs::apis::v1alpha5::{defaults, Provisioner};
use karpenter_rs::apis::ApiSettings;
use karpenter_rs::cloudprovider::NodeTemplate;
use karpenter_rs::cloudprovider::catalogue::TypeCache;
use karpenter_rs::scheduling::NodeSettings;
use karpenter_rs::simulate::catalogue::{Snapshot, SHIPPED};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call goes to `System` with the caller's arguments; only the count is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        unsafe { System.dealloc(p, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, layout, new_size) };
        if !q.is_null() {
            LIVE.fetch_add(new_size, Ordering::Relaxed);
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        q
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

const REGION: &str = "ap-northeast-2";

/// A Provisioner from YAML, defaulted as the webhook defaults it.
fn provisioner(yaml: &str) -> Provisioner {
    let mut p: Provisioner = serde_yaml_ng::from_str(yaml).expect("a Provisioner");
    defaults::set_defaults(&mut p.spec, &ApiSettings::new("c"));
    p
}

struct Row {
    name: &'static str,
    what: &'static str,
    types: usize,
    bytes: usize,
}

fn main() {
    let benchmarking = std::env::args().any(|a| a == "--bench");
    let snapshot = Snapshot::parse(SHIPPED).expect("the shipped catalogue parses");
    let before = live();
    let catalogue = snapshot.catalogue(REGION, None).expect("the shipped catalogue has the region");
    let catalogue_bytes = live() - before;
    let all_zones: BTreeSet<String> = catalogue.zones.clone();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |file: &str| std::fs::read_to_string(root.join(file)).expect("a manifest of the repository");
    let provisioners: Vec<(&'static str, &'static str, Provisioner)> = vec![
        (
            "service",
            "the first write-up's: t3.large, t3.xlarge; on-demand",
            provisioner(&read("tests/fixtures/first-writeup/provisioner.yaml")),
        ),
        (
            "scale",
            "the scale benchmark's: 12 types (c5/m5/r5, large to 4xlarge)",
            provisioner(&read("tests/benches/scale/provisioner.yaml")),
        ),
        (
            "broad",
            "amd64 or arm64, spot or on-demand, any family (`instance-family` Exists)",
            provisioner(
                "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: broad}\nspec:\n  requirements:\n    - {key: kubernetes.io/arch, operator: In, values: [amd64, arm64]}\n    - {key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}\n    - {key: karpenter.k8s.aws/instance-family, operator: Exists}\n",
            ),
        ),
        (
            "default",
            "none: the webhook's defaults (linux, amd64, on-demand, categories c/m/r, generation > 2)",
            provisioner("apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: default}\nspec: {}\n"),
        ),
    ];
    let template = NodeTemplate::from_provider(
        &Default::default(),
        "c",
        karpenter_rs::cloudprovider::KubernetesVersion { major: 1, minor: 33 },
    )
    .expect("the default provider is a template");
    let settings = NodeSettings::default();
    let mut cache = TypeCache::default();
    cache.set_catalogue(catalogue.types.clone());

    // The baseline: every type translated (a Provisioner with no requirement at all keeps each).
    let everything = {
        let mut bare = provisioner("apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: everything}\nspec: {}\n");
        bare.spec.requirements = None;
        let mut own = TypeCache::default();
        own.set_catalogue(catalogue.types.clone());
        let before = live();
        let types = own.instance_types(&bare, &template, &all_zones, REGION, &settings);
        let bytes = live() - before;
        Row {
            name: "(every type)",
            what: "baseline: every catalogue type translated, as kept per Provisioner before",
            types: types.len(),
            bytes,
        }
    };
    assert_eq!(
        everything.types,
        catalogue.types.len(),
        "a Provisioner without requirements keeps every type"
    );

    let mut rows = Vec::new();
    for (name, what, p) in &provisioners {
        let before = live();
        let types = cache.instance_types(p, &template, &all_zones, REGION, &settings);
        let bytes = live() - before;
        rows.push(Row {
            name,
            what,
            types: types.len(),
            bytes,
        });
    }

    let kib = |b: usize| b as f64 / 1024.0;
    let mut table = String::new();
    writeln!(
        table,
        "| Provisioner | what it allows | types kept | KiB kept | against every type |"
    )
    .unwrap();
    writeln!(table, "|---|---|---:|---:|---:|").unwrap();
    for row in std::iter::once(&everything).chain(&rows) {
        writeln!(
            table,
            "| {} | {} | {} | {:.0} | {:.3}× |",
            row.name,
            row.what,
            row.types,
            kib(row.bytes),
            row.bytes as f64 / everything.bytes as f64
        )
        .unwrap();
    }
    let per_type = everything.bytes as f64 / everything.types as f64;
    println!(
        "catalogue of {REGION}: {} types, {:.0} KiB",
        catalogue.types.len(),
        kib(catalogue_bytes)
    );
    println!("{table}");
    println!("per translated type: {:.1} KiB", per_type / 1024.0);
    // What the first write-up's and the scale benchmark's Provisioners keep must be their types
    // only, not the catalogue.
    assert_eq!(rows[0].types, 2, "the first write-up allows t3.large and t3.xlarge");
    assert_eq!(rows[1].types, 12, "the scale Provisioner lists 12 types");
    assert!(rows.iter().all(|r| r.bytes <= everything.bytes));

    if benchmarking {
        let mut out = String::new();
        writeln!(out, "# Instance-type catalogue memory\n").unwrap();
        writeln!(
            out,
            "Generated by `cargo bench --bench catalogue_memory` (tests/benches/catalogue_memory.rs) on {}: bytes of live \
             allocations (as asked for; the allocator's rounding and headers come on top) counted by a global allocator, \
             over the shipped catalogue snapshot of {REGION} (`src/simulate/catalogue.json`, moto's EC2 data), all {} zones.\n",
            jiff::Timestamp::now().strftime("%Y-%m-%d"),
            all_zones.len()
        )
        .unwrap();
        writeln!(
            out,
            "The EC2 catalogue itself (`InstanceTypeInfo` per type, with offerings and prices, one copy in the process): \
             **{} types, {:.0} KiB**. Per Provisioner the controller keeps its translated instance types (capacity, \
             overhead, labels as requirements, offerings in its zones); one translated type takes **{:.1} KiB**.\n",
            catalogue.types.len(),
            kib(catalogue_bytes),
            per_type / 1024.0
        )
        .unwrap();
        out.push_str(&table);
        writeln!(
            out,
            "\nThe baseline row is measured in the same run: every type translated, what the type cache held for each \
             Provisioner before it kept only the types whose labels overlap the Provisioner's requirements. A node of a \
             type no longer allowed (launched before its Provisioner's requirements changed) gets its type translated \
             when consolidation or node initialisation asks for it."
        )
        .unwrap();
        let file = root.join("tests/benches/results/catalogue-memory.md");
        std::fs::write(&file, out).expect("the results file is writable");
        println!("wrote {}", file.display());
    }
}
