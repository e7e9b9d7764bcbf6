//! Fuzzing the admission path: `webhook::admission::review`, the one function the HTTPS handler
//! hands every request body to, fed generated inputs of every kind a client can send:
//!
//! - raw bytes (invalid UTF-8 included) and byte-level damage of real reviews (flips, cuts,
//!   splices, inserted invalid UTF-8);
//! - JSON of any shape: random values, deep nesting, huge and odd numbers, long strings;
//! - AdmissionReviews of both kinds (CREATE, UPDATE with an old object, DELETE, CONNECT) whose
//!   object is a seed (both write-ups' manifests, `tests/fuzz/corpus/*.json`) with random fields
//!   replaced, removed or added, at every depth, and envelopes with random fields.
//!
//! Each input must give an answer without a panic, and the answer must satisfy the oracle
//! (`tests/fuzz/oracle.rs`, whose comment states each rule exactly): HTTP 200 with the request's
//! uid whenever the body is JSON holding a `request.uid`, 400 only when it holds none; an allowed
//! `/mutate` answer's patch decodes, applies to the object, touches only its spec, leaves an
//! object `/validate` allows when it allowed the unpatched one, and a second `/mutate` of the
//! patched object patches nothing; every denial's message names a field path present in the
//! object or the review (or, for a missing field, its parent). An input whose object holds a JSON
//! array where its CRD's schema has an object breaks these rules through a bug still open (the
//! oracle's `KNOWN_ARRAY_FOR_AN_OBJECT`): it is counted apart, not as a failure. A failing input
//! is written to `target/fuzz-failures/` and the test fails naming the file.
//!
//! A seeded generator (splitmix64), reproducible with `FUZZ_SEED`; not coverage-guided. The
//! default run (`cargo test`) tries `FUZZ_INPUTS` = 5,000 inputs; the long run is
//!   FUZZ_INPUTS=10000000 FUZZ_SECONDS=3600 cargo test --release --test fuzz_admission -- --nocapture
//! which stops at whichever comes first and prints what it tried (docs/failure-behaviour.md; the
//! last run's figures: tests/benches/results/fuzz.md).

#[path = "fuzz/oracle.rs"]
mod oracle;

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use karpenter_rs::apis::ApiSettings;
use karpenter_rs::webhook::admission::{review, Endpoint};
use serde_json::{json, Map, Value};

/// splitmix64: small, fast, and the same sequence for the same seed everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Strings that have broken parsers before: quantities, operators, label keys, unicode, limits.
const STRINGS: &[&str] = &[
    "",
    " ",
    "0",
    "-1",
    "1",
    "1.5",
    "1e309",
    "-1e309",
    "NaN",
    "Infinity",
    "0x10",
    "9223372036854775808",
    "99999999999999999999999999Ei",
    "1Ki",
    "1.5Gi",
    "100m",
    "-100m",
    "0.0001m",
    "1e-30",
    "10Pi",
    "5%",
    "110%",
    "%",
    "In",
    "NotIn",
    "Exists",
    "DoesNotExist",
    "Gt",
    "Lt",
    "in",
    "NoSchedule",
    "NoExecute",
    "PreferNoSchedule",
    "on-demand",
    "spot",
    "t3.large",
    "AL2",
    "AL2023",
    "Bottlerocket",
    "Ubuntu",
    "Windows2022",
    "Custom",
    "karpenter.sh/capacity-type",
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/zone",
    "kubernetes.io/hostname",
    "karpenter.sh/provisioner-name",
    "karpenter.k8s.aws/instance-cpu",
    "aws-ids",
    "aws::owners",
    "/",
    "a/b/c",
    "-a",
    "a-",
    "UPPER/lower",
    "日本語",
    "🦀",
    "\u{0}",
    "\u{202e}",
    "\u{fffd}",
    "\\",
    "\"",
    "'",
    "${jndi:x}",
    "../../etc/passwd",
    "arn:aws:iam::123456789012:instance-profile/x",
    "sg-0123",
    "subnet-",
    "ami-",
    "enabled",
    "disabled",
    "required",
    "optional",
    "gp3",
    "io2",
    "/dev/xvda",
    "true",
    "false",
    "null",
];

fn random_string(rng: &mut Rng) -> String {
    match rng.below(6) {
        0 if rng.chance(5) => "a".repeat(rng.below(70_000)),
        1 => (0..rng.below(40))
            .map(|_| char::from_u32(rng.next() as u32 % 0x11_0000).unwrap_or('x'))
            .collect(),
        2 => format!("{}/{}", rng.pick(STRINGS), rng.pick(STRINGS)),
        _ => rng.pick(STRINGS).to_string(),
    }
}

