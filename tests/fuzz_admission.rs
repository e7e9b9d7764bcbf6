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
//! object or the review (or, for a missing field, its parent); a CREATE or UPDATE whose object
//! holds a JSON array where its CRD's schema has an object is denied. A failing input is written
//! to `target/fuzz-failures/` and the test fails naming the file.
//!
//! The inputs come from `tests/fuzz/generate.rs`, here with a seeded generator (splitmix64),
//! reproducible with `FUZZ_SEED`. The default run (`cargo test`) tries `FUZZ_INPUTS` = 5,000
//! inputs; the long run is
//!   FUZZ_INPUTS=10000000 FUZZ_SECONDS=3600 cargo test --release --test fuzz_admission -- --nocapture
//! which stops at whichever comes first and prints what it tried (docs/failure-behaviour.md; the
//! last run's figures: tests/benches/results/fuzz.md). The same generator and oracle run
//! coverage-guided under libFuzzer in `fuzz/` (`tests/benches/fuzz_coverage.sh`); the inputs that
//! fuzzer kept are replayed here by `the_coverage_guided_fuzzers_corpus_satisfies_the_oracle`.

#[path = "fuzz/generate.rs"]
mod generate;
#[path = "fuzz/oracle.rs"]
mod oracle;

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use karpenter_rs::apis::ApiSettings;
use generate::{generate, gvk, seeds, Case, Input, Rng};
use karpenter_rs::webhook::admission::{review, Endpoint};
use serde_json::{json, Value};

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
    let seeds = Arc::new(seeds(Path::new(env!("CARGO_MANIFEST_DIR"))));
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

/// The inputs the coverage-guided fuzzer (fuzz/, tests/benches/fuzz_coverage.sh) starts from
/// and those it found worth keeping (`fuzz/seeds/admission/`), through the same generator and
/// oracle: so its target's code path runs in every test run, on the stable toolchain.
#[test]
fn the_coverage_guided_fuzzers_corpus_satisfies_the_oracle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let seeds = seeds(root);
    let settings = ApiSettings::new("c");
    let mut files: Vec<_> = std::fs::read_dir(root.join("fuzz/seeds/admission"))
        .expect("fuzz/seeds/admission")
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 10, "{} files", files.len());
    let mut cases = BTreeMap::new();
    let mut failures = Vec::new();
    for file in &files {
        let input = generate::from_fuzzer(&std::fs::read(file).unwrap(), &seeds);
        match check(&input, &settings) {
            Ok(answer) => *cases.entry((input.case, answer)).or_insert(0) += 1,
            Err(why) => failures.push(format!("{}: {why}", file.display())),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Both kinds of input are there: bodies as they are, and the generator's choices.
    assert!(cases.keys().any(|(case, _)| *case == Case::Bytes), "{cases:?}");
    assert!(cases.keys().any(|(case, _)| *case != Case::Bytes), "{cases:?}");
}

// Found by this harness; each failed before its fix.

fn first_write_up_provisioner() -> Value {
    seeds(Path::new(env!("CARGO_MANIFEST_DIR"))).into_iter().find(|s| s["kind"] == "Provisioner").unwrap()
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

