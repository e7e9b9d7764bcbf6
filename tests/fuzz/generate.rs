//! The inputs of the admission fuzzers: raw bytes, damaged reviews, JSON of any shape and
//! AdmissionReviews whose object is a seed (both write-ups' manifests, `tests/fuzz/corpus/*.json`)
//! with random fields replaced, removed or added at every depth. One generator for both fuzzers:
//! the seeded one (tests/fuzz_admission.rs, choices from splitmix64) and the coverage-guided one
//! (fuzz/, choices read from libFuzzer's input).

use std::path::{Path, PathBuf};

use karpenter_rs::webhook::admission::Endpoint;
use serde_json::{json, Map, Value};

/// Where the generator's choices come from: each choice is a number, taken modulo what is asked.
pub trait Choices {
    /// The next number.
    fn next(&mut self) -> u64;
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

/// splitmix64: small, fast, and the same sequence for the same seed everywhere (the seeded run of
/// tests/fuzz_admission.rs).
pub struct Rng(pub u64);

impl Choices for Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Choices read from a coverage-guided fuzzer's input (fuzz/fuzz_targets/admission.rs), four
/// bytes each: the fuzzer's mutations of the bytes become changes of the generated review, so
/// what it learns about coverage steers the structure, not only the characters. Past the end of
/// the input every choice is 0 (the first option; loops stop), so every input generates.
pub struct Bytes<'a> {
    data: &'a [u8],
}

impl<'a> Bytes<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Bytes { data }
    }
}

impl Choices for Bytes<'_> {
    fn next(&mut self) -> u64 {
        let (now, rest) = self.data.split_at(self.data.len().min(4));
        self.data = rest;
        now.iter().rev().fold(0u64, |n, b| (n << 8) | u64::from(*b))
    }
}

/// Strings that have broken parsers before: quantities, operators, label keys, unicode, limits.
pub const STRINGS: &[&str] = &[
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

pub fn random_string(rng: &mut impl Choices) -> String {
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
pub fn random_number(rng: &mut impl Choices) -> Value {
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

pub fn random_json(rng: &mut impl Choices, depth: usize) -> Value {
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
pub const FIELD_NAMES: &[&str] = &[
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
pub enum Step {
    Key(String),
    Index(usize),
}

/// A random node of `v` other than the root, unless the root has no children: a walk down from
/// the root that stops at each node with a chance of one in four, and at a leaf. Cheaper than
/// listing every node, and it still reaches the seeds' deepest fields (`spec.requirements[0]
/// .values[0]`) about a third of the time.
pub fn random_path(rng: &mut impl Choices, v: &Value) -> Vec<Step> {
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

pub fn node_mut<'a>(mut v: &'a mut Value, path: &[Step]) -> &'a mut Value {
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
pub fn mutate(rng: &mut impl Choices, object: &mut Value) {
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

pub fn gvk(object: &Value) -> Value {
    match object.get("kind").and_then(Value::as_str) {
        Some("AWSNodeTemplate") => json!({"group": "karpenter.k8s.aws", "version": "v1alpha1", "kind": "AWSNodeTemplate"}),
        _ => json!({"group": "karpenter.sh", "version": "v1alpha5", "kind": "Provisioner"}),
    }
}

/// What one input is, for the statistics and the failure file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Case {
    Bytes,
    Damaged,
    AnyJson,
    Review,
    Envelope,
}

pub struct Input {
    pub case: Case,
    pub endpoint: Endpoint,
    pub body: Vec<u8>,
}

pub fn generate<R: Choices>(rng: &mut R, seeds: &[Value]) -> Input {
    let endpoint = if rng.chance(50) { Endpoint::Mutate } else { Endpoint::Validate };
    let seed = rng.pick(seeds).clone();
    // The review is assembled by moving its parts in: `json!` copies every value it is given.
    let review_of = |rng: &mut R, object: Value, operation: &str| {
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

/// The seeds: every Provisioner and AWSNodeTemplate document of both write-ups and the corpus,
/// under the repository's `root`.
pub fn seeds(root: &Path) -> Vec<Value> {
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

/// The input a coverage-guided fuzzer's `data` stands for. A first byte below 64 makes the rest
/// the body itself, sent to `/mutate` or `/validate` by its lowest bit (byte-level inputs, which
/// libFuzzer's own mutations and comparisons explore best); otherwise the rest is the choices of
/// `generate`.
pub fn from_fuzzer(data: &[u8], seeds: &[Value]) -> Input {
    match data.split_first() {
        Some((&first, rest)) if first < 64 => Input {
            case: Case::Bytes,
            endpoint: if first & 1 == 0 { Endpoint::Mutate } else { Endpoint::Validate },
            body: rest.to_vec(),
        },
        Some((_, rest)) => generate(&mut Bytes::new(rest), seeds),
        None => Input {
            case: Case::Bytes,
            endpoint: Endpoint::Validate,
            body: Vec::new(),
        },
    }
}
