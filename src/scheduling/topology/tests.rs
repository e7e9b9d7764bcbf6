use super::*;
use crate::scheduling::testing::pod;

fn web(name: &str) -> PodState {
    PodState::new(
        &pod(name)
            .label("app", "web")
            .spread(ZONE, 1, "DoNotSchedule", &[("app", "web")])
            .build(),
    )
}

const ZONE: &str = "topology.kubernetes.io/zone";

#[test]
fn spread_picks_the_emptiest_allowed_zone_and_refuses_too_much_skew() {
    let seeds: BTreeMap<String, BTreeSet<String>> = [(ZONE.to_string(), ["a", "b", "c"].map(String::from).into())].into();
    let nodes: [&ExistingNode; 0] = [];
    let ns = BTreeMap::new();
    let pods: Vec<PodState> = (0..5).map(|i| web(&format!("p{i}"))).collect();
    let mut t = Topology::new(&nodes, &ns, &seeds, pods.len());
    let mut zones = Vec::new();
    for (i, p) in pods.iter().enumerate().take(4) {
        t.update(i, p);
        let host = t.hostname_id(&format!("h{i}"));
        let groups = t.matching(i, p);
        let reqs = t.add_requirements(&groups, p, &Requirements::new(), host).expect("satisfiable");
        zones.push(reqs.get(ZONE).and_then(|r| r.any()).expect("pinned").to_string());
        t.record(i, p, &reqs, host);
    }
    assert_eq!(zones, ["a", "b", "c", "a"]);
    // A node pinned to zone a cannot take a fifth pod while b and c hold one each.
    t.update(4, &pods[4]);
    let host = t.hostname_id("h4");
    let node = Requirements::new().with(ZONE, Requirement::in_values(["a"]));
    let groups = t.matching(4, &pods[4]);
    let err = t.add_requirements(&groups, &pods[4], &node, host).expect_err("zone a is full");
    assert!(t
        .explain(&err, &pods[4], &node)
        .contains("unsatisfiable topology spread constraint on topology.kubernetes.io/zone (counts: {a=2, b=1, c=1}"));
}
