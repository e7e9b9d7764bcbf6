//! Parsing of the EventBridge messages the interruption controller receives from its SQS queue
//! (`aws@v0.27.0:pkg/controllers/interruption/parser.go` and `.../messages/*`).
//!
//! A body is one EventBridge envelope; its `version`, `source` and `detail-type` choose the kind:
//!
//! ```text
//! aws.ec2    / EC2 Spot Instance Interruption Warning  → SpotInterruption        detail.instance-id
//! aws.ec2    / EC2 Instance Rebalance Recommendation   → RebalanceRecommendation detail.instance-id
//! aws.health / AWS Health Event (EC2, scheduledChange) → ScheduledChange         detail.affectedEntities[].entityValue
//! aws.ec2    / EC2 Instance State-change Notification  → StateChange             detail.instance-id
//!              (state stopping, stopped, shutting-down or terminated; any other state is a no-op)
//! anything else that is a JSON object                  → NoOp
//! ```
//!
//! Pure: no I/O and no clock. The controller decides what to do with a [`Message`]; a
//! [`ParseError`] means the message cannot be acted on (Karpenter deletes those too).

use std::fmt;
use std::time::SystemTime;

use jiff::Timestamp;
use serde_json::{Map, Value};

/// What a message asks for (Karpenter's kinds; `as_str` gives the `message_type` metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// EC2 will reclaim a spot instance in two minutes.
    SpotInterruption,
    /// A spot instance is at elevated risk of interruption.
    RebalanceRecommendation,
    /// AWS Health scheduled an EC2 change (retirement, maintenance) for the instances.
    ScheduledChange,
    /// The instance is stopping, stopped, shutting down or terminated.
    StateChange,
    /// Nothing to do: an event Karpenter does not act on.
    NoOp,
}

impl Kind {
    /// Every kind, in declaration order (e.g. to initialise metric label values).
    pub const ALL: [Kind; 5] = [
        Kind::SpotInterruption,
        Kind::RebalanceRecommendation,
        Kind::ScheduledChange,
        Kind::StateChange,
        Kind::NoOp,
    ];

    /// The `message_type` label value, exactly Karpenter's `messages.Kind` strings
    /// (`aws@v0.27.0:pkg/controllers/interruption/messages/types.go`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::SpotInterruption => "SpotInterruptionKind",
            Kind::RebalanceRecommendation => "RebalanceRecommendationKind",
            Kind::ScheduledChange => "ScheduledChangeKind",
            Kind::StateChange => "StateChangeKind",
            Kind::NoOp => "NoOpKind",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One parsed queue message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// What the message asks for.
    pub kind: Kind,
    /// The EC2 instances it concerns, deduplicated, in message order; empty for [`Kind::NoOp`].
    pub instance_ids: Vec<String>,
    /// [`Kind::StateChange`] only: the EC2 state, e.g. `"stopped"`.
    pub state: Option<String>,
    /// The envelope's `time`, when present and valid RFC 3339.
    pub event_time: Option<SystemTime>,
    /// The envelope's `id` (`""` when absent).
    pub id: String,
}

/// Why a body is not an actionable message. Never echoes more than ~100 characters of input.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    /// The body is empty or only whitespace.
    #[error("body is empty")]
    Empty,
    /// The body is larger than SQS allows, so it was not parsed.
    #[error("body is {len} bytes, more than the {MAX_BODY_BYTES} an SQS message can hold")]
    TooLarge {
        /// Size of the body in bytes.
        len: usize,
    },
    /// The body is not valid JSON.
    #[error("not JSON: {0}")]
    NotJson(String),
    /// The body is JSON but not an object.
    #[error("not a JSON object: found {found}")]
    NotObject {
        /// The JSON type found instead.
        found: &'static str,
    },
    /// A field the kind needs is absent (or `null`).
    #[error("missing field {0}")]
    MissingField(String),
    /// A field has the wrong JSON type.
    #[error("field {field}: expected {expected}, found {found}")]
    WrongType {
        /// Path of the field, e.g. `detail.instance-id`.
        field: String,
        /// The JSON type the field must have.
        expected: &'static str,
        /// The JSON type found.
        found: &'static str,
    },
    /// A field that must hold an EC2 instance id (`i-` and 8 to 17 lowercase hex digits) does not.
    #[error("field {field}: {value:?} is not an EC2 instance id")]
    InvalidInstanceId {
        /// Path of the field, e.g. `detail.affectedEntities[0].entityValue`.
        field: String,
        /// The value found, truncated.
        value: String,
    },
}