/// Numbers at and past every boundary JSON and Rust care about.
fn random_number(rng: &mut Rng) -> Value {
    let text = match rng.below(12) {
        0 => "0".to_string(),
        1 => "-0".to_string(),
        2 => i64::MAX.to_string(),
        3 => i64::MIN.to_string(),
        4 => u64::MAX.to_string(),
        5 => "18446744073709551616".to_string(),
        6 => "1e308".to_string(),
        7 => "1e400".to_string(),
        8 => "-1e-400".to_string(),
        9 => format!("{}.{}", rng.next() as i64, rng.next()),
        10 => "1".repeat(1 + rng.below(400)),
        _ => (rng.next() as i64 % 100_000).to_string(),
    };
    // Arbitrary precision is not enabled: what does not fit an f64 is written as the nearest one
    // or, past f64, left to the byte-level cases (which send such literals as raw text).
    serde_json::from_str(&text).unwrap_or_else(|_| json!(f64::MAX))
}

fn random_json(rng: &mut Rng, depth: usize) -> Value {
    let leaf = depth == 0 || rng.chance(40);
    match rng.below(if leaf { 4 } else { 6 }) {
        0 => Value::Null,
        1 => Value::Bool(rng.chance(50)),
        2 => random_number(rng),
        3 => Value::String(random_string(rng)),
        4 => Value::Array((0..rng.below(6)).map(|_| random_json(rng, depth - 1)).collect()),
        _ => {
            let mut m = Map::new();
            for _ in 0..rng.below(6) {
                let key = if rng.chance(50) {
                    rng.pick(FIELD_NAMES).to_string()
                } else {
                    random_string(rng)
                };
                m.insert(key, random_json(rng, depth - 1));
            }
            Value::Object(m)
        }
    }
}

/// Field names of both kinds, so that added keys often mean something.
const FIELD_NAMES: &[&str] = &[
    "requirements",
    "key",
    "operator",
    "values",
    "taints",
    "startupTaints",
    "effect",
    "value",
    "labels",
    "annotations",
    "kubeletConfiguration",
    "maxPods",
    "podsPerCore",
    "systemReserved",
    "kubeReserved",
    "evictionHard",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "limits",
    "resources",
    "providerRef",
    "provider",
    "consolidation",
    "enabled",
    "ttlSecondsAfterEmpty",
    "ttlSecondsUntilExpired",
    "weight",
    "subnetSelector",
    "securityGroupSelector",
    "amiSelector",
    "amiFamily",
    "instanceProfile",
    "tags",
    "userData",
    "blockDeviceMappings",
    "ebs",
    "volumeSize",
    "metadataOptions",
    "httpTokens",
    "detailedMonitoring",
    "context",
    "name",
    "namespace",
    "clusterName",
    "apiVersion",
    "kind",
    "metadata",
    "spec",
    "status",
    "uid",
    "operation",
    "object",
    "oldObject",
    "dryRun",
];

/// One step from a JSON value to one of its children.
enum Step {
    Key(String),
    Index(usize),
}

/// A random node of `v` other than the root, unless the root has no children: a walk down from
/// the root that stops at each node with a chance of one in four, and at a leaf. Cheaper than
/// listing every node, and it still reaches the seeds' deepest fields (`spec.requirements[0]
/// .values[0]`) about a third of the time.
fn random_path(rng: &mut Rng, v: &Value) -> Vec<Step> {
    let mut path = Vec::new();
    let mut at = v;
    loop {
        let children = match at {
            Value::Object(m) => m.len(),
            Value::Array(a) => a.len(),
            _ => 0,
        };
        if children == 0 || (!path.is_empty() && rng.chance(25)) {
            return path;
        }
        let i = rng.below(children);
        at = match at {
            Value::Object(m) => {
                let (key, child) = m.iter().nth(i).expect("i is below the length");
                path.push(Step::Key(key.clone()));
                child
            }
            Value::Array(a) => {
                path.push(Step::Index(i));
                &a[i]
            }
            _ => unreachable!("leaves have no children"),
        };
    }
}

fn node_mut<'a>(mut v: &'a mut Value, path: &[Step]) -> &'a mut Value {
    for step in path {
        v = match (v, step) {
            (Value::Object(m), Step::Key(k)) => m.get_mut(k).expect("the path was walked on this value"),
            (Value::Array(a), Step::Index(i)) => &mut a[*i],
            _ => unreachable!("the path was walked on this value"),
        };
    }
    v
}

