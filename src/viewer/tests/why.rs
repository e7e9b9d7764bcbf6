//! The WHY column and its reasons: what each row says, where the header says they come from, and
//! the order nodes are explained in.

use serde_json::json;

use super::*;

/// An explanation of `node` whose consolidation is blocked by `blocker` (as the controller's
/// `/explain/node/NAME?o=json` sends it).
fn blocked(node: &str, blocker: &str) -> crate::explain::NodeExplanation {
    serde_json::from_value(json!({
        "node": node, "provisioner": "default", "instanceType": "t3.large", "capacityType": "on-demand",
        "zone": "ap-northeast-2a", "pricePerHour": 0.104, "created": "2026-12-02T11:55:00Z", "ageSeconds": 300,
        "pods": ["default/web"],
        "methods": [
            {"method": "expiration", "acts": false, "state": "ttlSecondsUntilExpired is not set", "blockers": []},
            {"method": "drift", "acts": false, "state": "not drifted as of the last check", "blockers": []},
            {"method": "emptiness", "acts": false, "state": "not empty: 1 pod(s), e.g. default/web", "blockers": []},
            {"method": "consolidation", "acts": false, "state": format!("blocked: {blocker}"), "blockers": [blocker]},
        ],
        "summary": format!("consolidation blocked: {blocker}"),
        "removal": {"moves": [], "clusterPriceBefore": 0.312, "clusterPriceAfter": 0.208, "everyPodPlaced": true},
    }))
    .unwrap()
}

const FIRST: &str = "ip-10-0-1-20.ap-northeast-2.compute.internal";

#[test]
fn the_why_column_shows_each_nodes_reason_cut_to_fit_and_the_header_says_where_they_come_from() {
    let (nodes, pods) = fixture();
    let mut reasons = Reasons::new("from the controller at http://127.0.0.1:8080".to_string());
    let blocker = "pod default/web has do not evict annotation";
    reasons.explained(
        FIRST,
        blocked(FIRST, blocker),
        now(),
        "from the controller at http://127.0.0.1:8080".to_string(),
    );
    let v = view_of(&nodes, &pods, SortBy::Creation).with_reasons(&reasons);

    let wide = render_text(&v, 220);
    assert!(
        wide.lines().any(|l| l == "why     from the controller at http://127.0.0.1:8080"),
        "{wide}"
    );
    let header = wide.lines().find(|l| l.starts_with("NAME")).expect(&wide);
    assert!(header.contains("STATUS") && header.ends_with("WHY"), "{wide}");
    let rows: Vec<&str> = wide.lines().filter(|l| l.starts_with("ip-")).collect();
    assert!(rows[0].ends_with(&format!("Ready  consolidation: {blocker}")), "{wide}");
    // Not explained yet.
    assert!(rows[1].ends_with("Ready  …"), "{wide}");

    // Narrower: the reason is cut with `…` at the frame's edge.
    let narrow = render_text(&v, 170);
    let row = narrow.lines().find(|l| l.starts_with(FIRST)).expect(&narrow);
    assert_eq!(row.chars().count(), 170, "{narrow}");
    assert!(row.ends_with("Ready  consolidation: pod default…"), "{narrow}");

    // Without reasons (`--no-reasons`), no column and no line.
    let plain = render_text(&view_of(&nodes, &pods, SortBy::Creation), 220);
    assert!(!plain.contains("WHY") && !plain.contains("\nwhy "), "{plain}");
}

#[test]
fn without_an_explainer_the_rows_show_a_dash_and_the_header_says_why_once() {
    let (nodes, pods) = fixture();
    let mut reasons = Reasons::new("from a view of this command's own (no --controller)".to_string());
    reasons.unavailable("run's settings from the environment: --cluster-name is required".to_string());
    let text = render_text(&view_of(&nodes, &pods, SortBy::Creation).with_reasons(&reasons), 200);
    assert_eq!(text.matches("--cluster-name is required").count(), 1, "{text}");
    assert!(
        text.contains("why     - (no reasons: run's settings from the environment: --cluster-name is required)"),
        "{text}"
    );
    for row in text.lines().filter(|l| l.starts_with("ip-")) {
        assert!(row.ends_with("Ready  -"), "{text}");
    }
}