/// SQS's maximum message size; larger bodies are rejected without being parsed.
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// Karpenter only knows version "0" of each event (`aws@v0.27.0:pkg/controllers/interruption/parser.go`
/// keys its parsers by version, source and detail-type); other versions are no-ops.
const EVENT_VERSION: &str = "0";
const EC2_SOURCE: &str = "aws.ec2";
const HEALTH_SOURCE: &str = "aws.health";
const SPOT_INTERRUPTION_DETAIL_TYPE: &str = "EC2 Spot Instance Interruption Warning";
const REBALANCE_RECOMMENDATION_DETAIL_TYPE: &str = "EC2 Instance Rebalance Recommendation";
const STATE_CHANGE_DETAIL_TYPE: &str = "EC2 Instance State-change Notification";
const HEALTH_DETAIL_TYPE: &str = "AWS Health Event";
/// `aws@v0.27.0:pkg/controllers/interruption/messages/scheduledchange/parser.go`.
const HEALTH_SERVICE: &str = "EC2";
const HEALTH_CATEGORY: &str = "scheduledChange";
/// `aws@v0.27.0:pkg/controllers/interruption/messages/statechange/parser.go` `acceptedStates`.
const ACTIONABLE_STATES: [&str; 4] = ["stopping", "stopped", "shutting-down", "terminated"];
/// How much of any input an error message repeats.
const ECHO_CHARS: usize = 100;

/// Parses one SQS message body (an EventBridge envelope) into a [`Message`].
///
/// Well-formed envelopes of events Karpenter does not act on are `Ok` with [`Kind::NoOp`];
/// an empty, oversized or non-JSON body, a non-object, or a known kind without a valid
/// instance id is an error.
pub fn parse(body: &str) -> Result<Message, ParseError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(ParseError::TooLarge { len: body.len() });
    }
    if body.trim().is_empty() {
        return Err(ParseError::Empty);
    }
    let value: Value = serde_json::from_str(body).map_err(|e| ParseError::NotJson(truncate(&e.to_string())))?;
    let envelope = match &value {
        Value::Object(map) => map,
        other => return Err(ParseError::NotObject { found: type_name(other) }),
    };

    let id = optional_str(envelope, "id", "id")?.unwrap_or_default().to_string();
    // Unlike Go's time.Time unmarshalling, a bad time does not make the message unusable.
    let event_time = envelope.get("time").and_then(Value::as_str).and_then(parse_rfc3339);
    let version = optional_str(envelope, "version", "version")?;
    let source = optional_str(envelope, "source", "source")?;
    let detail_type = optional_str(envelope, "detail-type", "detail-type")?;
    let message = |kind, instance_ids, state| Message {
        kind,
        instance_ids,
        state,
        event_time,
        id: id.clone(),
    };
    let noop = || message(Kind::NoOp, Vec::new(), None);

    if version != Some(EVENT_VERSION) {
        return Ok(noop());
    }
    match (source.unwrap_or_default(), detail_type.unwrap_or_default()) {
        (EC2_SOURCE, SPOT_INTERRUPTION_DETAIL_TYPE) => {
            let ids = vec![detail_instance_id(envelope)?];
            Ok(message(Kind::SpotInterruption, ids, None))
        }
        (EC2_SOURCE, REBALANCE_RECOMMENDATION_DETAIL_TYPE) => {
            let ids = vec![detail_instance_id(envelope)?];
            Ok(message(Kind::RebalanceRecommendation, ids, None))
        }
        (EC2_SOURCE, STATE_CHANGE_DETAIL_TYPE) => {
            let detail = detail(envelope)?;
            let state = required_str(detail, "state", "detail.state")?;
            if !ACTIONABLE_STATES.contains(&state) {
                return Ok(noop());
            }
            let ids = vec![detail_instance_id(envelope)?];
            Ok(message(Kind::StateChange, ids, Some(state.to_string())))
        }
        (HEALTH_SOURCE, HEALTH_DETAIL_TYPE) => {
            let detail = detail(envelope)?;
            let service = optional_str(detail, "service", "detail.service")?;
            let category = optional_str(detail, "eventTypeCategory", "detail.eventTypeCategory")?;
            if service != Some(HEALTH_SERVICE) || category != Some(HEALTH_CATEGORY) {
                return Ok(noop());
            }
            Ok(message(Kind::ScheduledChange, affected_instance_ids(detail)?, None))
        }
        _ => Ok(noop()),
    }
}

/// `detail`, which every known kind carries.
fn detail(envelope: &Map<String, Value>) -> Result<&Map<String, Value>, ParseError> {
    match envelope.get("detail") {
        None | Some(Value::Null) => Err(ParseError::MissingField("detail".to_string())),
        Some(Value::Object(map)) => Ok(map),
        Some(other) => Err(wrong_type("detail", "an object", other)),
    }
}

/// `detail.instance-id` of the EC2 events, validated.
fn detail_instance_id(envelope: &Map<String, Value>) -> Result<String, ParseError> {
    let field = "detail.instance-id";
    let id = required_str(detail(envelope)?, "instance-id", field)?;
    instance_id(id, field)
}