/// One to four random changes anywhere in `object`: replace a value, remove it, add a key, grow
/// an array, or nest the value deeply.
fn mutate(rng: &mut Rng, object: &mut Value) {
    for _ in 0..1 + rng.below(4) {
        let path = random_path(rng, object);
        let Some((last, parent_path)) = path.split_last() else {
            continue;
        };
        let op = rng.below(6);
        let parent = node_mut(object, parent_path);
        match (parent, op, last) {
            (Value::Object(m), 0, Step::Key(k)) => {
                m.remove(k);
            }
            (Value::Object(m), 1, _) => {
                m.insert(rng.pick(FIELD_NAMES).to_string(), random_json(rng, 3));
            }
            (Value::Array(a), 0, Step::Index(i)) => {
                a.remove(*i);
            }
            (Value::Array(a), 1, _) => {
                let copy = a.first().cloned().unwrap_or(Value::Null);
                a.extend(std::iter::repeat_n(copy, rng.below(50)));
            }
            (parent, 4, _) => {
                let slot = node_mut(parent, std::slice::from_ref(last));
                let mut v = std::mem::take(slot);
                for _ in 0..rng.below(300) {
                    // Built in place: `json!` would copy `v` (it serializes its arguments), which
                    // made 300 levels cost 300 copies of the subtree.
                    v = if rng.chance(50) {
                        Value::Array(vec![v])
                    } else {
                        Value::Object(Map::from_iter([("x".to_string(), v)]))
                    };
                }
                *slot = v;
            }
            (parent, _, _) => *node_mut(parent, std::slice::from_ref(last)) = random_json(rng, 4),
        }
    }
}

fn gvk(object: &Value) -> Value {
    match object.get("kind").and_then(Value::as_str) {
        Some("AWSNodeTemplate") => json!({"group": "karpenter.k8s.aws", "version": "v1alpha1", "kind": "AWSNodeTemplate"}),
        _ => json!({"group": "karpenter.sh", "version": "v1alpha5", "kind": "Provisioner"}),
    }
}

/// What one input is, for the statistics and the failure file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Case {
    Bytes,
    Damaged,
    AnyJson,
    Review,
    Envelope,
}

struct Input {
    case: Case,
    endpoint: Endpoint,
    body: Vec<u8>,
}

fn generate(rng: &mut Rng, seeds: &[Value]) -> Input {
    let endpoint = if rng.chance(50) { Endpoint::Mutate } else { Endpoint::Validate };
    let seed = rng.pick(seeds).clone();
    // The review is assembled by moving its parts in: `json!` copies every value it is given.
    let review_of = |rng: &mut Rng, object: Value, operation: &str| {
        let mut request = Map::new();
        request.insert("uid".into(), Value::String(format!("uid-{}", rng.next())));
        request.insert("kind".into(), gvk(&object));
        request.insert(
            "resource".into(),
            json!({"group": "karpenter.sh", "version": "v1alpha5", "resource": "provisioners"}),
        );
        request.insert("operation".into(), Value::String(operation.to_string()));
        request.insert("name".into(), object.pointer("/metadata/name").cloned().unwrap_or(Value::Null));
        request.insert("object".into(), object);
        if operation == "UPDATE" {
            let mut old = seed.clone();
            if rng.chance(50) {
                mutate(rng, &mut old);
            }
            request.insert("oldObject".into(), old);
        }
        Value::Object(Map::from_iter([
            ("apiVersion".to_string(), Value::String("admission.k8s.io/v1".into())),
            ("kind".to_string(), Value::String("AdmissionReview".into())),
            ("request".to_string(), Value::Object(request)),
        ]))
    };
    match rng.below(10) {
        0 => Input {
            case: Case::Bytes,
            endpoint,
            body: (0..rng.below(300)).map(|_| rng.next() as u8).collect(),
        },
        1 => {
            let mut object = seed.clone();
            mutate(rng, &mut object);
            let mut body = serde_json::to_vec(&review_of(rng, object, "CREATE")).unwrap();
            for _ in 0..1 + rng.below(4) {
                let i = rng.below(body.len());
                match rng.below(4) {
                    0 => body[i] = rng.next() as u8,
                    1 => body.truncate(i),
                    2 => body
                        .splice(i..i, [0xff, 0xfe, 0xc3].into_iter().take(1 + rng.below(3)))
                        .for_each(drop),
                    _ => body
                        .splice(
                            i..i,
                            rng.pick(&["1e400", "18446744073709551616", "[[[[[[[[", "\"\\ud800\""]).bytes(),
                        )
                        .for_each(drop),
                }
                if body.is_empty() {
                    break;
                }
            }
            Input {
                case: Case::Damaged,
                endpoint,
                body,
                }
        }
        2 => Input {
            case: Case::AnyJson,
            endpoint,
            body: serde_json::to_vec(&random_json(rng, 6)).unwrap(),
        },
        3 => {
            let mut review = review_of(rng, seed.clone(), "CREATE");
            mutate(rng, &mut review);
            Input {
                case: Case::Envelope,
                endpoint,
                body: serde_json::to_vec(&review).unwrap(),
                }
        }
        _ => {
            let mut object = seed.clone();
            mutate(rng, &mut object);
            let operation = *rng.pick(&["CREATE", "CREATE", "CREATE", "UPDATE", "UPDATE", "DELETE", "CONNECT"]);
            let body = serde_json::to_vec(&review_of(rng, object, operation)).unwrap();
            Input {
                case: Case::Review,
                endpoint,
                body,
            }
        }
    }
}

