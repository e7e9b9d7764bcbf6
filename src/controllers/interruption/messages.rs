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
mod tests;
