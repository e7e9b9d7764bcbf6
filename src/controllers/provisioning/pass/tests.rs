use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::*;
use crate::controllers::clock::FakeClock;
use crate::controllers::state::Cluster;
use crate::controllers::provisioning::ProvisioningConfig;
use crate::controllers::Shared;
use crate::metrics::Metrics;
use crate::controllers::provisioning::launch::tests::ScriptedCloud;
use crate::scheduling::{NodeRequest, Requirements, Resources};

fn request(provisioner: &str) -> NodeRequest {
    NodeRequest {
        provisioner: provisioner.into(),
        requirements: Requirements::new(),
        instance_type_options: vec![],
        pods: vec![],
        requests: Resources::zero(),
        labels: BTreeMap::new(),
        taints: vec![],
        startup_taints: vec![],
    }
}

/// A provisioning context on `clock`, with a client that never connects and a cloud never
/// called: what deciding how many launches to admit needs.
fn context(clock: Arc<FakeClock>, max_launches_per_minute: u32) -> Arc<Context> {
    let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a valid URL"));
    let client = kube::Client::try_from(config).expect("a client needs no connection to be made");
    let mut shared = Shared::new(client, Arc::new(ScriptedCloud::default()), Metrics::new(), Cluster::detached());
    shared.clock = clock;
    Context::new(
        &shared,
        ProvisioningConfig {
            max_launches_per_minute,
            ..Default::default()
        },
    )
}

/// The launch rate refills on the controllers' clock: a minute on a fake clock, with no real
/// time passing, admits the next launches, and less than the time of one launch admits none.
#[tokio::test]
async fn the_launch_rate_refills_on_the_controllers_clock() {
    let clock = Arc::new(FakeClock::new("2026-12-06T10:00:00Z".parse().unwrap(), Instant::now()));
    let ctx = context(clock.clone(), 2);
    let planned = [request("a"), request("a"), request("a"), request("b")];
    let names = |admitted: Vec<&NodeRequest>| admitted.iter().map(|r| r.provisioner.clone()).collect::<Vec<_>>();

    assert_eq!(names(admitted(&ctx, &planned)), ["a", "a", "b"], "two a minute per Provisioner");
    clock.advance(Duration::from_secs(29));
    assert_eq!(
        names(admitted(&ctx, &planned)),
        ["b"],
        "a: less than one launch refilled; b: one left"
    );
    clock.advance(Duration::from_secs(31));
    assert_eq!(names(admitted(&ctx, &planned)), ["a", "a", "b"], "a minute later: two again");
}
