//! The admission path under libFuzzer: each input is turned into a request body by the generator
//! the seeded fuzzer uses (tests/fuzz/generate.rs, `from_fuzzer`), answered by
//! `webhook::admission::review`, and the answer checked by the same oracle
//! (tests/fuzz/oracle.rs). A broken rule panics, which libFuzzer reports as a crash and saves.
//! Built and run by tests/benches/fuzz_coverage.sh.
#![no_main]

#[allow(dead_code)]
#[path = "../../tests/fuzz/generate.rs"]
mod generate;
#[allow(dead_code)]
#[path = "../../tests/fuzz/oracle.rs"]
mod oracle;

use std::path::Path;
use std::sync::OnceLock;

use karpenter_rs::apis::ApiSettings;
use serde_json::Value;

static SEEDS: OnceLock<Vec<Value>> = OnceLock::new();
static SETTINGS: OnceLock<ApiSettings> = OnceLock::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let seeds = SEEDS.get_or_init(|| generate::seeds(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))));
    let settings = SETTINGS.get_or_init(|| ApiSettings::new("c"));
    let input = generate::from_fuzzer(data, seeds);
    if let Err(why) = oracle::check(input.endpoint, &input.body, settings) {
        panic!("{:?} {}: {why}", input.case, input.endpoint.path());
    }
});
