use std::time::{Duration, UNIX_EPOCH};

use super::*;

// Shapes as EventBridge delivers them (see the models in
// `aws@v0.27.0:pkg/controllers/interruption/messages/*/model.go`).
const SPOT_INTERRUPTION: &str = r#"{
    "version": "0",
    "id": "1e5527d7-bb36-4607-3370-4164db56a40e",
    "detail-type": "EC2 Spot Instance Interruption Warning",
    "source": "aws.ec2",
    "account": "123456789012",
    "time": "2022-10-01T10:00:00Z",
    "region": "us-east-2",
    "resources": ["arn:aws:ec2:us-east-2:123456789012:instance/i-0b2c4d6e8f0a1b2c3"],
    "detail": {"instance-id": "i-0b2c4d6e8f0a1b2c3", "instance-action": "terminate"}
}"#;

const REBALANCE_RECOMMENDATION: &str = r#"{
    "version": "0",
    "id": "5f1c2a9e-0d3b-4c6e-9a7f-2b8d4e6f1a3c",
    "detail-type": "EC2 Instance Rebalance Recommendation",
    "source": "aws.ec2",
    "account": "123456789012",
    "time": "2022-10-01T10:00:00Z",
    "region": "us-east-2",
    "resources": ["arn:aws:ec2:us-east-2:123456789012:instance/i-0123456789abcdef0"],
    "detail": {"instance-id": "i-0123456789abcdef0"}
}"#;

const SCHEDULED_CHANGE: &str = r#"{
    "version": "0",
    "id": "7fb65329-1628-4cf3-a740-95fb457c1402",
    "detail-type": "AWS Health Event",
    "source": "aws.health",
    "account": "123456789012",
    "time": "2022-10-01T10:00:00Z",
    "region": "us-east-2",
    "resources": ["i-0123456789abcdef0", "i-0fedcba9876543210"],
    "detail": {
        "eventArn": "arn:aws:health:us-east-2::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED_ABC123",
        "service": "EC2",
        "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
        "eventTypeCategory": "scheduledChange",
        "startTime": "Sat, 08 Oct 2022 10:00:00 GMT",
        "endTime": "Sat, 08 Oct 2022 12:00:00 GMT",
        "eventDescription": [{
            "language": "en_US",
            "latestDescription": "EC2 has detected degradation of the underlying hardware hosting your instance."
        }],
        "affectedEntities": [
            {"entityValue": "i-0123456789abcdef0"},
            {"entityValue": "i-0fedcba9876543210"}
        ]
    }
}"#;

const STATE_CHANGE_STOPPING: &str = r#"{
    "version": "0",
    "id": "7bf73129-1428-4cd3-a780-95db273d1602",
    "detail-type": "EC2 Instance State-change Notification",
    "source": "aws.ec2",
    "account": "123456789012",
    "time": "2022-10-01T10:00:00Z",
    "region": "us-east-2",
    "resources": ["arn:aws:ec2:us-east-2:123456789012:instance/i-abcd1111"],
    "detail": {"instance-id": "i-abcd1111", "state": "stopping"}
}"#;

const FIXTURES: [&str; 4] = [SPOT_INTERRUPTION, REBALANCE_RECOMMENDATION, SCHEDULED_CHANGE, STATE_CHANGE_STOPPING];

/// 2022-10-01T10:00:00Z.
fn fixture_time() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_664_618_400)
}

/// `body` with `from` replaced by `to`, which must occur in it.
fn edit(body: &str, from: &str, to: &str) -> String {
    assert!(body.contains(from), "fixture has no {from:?}");
    body.replacen(from, to, 1)
}