/// The seeds: every Provisioner and AWSNodeTemplate document of both write-ups and the corpus.
fn seeds() -> Vec<Value> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<PathBuf> = Vec::new();
    for dir in ["tests/fixtures/first-writeup", "tests/fixtures/second-writeup", "tests/fuzz/corpus"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            files.push(entry.unwrap().path());
        }
    }
    files.sort();
    let mut seeds = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let docs: Vec<Value> = if file.extension().is_some_and(|e| e == "json") {
            vec![serde_json::from_str(&text).unwrap()]
        } else {
            serde_yaml_ng::Deserializer::from_str(&text)
                .map(|d| serde::Deserialize::deserialize(d).unwrap())
                .collect()
        };
        seeds.extend(
            docs.into_iter()
                .filter(|d| matches!(d.get("kind").and_then(Value::as_str), Some("Provisioner" | "AWSNodeTemplate"))),
        );
    }
    assert!(seeds.len() >= 8, "seeds: {}", seeds.len());
    seeds
}

/// What is wrong with `review`'s answer to `input`, if anything: a panic, or a broken rule of
/// the oracle.
fn check(input: &Input, settings: &ApiSettings) -> Result<&'static str, String> {
    catch_unwind(AssertUnwindSafe(|| oracle::check(input.endpoint, &input.body, settings))).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        Err(format!("panicked: {message}"))
    })
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

#[test]
fn every_answer_satisfies_the_oracle() {
    let inputs = env_number("FUZZ_INPUTS", 5_000);
    let seconds = env_number("FUZZ_SECONDS", 600);
    let seed = env_number("FUZZ_SEED", 0x6b61_7270_656e_7465);
    let threads = env_number("FUZZ_THREADS", std::thread::available_parallelism().map_or(2, |n| n.get() as u64)).max(1);
    let seeds = Arc::new(seeds());
    let settings = Arc::new(ApiSettings::new("c"));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let failed = Arc::new(AtomicBool::new(false));
    // The failures are reported by `check`; the default hook would print each caught panic.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let started = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (seeds, settings, failed) = (seeds.clone(), settings.clone(), failed.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(seed ^ (t.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
                let mut tally: BTreeMap<(Case, &'static str), u64> = BTreeMap::new();
                let mut failures: Vec<(Input, String)> = Vec::new();
                let mut done = 0u64;
                let (mut generating, mut checking) = (Duration::ZERO, Duration::ZERO);
                let share = inputs / threads + u64::from(t < inputs % threads);
                while done < share && (!done.is_multiple_of(256) || Instant::now() < deadline) {
                    let began = Instant::now();
                    let input = generate(&mut rng, &seeds);
                    let generated = Instant::now();
                    let checked = check(&input, &settings);
                    generating += generated - began;
                    checking += generated.elapsed();
                    match checked {
                        Ok(result) => *tally.entry((input.case, result)).or_default() += 1,
                        Err(why) => {
                            *tally.entry((input.case, "FAILED")).or_default() += 1;
                            failed.store(true, Ordering::Relaxed);
                            // The first three of each kind of input and broken rule (the
                            // reason's words before its first colon), ten in all.
                            let rule = |why: &str| why.split(':').next().unwrap_or_default().to_string();
                            let seen = failures.iter().filter(|(i, w)| i.case == input.case && rule(w) == rule(&why)).count();
                            if seen < 3 && failures.len() < 10 {
                                failures.push((input, why));
                            }
                        }
                    }
                    done += 1;
                }
                (done, tally, failures, generating, checking)
            })
        })
        .collect();
    let mut total = 0;
    let mut tally: BTreeMap<(Case, &'static str), u64> = BTreeMap::new();
    let mut failures = Vec::new();
    let (mut generating, mut checking) = (Duration::ZERO, Duration::ZERO);
    for worker in workers {
        let (done, t, f, g, c) = worker.join().expect("a fuzz worker died outside catch_unwind");
        total += done;
        generating += g;
        checking += c;
        t.into_iter().for_each(|(k, v)| *tally.entry(k).or_default() += v);
        failures.extend(f);
    }
    std::panic::set_hook(hook);
    let elapsed = started.elapsed().as_secs_f64();
    let failing: u64 = tally.iter().filter(|((_, result), _)| *result == "FAILED").map(|(_, n)| n).sum();
    eprintln!(
        "fuzz_admission: {total} inputs in {elapsed:.1} s ({:.0}/s, {threads} threads, seed {seed:#x}), {failing} failing",
        total as f64 / elapsed,
    );
    // Where the time went, summed over the threads: making the inputs, and the webhook's answers
    // with their checks.
    eprintln!(
        "  generating {:.1} s, reviewing and checking {:.1} s",
        generating.as_secs_f64(),
        checking.as_secs_f64()
    );
    for ((case, result), n) in &tally {
        eprintln!("  {case:?} {result}: {n}");
    }
    if !failures.is_empty() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-failures");
        std::fs::create_dir_all(&dir).unwrap();
        let mut report = String::new();
        for (i, (input, why)) in failures.iter().enumerate() {
            let file = dir.join(format!("{i}-{:?}.body", input.case));
            std::fs::write(&file, &input.body).unwrap();
            report.push_str(&format!("{} ({:?} {}): {why}\n", file.display(), input.case, input.endpoint.path()));
        }
        panic!("{} failing inputs:\n{report}", failures.len());
    }
    assert!(!failed.load(Ordering::Relaxed));
    assert!(total >= inputs.min(1000), "only {total} inputs in the time box");
}