#[test]
fn reasons_are_asked_round_robin_new_nodes_first_then_the_longest_known() {
    let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let at = |s: i64| now() + jiff::SignedDuration::from_secs(s);
    let min_age = std::time::Duration::from_secs(15);
    let mut reasons = Reasons::new(String::new());
    let shown = names(&["a", "b", "c"]);
    assert_eq!(reasons.next(&shown, at(0), min_age).as_deref(), Some("a"));
    reasons.explained("a", blocked("a", "x"), at(0), String::new());
    reasons.unexplained("b", "node b not found".to_string(), at(1));
    assert_eq!(reasons.next(&shown, at(2), min_age).as_deref(), Some("c"));
    reasons.explained("c", blocked("c", "x"), at(2), String::new());
    assert!(reasons.knows_all(&shown));
    // All known: none until the oldest is `min_age` old, then the oldest.
    assert_eq!(reasons.next(&shown, at(10), min_age), None);
    assert_eq!(reasons.next(&shown, at(15), min_age).as_deref(), Some("a"));
    reasons.explained("a", blocked("a", "y"), at(15), String::new());
    assert_eq!(reasons.next(&shown, at(16), min_age).as_deref(), Some("b"));
    assert_eq!(reasons.text("a"), "consolidation: y");
    assert_eq!(reasons.text("b"), "node b not found");
    // A node no longer shown is forgotten; a new one comes first.
    assert_eq!(reasons.next(&names(&["a", "d"]), at(16), min_age).as_deref(), Some("d"));
    assert!(reasons.get("b").is_none() && reasons.get("a").is_some_and(|k| k.explanation.is_some()));
    // An answer after a failure clears it.
    reasons.unavailable("down".to_string());
    assert_eq!(
        (reasons.text("d"), reasons.note()),
        ("-".to_string(), "- (no reasons: down)".to_string())
    );
    reasons.explained("d", blocked("d", "x"), at(17), "from here".to_string());
    assert_eq!((reasons.is_unavailable(), reasons.note()), (false, "from here".to_string()));
}

#[test]
fn the_selected_row_and_the_open_explanation_are_drawn() {
    let (nodes, pods) = fixture();
    let mut v = view_of(&nodes, &pods, SortBy::Creation);
    v.selected = Some(1);
    let text = render_text(&v, 150);
    assert!(text.lines().any(|l| l.starts_with("ip-")), "{text}");
    let explanation = crate::explain::render::node_text(&blocked(FIRST, "x"), false);
    v.explanation = Some(Pane {
        node: FIRST.to_string(),
        text: None,
        scroll: 0,
    });
    let asking = render_text(&v, 150);
    assert!(asking.contains(&format!("explaining node {FIRST}…")), "{asking}");
    assert!(
        asking.contains(&format!("explain node {FIRST} · ↑↓ PgUp PgDn scroll · Esc, Enter or q: back")),
        "{asking}"
    );
    v.explanation = Some(Pane {
        node: FIRST.to_string(),
        text: Some(explanation.clone()),
        scroll: 1,
    });
    // The pane covers the table: its second line (scrolled by one) shows, the rows do not.
    let open = render_text(&v, 150);
    let second = explanation.lines().nth(1).unwrap();
    assert!(open.contains(second.trim_end()), "{open}");
    assert!(!open.lines().any(|l| l.starts_with("ip-")), "{open}");
    let limit = explanation_scroll_limit(v.explanation.as_ref().unwrap());
    assert_eq!(usize::from(limit), explanation.lines().count() - 1);
}