fn state_change(state: &str) -> String {
    edit(STATE_CHANGE_STOPPING, r#""state": "stopping""#, &format!(r#""state": "{state}""#))
}

#[test]
fn parses_spot_interruption_warning() {
    let message = parse(SPOT_INTERRUPTION).unwrap();
    assert_eq!(
        message,
        Message {
            kind: Kind::SpotInterruption,
            instance_ids: vec!["i-0b2c4d6e8f0a1b2c3".to_string()],
            state: None,
            event_time: Some(fixture_time()),
            id: "1e5527d7-bb36-4607-3370-4164db56a40e".to_string(),
        }
    );
}

#[test]
fn parses_rebalance_recommendation() {
    let message = parse(REBALANCE_RECOMMENDATION).unwrap();
    assert_eq!(message.kind, Kind::RebalanceRecommendation);
    assert_eq!(message.instance_ids, ["i-0123456789abcdef0"]);
    assert_eq!(message.state, None);
    assert_eq!(message.event_time, Some(fixture_time()));
    assert_eq!(message.id, "5f1c2a9e-0d3b-4c6e-9a7f-2b8d4e6f1a3c");
}

#[test]
fn parses_scheduled_change_with_every_affected_instance() {
    let message = parse(SCHEDULED_CHANGE).unwrap();
    assert_eq!(message.kind, Kind::ScheduledChange);
    assert_eq!(message.instance_ids, ["i-0123456789abcdef0", "i-0fedcba9876543210"]);
    assert_eq!(message.state, None);
    assert_eq!(message.event_time, Some(fixture_time()));
}

#[test]
fn parses_each_actionable_state_change() {
    for state in ["stopping", "stopped", "shutting-down", "terminated"] {
        let message = parse(&state_change(state)).unwrap();
        assert_eq!(message.kind, Kind::StateChange, "{state}");
        assert_eq!(message.instance_ids, ["i-abcd1111"], "{state}");
        assert_eq!(message.state.as_deref(), Some(state));
        assert_eq!(message.id, "7bf73129-1428-4cd3-a780-95db273d1602");
    }
}

#[test]
fn treats_running_and_pending_state_changes_as_no_ops() {
    for state in ["pending", "running", "Stopped", "TERMINATED", ""] {
        let message = parse(&state_change(state)).unwrap();
        assert_eq!(message.kind, Kind::NoOp, "{state:?}");
        assert!(message.instance_ids.is_empty());
        assert_eq!(message.state, None);
        assert_eq!(message.id, "7bf73129-1428-4cd3-a780-95db273d1602");
    }
}

#[test]
fn rejects_state_change_without_state() {
    let body = edit(STATE_CHANGE_STOPPING, r#", "state": "stopping""#, "");
    assert_eq!(parse(&body), Err(ParseError::MissingField("detail.state".to_string())));
}

#[test]
fn treats_unknown_events_as_no_ops() {
    let cases = [
        edit(
            SPOT_INTERRUPTION,
            "EC2 Spot Instance Interruption Warning",
            "EC2 Spot Instance Request Fulfillment",
        ),
        edit(SPOT_INTERRUPTION, r#""source": "aws.ec2""#, r#""source": "aws.autoscaling""#),
        edit(SCHEDULED_CHANGE, r#""source": "aws.health""#, r#""source": "aws.ec2""#),
        edit(SCHEDULED_CHANGE, r#""service": "EC2""#, r#""service": "EBS""#),
        edit(
            SCHEDULED_CHANGE,
            r#""eventTypeCategory": "scheduledChange""#,
            r#""eventTypeCategory": "issue""#,
        ),
        edit(SCHEDULED_CHANGE, r#""service": "EC2","#, ""),
        edit(SPOT_INTERRUPTION, r#""version": "0""#, r#""version": "1""#),
        edit(SPOT_INTERRUPTION, r#""version": "0","#, ""),
        r#"{"hello": "world"}"#.to_string(),
        "{}".to_string(),
    ];
    for body in &cases {
        let message = parse(body).unwrap_or_else(|e| panic!("{body}: {e}"));
        assert_eq!(message.kind, Kind::NoOp, "{body}");
        assert!(message.instance_ids.is_empty(), "{body}");
    }
    assert_eq!(parse(&cases[0]).unwrap().id, "1e5527d7-bb36-4607-3370-4164db56a40e");
    assert_eq!(parse(&cases[0]).unwrap().event_time, Some(fixture_time()));
    assert_eq!(parse("{}").unwrap().id, "");
}

#[test]
fn rejects_garbage() {
    for body in ["garbage", "{not json}", "\u{0}\u{1}", "{\"id\": }", "nul", "{\"a\":1}}"] {
        let err = parse(body).unwrap_err();
        assert!(matches!(err, ParseError::NotJson(_)), "{body:?}: {err:?}");
        assert!(err.to_string().starts_with("not JSON: "), "{err}");
    }
}

#[test]
fn rejects_deeply_nested_json_without_overflowing_the_stack() {
    let body = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert!(matches!(parse(&body), Err(ParseError::NotJson(_))));
    let body = format!("{}{}", "{\"a\":".repeat(20_000), "}".repeat(20_000));
    assert!(matches!(parse(&body), Err(ParseError::NotJson(_))));
}

#[test]
fn rejects_truncated_json() {
    let body = SPOT_INTERRUPTION.get(..SPOT_INTERRUPTION.len() / 2).unwrap();
    assert!(matches!(parse(body), Err(ParseError::NotJson(_))));
}

#[test]
fn rejects_empty_and_whitespace_bodies() {
    for body in ["", " ", "\n\t \r\n"] {
        assert_eq!(parse(body), Err(ParseError::Empty), "{body:?}");
    }
    assert_eq!(ParseError::Empty.to_string(), "body is empty");
}

#[test]
fn rejects_json_that_is_not_an_object() {
    let body = format!("[{SPOT_INTERRUPTION}]");
    assert_eq!(parse(&body), Err(ParseError::NotObject { found: "an array" }));
    assert_eq!(parse("\"text\""), Err(ParseError::NotObject { found: "a string" }));
    assert_eq!(parse("42"), Err(ParseError::NotObject { found: "a number" }));
    assert_eq!(parse("null"), Err(ParseError::NotObject { found: "null" }));
}

#[test]
fn rejects_bodies_larger_than_sqs_allows_without_parsing() {
    let body = " ".repeat(MAX_BODY_BYTES + 1);
    assert_eq!(parse(&body), Err(ParseError::TooLarge { len: MAX_BODY_BYTES + 1 }));
    // Exactly at the limit, a valid message padded with whitespace still parses.
    let body = format!("{SPOT_INTERRUPTION}{}", " ".repeat(MAX_BODY_BYTES - SPOT_INTERRUPTION.len()));
    assert_eq!(parse(&body).unwrap().kind, Kind::SpotInterruption);
}

#[test]
fn rejects_known_kinds_without_an_instance_id() {
    let no_id = edit(SPOT_INTERRUPTION, r#""instance-id": "i-0b2c4d6e8f0a1b2c3", "#, "");
    assert_eq!(parse(&no_id), Err(ParseError::MissingField("detail.instance-id".to_string())));
    assert_eq!(parse(&no_id).unwrap_err().to_string(), "missing field detail.instance-id");

    let null_id = edit(REBALANCE_RECOMMENDATION, r#""i-0123456789abcdef0"}"#, "null}");
    assert_eq!(parse(&null_id), Err(ParseError::MissingField("detail.instance-id".to_string())));

    let no_detail = edit(
        REBALANCE_RECOMMENDATION,
        r#""detail": {"instance-id": "i-0123456789abcdef0"}"#,
        r#""other": 1"#,
    );
    assert_eq!(parse(&no_detail), Err(ParseError::MissingField("detail".to_string())));

    let no_entities = edit(SCHEDULED_CHANGE, r#""affectedEntities""#, r#""unaffectedEntities""#);
    assert_eq!(
        parse(&no_entities),
        Err(ParseError::MissingField("detail.affectedEntities".to_string()))
    );

    let empty_entities = r#"{"version": "0", "source": "aws.health", "detail-type": "AWS Health Event",
        "detail": {"service": "EC2", "eventTypeCategory": "scheduledChange", "affectedEntities": []}}"#;
    assert_eq!(
        parse(empty_entities),
        Err(ParseError::MissingField("detail.affectedEntities[0].entityValue".to_string()))
    );

    let no_value = edit(SCHEDULED_CHANGE, r#"{"entityValue": "i-0fedcba9876543210"}"#, "{}");
    assert_eq!(
        parse(&no_value),
        Err(ParseError::MissingField("detail.affectedEntities[1].entityValue".to_string()))
    );
}

#[test]
fn rejects_fields_of_the_wrong_type() {
    let numeric_id = edit(
        SPOT_INTERRUPTION,
        r#""i-0b2c4d6e8f0a1b2c3", "instance-action""#,
        r#"42, "instance-action""#,
    );
    let err = parse(&numeric_id).unwrap_err();
    assert_eq!(err.to_string(), "field detail.instance-id: expected a string, found a number");

    let string_detail = edit(
        REBALANCE_RECOMMENDATION,
        r#"{"instance-id": "i-0123456789abcdef0"}"#,
        r#""i-0123456789abcdef0""#,
    );
    assert_eq!(
        parse(&string_detail).unwrap_err().to_string(),
        "field detail: expected an object, found a string"
    );

    let array_source = edit(SPOT_INTERRUPTION, r#""source": "aws.ec2""#, r#""source": ["aws.ec2"]"#);
    assert_eq!(
        parse(&array_source).unwrap_err().to_string(),
        "field source: expected a string, found an array"
    );

    let string_entity = edit(
        SCHEDULED_CHANGE,
        r#"{"entityValue": "i-0fedcba9876543210"}"#,
        r#""i-0fedcba9876543210""#,
    );
    assert_eq!(
        parse(&string_entity).unwrap_err().to_string(),
        "field detail.affectedEntities[1]: expected an object, found a string"
    );
}

#[test]
fn rejects_values_that_are_not_instance_ids() {
    let long = format!("i-{}", "0".repeat(500));
    for bad in [
        "",
        "i-",
        "i-1234567",
        "i-0123456789abcdef01",
        "i-0123456789ABCDEF0",
        "h-0123456789abcdef0",
        "0123456789",
        long.as_str(),
    ] {
        let body = edit(
            SPOT_INTERRUPTION,
            r#""instance-id": "i-0b2c4d6e8f0a1b2c3""#,
            &format!(r#""instance-id": "{bad}""#),
        );
        let err = parse(&body).unwrap_err();
        assert!(
            matches!(&err, ParseError::InvalidInstanceId { field, .. } if field == "detail.instance-id"),
            "{bad:?}: {err:?}"
        );
        assert!(err.to_string().chars().count() < 200, "error echoes too much: {err}");
    }
    let body = edit(
        SCHEDULED_CHANGE,
        r#"{"entityValue": "i-0fedcba9876543210"}"#,
        r#"{"entityValue": "vol-0123456789abcdef0"}"#,
    );
    assert_eq!(
        parse(&body).unwrap_err().to_string(),
        r#"field detail.affectedEntities[1].entityValue: "vol-0123456789abcdef0" is not an EC2 instance id"#
    );
}

#[test]
fn accepts_instance_ids_of_both_lengths() {
    for id in ["i-abcd1111", "i-0123456789abcdef0"] {
        let body = edit(
            SPOT_INTERRUPTION,
            "i-0b2c4d6e8f0a1b2c3\", \"instance-action",
            &format!("{id}\", \"instance-action"),
        );
        assert_eq!(parse(&body).unwrap().instance_ids, [id]);
    }
}

#[test]
fn deduplicates_affected_instances_in_message_order() {
    let body = edit(
        SCHEDULED_CHANGE,
        r#"{"entityValue": "i-0fedcba9876543210"}"#,
        r#"{"entityValue": "i-0fedcba9876543210"}, {"entityValue": "i-0123456789abcdef0"}, {"entityValue": "i-0fedcba9876543210"}"#,
    );
    assert_eq!(parse(&body).unwrap().instance_ids, ["i-0123456789abcdef0", "i-0fedcba9876543210"]);
}

#[test]
fn leaves_event_time_empty_when_time_is_missing_or_invalid() {
    let missing = edit(SPOT_INTERRUPTION, r#""time": "2022-10-01T10:00:00Z","#, "");
    let message = parse(&missing).unwrap();
    assert_eq!(message.kind, Kind::SpotInterruption);
    assert_eq!(message.event_time, None);

    for bad in [
        r#""yesterday""#,
        r#""2022-10-01 10:00:00""#,
        r#""2022-13-01T10:00:00Z""#,
        r#""2022-02-30T10:00:00Z""#,
        "1664618400",
        "null",
    ] {
        let body = edit(SPOT_INTERRUPTION, r#""2022-10-01T10:00:00Z""#, bad);
        let message = parse(&body).unwrap_or_else(|e| panic!("{bad}: {e}"));
        assert_eq!(message.kind, Kind::SpotInterruption, "{bad}");
        assert_eq!(message.event_time, None, "{bad}");
    }
}

#[test]
fn parses_rfc3339_times() {
    let at = |secs: u64, nanos: u32| Some(UNIX_EPOCH + Duration::new(secs, nanos));
    assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), at(0, 0));
    assert_eq!(parse_rfc3339("2022-10-01T10:00:00Z"), at(1_664_618_400, 0));
    assert_eq!(parse_rfc3339("2022-10-01t10:00:00z"), at(1_664_618_400, 0));
    assert_eq!(parse_rfc3339("2022-10-01T12:30:00+02:30"), at(1_664_618_400, 0));
    assert_eq!(parse_rfc3339("2022-10-01T05:00:00-05:00"), at(1_664_618_400, 0));
    assert_eq!(parse_rfc3339("2022-10-01T10:00:00.5Z"), at(1_664_618_400, 500_000_000));
    assert_eq!(parse_rfc3339("2022-10-01T10:00:00.123456789Z"), at(1_664_618_400, 123_456_789));
    assert_eq!(parse_rfc3339("2022-10-01T10:00:00.1234567891234Z"), at(1_664_618_400, 123_456_789));
    assert_eq!(parse_rfc3339("2024-02-29T00:00:00Z"), at(1_709_164_800, 0));
    assert_eq!(
        parse_rfc3339("1969-12-31T23:59:59Z"),
        UNIX_EPOCH.checked_sub(Duration::from_secs(1))
    );

    for bad in [
        "",
        "2022-10-01",
        "2022-10-01T10:00:00",
        "2022-10-01T10:00Z",
        "22-10-01T10:00:00Z",
        "2022-1-01T10:00:00Z",
        "2022-10-01T10:00:00.Z",
        "2022-10-01T10:00:00ZZ",
        "2022-10-01T10:00:00+0200",
        "2022-10-01T10:00:00+24:00",
        "2022-10-01T10:00:00+02:60",
        "2022-10-01T10:00:00++2:00",
        "2022-10-01T10:00+02:00",
        "2022-10-01T24:00:00Z",
        "2022-10-01T10:60:00Z",
        "2023-02-29T10:00:00Z",
        "2022-00-01T10:00:00Z",
        "2022-10-00T10:00:00Z",
        "+022-10-01T10:00:00Z",
        "2022-10-01T10:00:00.5",
        "2022-10-01T10:00:00Z ",
        "２０２２-10-01T10:00:00Z",
    ] {
        assert_eq!(parse_rfc3339(bad), None, "{bad:?}");
    }
}

#[test]
fn every_prefix_of_a_valid_message_parses_or_errors() {
    for fixture in FIXTURES {
        for end in (0..=fixture.len()).filter(|&i| fixture.is_char_boundary(i)) {
            let _ = parse(fixture.get(..end).unwrap());
        }
        assert!(parse(fixture).is_ok());
    }
}

#[test]
fn single_byte_corruptions_never_panic() {
    for fixture in FIXTURES {
        for at in 0..fixture.len() {
            for replacement in ["", "\"", "{", "]", "0", "\\", "é", "\u{0}"] {
                let mut body = fixture.to_string();
                body.replace_range(at..at + 1, replacement);
                let _ = parse(&body);
            }
        }
    }
}

#[test]
fn errors_never_echo_more_than_a_hundred_characters_of_input() {
    let id = format!("i-{}", "é".repeat(10_000));
    let body = edit(
        SPOT_INTERRUPTION,
        "i-0b2c4d6e8f0a1b2c3\", \"instance-action",
        &format!("{id}\", \"instance-action"),
    );
    match parse(&body) {
        Err(ParseError::InvalidInstanceId { value, .. }) => assert_eq!(value.chars().count(), ECHO_CHARS + 1),
        other => panic!("{other:?}"),
    }
    assert_eq!(truncate("short"), "short");
}

#[test]
fn labels_match_karpenter_message_kinds() {
    let labels: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
    assert_eq!(
        labels,
        [
            "SpotInterruptionKind",
            "RebalanceRecommendationKind",
            "ScheduledChangeKind",
            "StateChangeKind",
            "NoOpKind"
        ]
    );
    assert_eq!(Kind::NoOp.to_string(), "NoOpKind");
}
