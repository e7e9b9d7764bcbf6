//! Strict decoding of JSON into API types: a value that does not fit becomes one `FieldError`
//! naming the field path and the offending key or value, with a "did you mean" hint for
//! misspelled keys. No I/O here.

use serde::de::DeserializeOwned;

use super::field_error::{FieldError, Path, Raw};

/// Decodes `value` into `T`, reporting the first problem under `root` (e.g. `spec.provider`).
pub fn decode<T: DeserializeOwned>(value: &serde_json::Value, root: &Path) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(value).map_err(|err| {
        let inner = err.inner().to_string();
        let mut path = root.clone();
        let mut offending = Some(value);
        for segment in err.path().iter() {
            path = match segment {
                serde_path_to_error::Segment::Seq { index } => {
                    offending = offending.and_then(|v| v.get(*index));
                    path.index(*index)
                }
                serde_path_to_error::Segment::Map { key } => {
                    offending = offending.and_then(|v| v.get(key));
                    path.child(key)
                }
                serde_path_to_error::Segment::Enum { variant } => path.child(variant),
                serde_path_to_error::Segment::Unknown => path,
            };
        }
        describe(path, &inner, offending)
    })
}

/// Turns serde's message into a field error: unknown keys become "unknown field" with a hint,
/// type mismatches keep serde's wording ("invalid type: floating point `0.067`, expected a string").
fn describe(path: Path, message: &str, offending: Option<&serde_json::Value>) -> FieldError {
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let (field, expected) = rest.split_once('`').unwrap_or((rest, ""));
        let known: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
        let mut reason = "unknown field".to_string();
        if let Some(hint) = did_you_mean(field, &known) {
            reason.push_str(&format!(", did you mean {hint:?}?"));
        } else if !known.is_empty() {
            reason.push_str(&format!("; known fields are {}", known.join(", ")));
        }
        // serde reports an unknown key at the path of its parent object.
        let field_path = if path.as_str().ends_with(&format!(".{field}")) {
            path
        } else {
            path.child(field)
        };
        return FieldError::forbidden(field_path, reason);
    }
    if let Some(rest) = message.strip_prefix("missing field `") {
        let field = rest.split('`').next().unwrap_or(rest);
        return FieldError::required(path.child(field), "missing required field");
    }
    let shown = offending.map(|v| v.to_string()).unwrap_or_else(|| "?".to_string());
    FieldError::invalid(path, Raw(shown), message.to_string())
}

/// The known name closest to `given` when it is close enough to be a typo.
pub fn did_you_mean<'a>(given: &str, known: &[&'a str]) -> Option<&'a str> {
    let lower = given.to_ascii_lowercase();
    known
        .iter()
        .map(|k| (edit_distance(&lower, &k.to_ascii_lowercase()), *k))
        .filter(|(d, k)| *d <= 3.max(k.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Levenshtein distance, for "did you mean" hints.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::v1alpha1::AwsProvider;
    use serde_json::json;

    #[test]
    fn names_unknown_field_with_hint() {
        let err = decode::<AwsProvider>(&json!({"securityGroupSelecter": {}}), &Path::new("spec.provider")).unwrap_err();
        assert_eq!(err.path.as_str(), "spec.provider.securityGroupSelecter");
        assert!(err.reason.contains("did you mean \"securityGroupSelector\""), "{err}");
    }

    #[test]
    fn names_wrongly_typed_value() {
        let err = decode::<AwsProvider>(&json!({"spotPrice": 0.067}), &Path::new("spec.provider")).unwrap_err();
        assert_eq!(err.path.as_str(), "spec.provider.spotPrice");
        assert!(err.to_string().contains("0.067"), "{err}");
    }

    #[test]
    fn names_nested_fields() {
        let err = decode::<AwsProvider>(
            &json!({"metadataOptions": {"httpPutResponseHopLimit": "2"}}),
            &Path::new("spec.provider"),
        )
        .unwrap_err();
        assert_eq!(err.path.as_str(), "spec.provider.metadataOptions.httpPutResponseHopLimit");
    }

    #[test]
    fn suggests_only_close_names() {
        assert_eq!(did_you_mean("subnetselector", &["subnetSelector", "tags"]), Some("subnetSelector"));
        assert_eq!(did_you_mean("zzzzzzzz", &["subnetSelector", "tags"]), None);
    }
}