// Found by this harness; each failed before its fix.

fn first_write_up_provisioner() -> Value {
    seeds().into_iter().find(|s| s["kind"] == "Provisioner").unwrap()
}

fn answer(endpoint: Endpoint, body: &Value) -> Value {
    let outcome = review(endpoint, body.to_string().as_bytes(), &ApiSettings::new("c"));
    serde_json::from_slice(&outcome.body).unwrap()
}

fn create(object: Value) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "kind": gvk(&object), "operation": "CREATE", "name": "n", "object": object}})
}

#[test]
fn an_object_nested_deeper_than_json_is_read_is_denied_naming_the_field_not_a_panic() {
    let mut object = first_write_up_provisioner();
    let mut deep = json!("x");
    for _ in 0..200 {
        deep = json!([deep]);
    }
    object["spec"]["labels"] = json!({"a": deep});
    for endpoint in [Endpoint::Mutate, Endpoint::Validate] {
        let a = answer(endpoint, &create(object.clone()));
        assert_eq!(a["response"]["allowed"], false, "{a}");
        let message = a["response"]["status"]["message"].as_str().unwrap();
        assert!(
            message.contains("spec.labels") && message.contains("nested too deeply"),
            "{message}"
        );
    }
}

#[test]
fn a_malformed_review_names_the_field_at_fault() {
    let mut review = create(first_write_up_provisioner());
    review["request"]["operation"] = json!(7);
    let a = answer(Endpoint::Validate, &review);
    let message = a["response"]["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("malformed AdmissionReview: request.operation: invalid type: integer `7`"),
        "{message}"
    );
    // A null name is a missing one (objects with generateName), not an error.
    let mut review = create(first_write_up_provisioner());
    review["request"]["name"] = Value::Null;
    assert_eq!(answer(Endpoint::Validate, &review)["response"]["allowed"], true);
}

#[test]
fn escaped_strings_in_the_envelope_are_read_as_their_text() {
    // `CREATE` and `Provisioner` written with JSON escapes, as any JSON encoder may.
    let body = create(first_write_up_provisioner())
        .to_string()
        .replacen("\"CREATE\"", "\"CRE\\u0041TE\"", 1)
        .replacen("\"kind\":\"Provisioner\"", "\"kind\":\"Provisi\\u006fner\"", 1);
    assert!(body.contains("\\u0041") && body.contains("\\u006f"), "{body}");
    let outcome = review(Endpoint::Validate, body.as_bytes(), &ApiSettings::new("c"));
    let a: Value = serde_json::from_slice(&outcome.body).unwrap();
    assert_eq!(a["response"]["allowed"], true, "{a}");
    assert_eq!((outcome.kind, outcome.operation), ("Provisioner", "CREATE"));
}