/// `detail.affectedEntities[].entityValue` of an AWS Health event: at least one, all valid,
/// duplicates dropped.
fn affected_instance_ids(detail: &Map<String, Value>) -> Result<Vec<String>, ParseError> {
    let entities = match detail.get("affectedEntities") {
        None | Some(Value::Null) => return Err(ParseError::MissingField("detail.affectedEntities".to_string())),
        Some(Value::Array(entities)) => entities,
        Some(other) => return Err(wrong_type("detail.affectedEntities", "an array", other)),
    };
    if entities.is_empty() {
        return Err(ParseError::MissingField("detail.affectedEntities[0].entityValue".to_string()));
    }
    let mut ids: Vec<String> = Vec::with_capacity(entities.len());
    for (i, entity) in entities.iter().enumerate() {
        let path = format!("detail.affectedEntities[{i}]");
        let entity = match entity {
            Value::Object(map) => map,
            other => return Err(wrong_type(&path, "an object", other)),
        };
        let field = format!("{path}.entityValue");
        let id = instance_id(required_str(entity, "entityValue", &field)?, &field)?;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(ids)
}

/// A string field that may be absent or `null`.
fn optional_str<'a>(map: &'a Map<String, Value>, key: &str, field: &str) -> Result<Option<&'a str>, ParseError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(wrong_type(field, "a string", other)),
    }
}

/// A string field that must be present.
fn required_str<'a>(map: &'a Map<String, Value>, key: &str, field: &str) -> Result<&'a str, ParseError> {
    optional_str(map, key, field)?.ok_or_else(|| ParseError::MissingField(field.to_string()))
}

/// `value` when it looks like an EC2 instance id: `i-` and 8 to 17 lowercase hex digits.
fn instance_id(value: &str, field: &str) -> Result<String, ParseError> {
    let is_valid = (10..=19).contains(&value.len())
        && value
            .strip_prefix("i-")
            .is_some_and(|hex| hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    if is_valid {
        Ok(value.to_string())
    } else {
        Err(ParseError::InvalidInstanceId {
            field: field.to_string(),
            value: truncate(value),
        })
    }
}

fn wrong_type(field: &str, expected: &'static str, found: &Value) -> ParseError {
    ParseError::WrongType {
        field: field.to_string(),
        expected,
        found: type_name(found),
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The first [`ECHO_CHARS`] characters of `s`, with `…` when some were cut.
fn truncate(s: &str) -> String {
    match s.char_indices().nth(ECHO_CHARS) {
        Some((end, _)) => format!("{}…", s.get(..end).unwrap_or_default()),
        None => s.to_string(),
    }
}

/// RFC 3339 date-time, as EventBridge writes `time`: `2022-10-01T10:00:00Z`, with `T` or `Z` in
/// either case, a space for the `T`, a fraction of any length (read to the nanosecond) or an offset
/// of at most ±23:59 allowed. jiff reads more (no seconds, `+0200`, `[UTC]` annotations) and no
/// more than nine fractional digits, so the shape is checked here and jiff reads the values.
fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let bytes = s.as_bytes();
    let digits = |b: &[u8], at: usize, n: usize| b.get(at..at + n).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let two = |b: &[u8], at: usize| digits(b, at, 2).then(|| (b[at] - b'0') * 10 + (b[at + 1] - b'0'));
    let date_time = digits(bytes, 0, 4)
        && bytes.get(4) == Some(&b'-')
        && digits(bytes, 5, 2)
        && bytes.get(7) == Some(&b'-')
        && digits(bytes, 8, 2)
        && matches!(bytes.get(10), Some(b'T' | b't' | b' '))
        && digits(bytes, 11, 2)
        && bytes.get(13) == Some(&b':')
        && digits(bytes, 14, 2)
        && bytes.get(16) == Some(&b':')
        && digits(bytes, 17, 2);
    if !date_time {
        return None;
    }
    // The first 19 bytes are ASCII, so these are character boundaries.
    let (whole, mut rest) = s.split_at(19);
    let mut fraction = "";
    if let Some(after_dot) = rest.strip_prefix('.') {
        let count = after_dot.bytes().take_while(u8::is_ascii_digit).count();
        if count == 0 {
            return None;
        }
        fraction = &after_dot[..count.min(9)];
        rest = &after_dot[count..];
    }
    let offset = rest.as_bytes();
    let valid_offset = matches!(rest, "Z" | "z")
        || (offset.len() == 6
            && matches!(offset[0], b'+' | b'-')
            && two(offset, 1).is_some_and(|h| h <= 23)
            && offset[3] == b':'
            && two(offset, 4).is_some_and(|m| m <= 59));
    if !valid_offset {
        return None;
    }
    let dot = if fraction.is_empty() { "" } else { "." };
    format!("{whole}{dot}{fraction}{rest}")
        .parse::<Timestamp>()
        .ok()
        .map(SystemTime::from)
}

#[cfg(test)]
mod tests {
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
}
