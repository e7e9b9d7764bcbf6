//! The admission oracle: what must hold of `webhook::admission::review`'s answer to any body,
//! for the fuzzer (`tests/fuzz_admission.rs`, which includes this file). For every input:
//!
//! 1. **The uid.** The body is read as a JSON tree (`serde_json::Value`; a repeated key keeps its
//!    last value, as the webhook's own reading does). When it reads and `request.uid` is a
//!    non-empty string, the answer must be HTTP 200 with `response.uid` equal to it; when it
//!    reads without one, HTTP 400. A body that is UTF-8 but nested past the tree reader's 128
//!    levels is read again skipping every value but `request.uid` (no depth limit), with the same
//!    rule. A body that is not JSON (bad syntax, invalid UTF-8, a lone surrogate escape) may be
//!    refused with 400 or answered with 200, but a 200 must carry the uid that skipping read
//!    finds: the webhook reads the fields it skips without checking their UTF-8 either. No other
//!    HTTP status. Every answer is an AdmissionReview of `admission.k8s.io/v1` with a boolean
//!    `allowed`.
//! 2. **A patch.** Only `/mutate` answers with one, only when allowing, with `patchType:
//!    JSONPatch`. It must decode (base64), parse as an RFC 6902 JSON Patch, touch only `/spec`
//!    (every `path` and `from`), and apply to `request.object` (the last `object` of the last
//!    `request`). The patched object is sent again, in the same review (uid, kind, operation,
//!    name, old object):
//!    - to `/validate`: allowed whenever the unpatched object is (defaults never make a valid
//!      object invalid); when the unpatched object is denied, the patched one may be denied too
//!      (`/mutate` does not validate, as Kubernetes calls mutating webhooks before validating
//!      ones, so an invalid object stays invalid after its defaults), and that denial must name
//!      a field of the patched object by rule 3;
//!    - to `/mutate`: allowed with no patch or an empty one (defaults are idempotent).
//! 3. **A denial names its field.** A denial's message is one of the webhook's forms, and the
//!    field it names exists in the input:
//!    - `<Kind> "<name>" is invalid: <path>: …` (Kind Provisioner or AWSNodeTemplate): the first
//!      error's path, rooted at `request.object`, must be walkable in the object: each segment
//!      (`.key` or `[key]` for a member, `[i]` for an array element, a key holding any
//!      characters) names a member or element present in the input (a null value counts as
//!      present), except that the path may end, after a node present as an object or null, in
//!      a missing member named by a plain name (letters and digits), a missing map entry
//!      `[key]`, or both (`.evictionSoftGracePeriod[memory.available]` when the soft threshold
//!      has no grace period): that is how a missing required field is named. The path `object`
//!      names the object itself. Only the first error is walked: the errors are `; `-joined and
//!      keys may hold `; ` themselves.
//!    - `malformed AdmissionReview: <path>: …`: the same walk, rooted at the review;
//!    - `malformed AdmissionReview: unknown operation …`: `request.operation` is present;
//!    - `<OPERATION> request carries no object`: `request.object` is absent, null or not an
//!      object;
//!    - `karpenter-rs does not serve …`: `request.kind` is present;
//!    - `expected kind AdmissionReview of admission.k8s.io/v1, got …`: the review's own
//!      `apiVersion` or `kind` is not that;
//!    - with HTTP 400 only: `request body is not JSON: …` or `not an AdmissionReview:
//!      request.uid is …`.
//!
//!    A body that is not UTF-8 has no JSON tree to walk: its denials are counted apart, checked
//!    only for a message.
//! 4. **An array is not an object.** A CREATE or UPDATE whose object holds a JSON array where
//!    its CRD's schema has an object (for an inline `spec.provider`, the AWSNodeTemplate spec's
//!    schema) is denied: serde's derived structs would read the array as their fields in order.
//!    `/mutate` may allow one inside an inline `spec.provider`, whose contents it keeps as they
//!    are (the Provisioner's schema keeps any object there); `/validate` reads them and must deny.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine;
use karpenter_rs::apis::ApiSettings;
use karpenter_rs::webhook::admission::{review, Endpoint};
use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::Value;

const REVIEW_API_VERSION: &str = "admission.k8s.io/v1";

/// What the webhook's answer to `body` was, when every rule held; else what broke.
pub fn check(endpoint: Endpoint, body: &[u8], settings: &ApiSettings) -> Result<&'static str, String> {
    let answer = rules(endpoint, body, settings)?;
    if answer.starts_with("allowed") && writes(body) {
        if let Some(path) = array_for_an_object(body) {
            // `/mutate` keeps an inline provider's contents as they are (no defaults there), as
            // the Provisioner's schema does: only `/validate` reads them.
            let inside_provider = path.starts_with(".spec.provider.") || path.starts_with(".spec.provider[");
            if endpoint == Endpoint::Validate || !inside_provider {
                return Err(format!("allowed an object holding an array at {path} where its schema has an object"));
            }
        }
    }
    Ok(answer)
}

/// Whether `body`'s operation is one the webhook reads the object of (CREATE or UPDATE).
fn writes(body: &[u8]) -> bool {
    let request = std::str::from_utf8(body).ok().and_then(members).and_then(|m| members(m.get("request")?.get()));
    let operation = request.and_then(|r| serde_json::from_str::<String>(r.get("operation")?.get()).ok());
    matches!(operation.as_deref(), Some("CREATE" | "UPDATE"))
}

/// Rules 1 to 3.
fn rules(endpoint: Endpoint, body: &[u8], settings: &ApiSettings) -> Result<&'static str, String> {
    let outcome = review(endpoint, body, settings);
    let answer: Value = serde_json::from_slice(&outcome.body).map_err(|e| format!("answer is not JSON: {e}"))?;
    let response = &answer["response"];
    if answer["apiVersion"] != REVIEW_API_VERSION || answer["kind"] != "AdmissionReview" {
        return Err(format!("answer is not an AdmissionReview of {REVIEW_API_VERSION}: {answer}"));
    }
    let (Some(allowed), Some(answered_uid)) = (response["allowed"].as_bool(), response["uid"].as_str()) else {
        return Err(format!("answer without a boolean allowed and a uid: {answer}"));
    };
    let message = response["status"]["message"].as_str().unwrap_or_default();
    match (expected_uid(body), outcome.http_status) {
        (Uid::Must(Some(uid)), 200) | (Uid::May(Some(uid)), 200) if uid == answered_uid => {}
        (Uid::Must(None) | Uid::May(_), 400) => {
            return if allowed || !answered_uid.is_empty() {
                Err(format!("a 400 answer that allows or carries a uid: {answer}"))
            } else if message.starts_with("request body is not JSON: ")
                || message.starts_with("not an AdmissionReview: request.uid is ")
            {
                Ok("refused (400)")
            } else {
                Err(format!("a 400 answer of no known form: {message:?}"))
            };
        }
        (expected, status) => return Err(format!("HTTP {status} answering uid {answered_uid:?}, expected {expected}")),
    }
    if !allowed {
        if message.is_empty() {
            return Err(format!("a denial without a message: {answer}"));
        }
        let Ok(text) = std::str::from_utf8(body) else {
            return Ok("denied (body not UTF-8: field not walked)");
        };
        return names_its_field(message, text, None).map(|()| "denied");
    }
    if response.get("status").is_some() {
        return Err(format!("an allowed answer with a status: {answer}"));
    }
    let Some(patch) = response.get("patch") else {
        return Ok("allowed");
    };
    if endpoint != Endpoint::Mutate || response["patchType"] != "JSONPatch" {
        return Err(format!("a patch from {} or without patchType JSONPatch: {answer}", endpoint.path()));
    }
    check_patch(patch, body, settings)
}

/// Rule 2, for the patch `/mutate` answered `body` with.
fn check_patch(patch: &Value, body: &[u8], settings: &ApiSettings) -> Result<&'static str, String> {
    let encoded = patch.as_str().ok_or_else(|| format!("patch is not a string: {patch}"))?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|e| format!("patch is not base64: {e}"))?;
    let operations: json_patch::Patch =
        serde_json::from_slice(&decoded).map_err(|e| format!("patch is not a JSON Patch ({e}): {}", String::from_utf8_lossy(&decoded)))?;
    if operations.0.is_empty() {
        return Err("an empty patch sent as a patch".to_string());
    }
    let text = String::from_utf8_lossy(&decoded);
    for op in serde_json::from_slice::<Vec<Value>>(&decoded).expect("a JSON Patch is an array") {
        for pointer in [&op["path"], &op["from"]].into_iter().filter_map(Value::as_str) {
            if pointer != "/spec" && !pointer.starts_with("/spec/") {
                return Err(format!("patch touches {pointer:?}, outside /spec: {text}"));
            }
        }
    }
    let Some(envelope) = std::str::from_utf8(body).ok().and_then(members) else {
        return Ok("allowed with a patch (body not UTF-8: not applied)");
    };
    let Some(request) = envelope.get("request").and_then(|r| members(r.get())) else {
        return Err("a patch for a review whose request is not an object".to_string());
    };
    let object = request.get("object").ok_or("a patch for a review without an object")?;
    let mut object_members = members(object.get()).ok_or("a patch for an object that is not a JSON object")?;
    // The patch touches only /spec: applied to the spec alone, in an object holding nothing
    // else, so that the rest (nested past the tree reader's depth, say) stays as sent.
    let mut holder = serde_json::Map::new();
    if let Some(spec) = object_members.get("spec") {
        let spec: Value = serde_json::from_str(spec.get()).map_err(|e| format!("a patch for a spec that does not read as a tree: {e}"))?;
        holder.insert("spec".to_string(), spec);
    }
    let mut holder = Value::Object(holder);
    json_patch::patch(&mut holder, &operations).map_err(|e| format!("patch does not apply: {e}: {text}"))?;
    match holder.get("spec") {
        Some(spec) => object_members.insert("spec".to_string(), RawValue::from_string(spec.to_string()).expect("a tree encodes as JSON")),
        None => object_members.remove("spec"),
    };
    let patched = serde_json::to_string(&object_members).expect("raw members encode");
    let again = |object: &str| {
        let mut r = String::with_capacity(object.len() + 256);
        r.push_str(r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"#);
        r.push_str(&serde_json::to_string(&expected_text(&request, "uid")).expect("a string encodes"));
        for field in ["kind", "operation", "name", "oldObject"] {
            if let Some(raw) = request.get(field) {
                r.push_str(&format!(",{:?}:{}", field, raw.get()));
            }
        }
        r.push_str(r#","object":"#);
        r.push_str(object);
        r.push_str("}}");
        r
    };
    let patched_review = again(&patched);
    let first = validate_verdict(body, settings)?;
    let second = validate_verdict(patched_review.as_bytes(), settings)?;
    if let Err(message) = &second {
        if first.is_ok() {
            return Err(format!("defaults made a valid object invalid: {message}; patch {text}"));
        }
        names_its_field(message, &patched_review, Some("the patched object"))?;
    }
    let outcome = review(Endpoint::Mutate, patched_review.as_bytes(), settings);
    let answer: Value = serde_json::from_slice(&outcome.body).map_err(|e| format!("answer is not JSON: {e}"))?;
    let response = &answer["response"];
    if outcome.http_status != 200 || response["allowed"] != true {
        return Err(format!("/mutate does not allow its own patched object: {answer}; patch {text}"));
    }
    if let Some(second_patch) = response["patch"].as_str() {
        let second_patch = base64::engine::general_purpose::STANDARD.decode(second_patch).unwrap_or_default();
        if !matches!(serde_json::from_slice::<Vec<Value>>(&second_patch), Ok(ops) if ops.is_empty()) {
            return Err(format!(
                "mutating twice patched again: {} after {text}",
                String::from_utf8_lossy(&second_patch)
            ));
        }
    }
    Ok(match second {
        Ok(()) => "allowed with a patch (patched object valid)",
        Err(_) => "allowed with a patch (object and patched object invalid)",
    })
}

/// `/validate`'s verdict on `body`: allowed, or denied with its message.
fn validate_verdict(body: &[u8], settings: &ApiSettings) -> Result<Result<(), String>, String> {
    let outcome = review(Endpoint::Validate, body, settings);
    let answer: Value = serde_json::from_slice(&outcome.body).map_err(|e| format!("answer is not JSON: {e}"))?;
    if outcome.http_status != 200 {
        return Err(format!("/validate answers HTTP {} to a review /mutate patched: {answer}", outcome.http_status));
    }
    Ok(match answer["response"]["allowed"].as_bool() {
        Some(true) => Ok(()),
        _ => Err(answer["response"]["status"]["message"].as_str().unwrap_or_default().to_string()),
    })
}

/// The text of a string member, empty when absent or not a string.
fn expected_text(members: &BTreeMap<String, Box<RawValue>>, name: &str) -> String {
    members
        .get(name)
        .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
        .unwrap_or_default()
}

/// Rule 3: `message` names a field present in `body` (a review); `what` says which object the
/// message is about, for the failure.
fn names_its_field(message: &str, body: &str, what: Option<&str>) -> Result<(), String> {
    let fail = |why: &str| Err(format!("{why}: {message:?}{}", what.map(|w| format!(" (about {w})")).unwrap_or_default()));
    let review = members(body);
    let request = review.as_ref().and_then(|r| r.get("request")).and_then(|r| members(r.get()));
    let has = |name: &str| request.as_ref().is_some_and(|r| r.contains_key(name));
    if let Some(rest) = message.strip_prefix("malformed AdmissionReview: ") {
        if rest.starts_with("unknown operation ") {
            return if has("operation") { Ok(()) } else { fail("an unknown operation named without one") };
        }
        return if walk(body, rest, true) { Ok(()) } else { fail("a malformed review naming no field it has") };
    }
    if message.starts_with("expected kind AdmissionReview of admission.k8s.io/v1, got ") {
        let text = |name| review.as_ref().map(|r| expected_text(r, name)).unwrap_or_default();
        return if text("apiVersion") != REVIEW_API_VERSION || text("kind") != "AdmissionReview" {
            Ok(())
        } else {
            fail("a review of the right version refused as another")
        };
    }
    if message.ends_with(" request carries no object") {
        let object = request.as_ref().and_then(|r| r.get("object"));
        return if object.is_none_or(|o| !o.get().starts_with('{')) {
            Ok(())
        } else {
            fail("an object said to be missing")
        };
    }
    if message.starts_with("karpenter-rs does not serve ") {
        return if has("kind") { Ok(()) } else { fail("a kind not served named without one") };
    }
    let Some(rest) = ["Provisioner ", "AWSNodeTemplate "].iter().find_map(|kind| message.strip_prefix(kind)) else {
        return fail("a denial of no known form");
    };
    let Some(errors) = skip_quoted(rest).and_then(|r| r.strip_prefix(" is invalid: ")) else {
        return fail("an invalid object denied without its name and errors");
    };
    let Some(object) = request.as_ref().and_then(|r| r.get("object")) else {
        return fail("an object's field named in a review without one");
    };
    if walk(object.get(), errors, true) {
        Ok(())
    } else {
        fail("a denial naming no field the object has")
    }
}

/// `text` after the Rust-debug-quoted string it starts with (`"a \"b\""`).
fn skip_quoted(text: &str) -> Option<&str> {
    let mut chars = text.strip_prefix('"')?.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '"' => return Some(&text[i + 2..]),
            _ => {}
        }
    }
    None
}

/// The members of a JSON object, the last of a repeated key; none for anything else. Values are
/// kept as text, so that no depth limit applies.
fn members(json: &str) -> Option<BTreeMap<String, Box<RawValue>>> {
    if !json.trim_start().starts_with('{') {
        return None;
    }
    serde_json::from_str(json).ok()
}

/// Whether the field path at the start of `rest` (ended by `: `) walks in the JSON `node`, by
/// rule 3. `at_root`: the path's first segment has no `.` or `[` before it.
fn walk(node: &str, rest: &str, at_root: bool) -> bool {
    if !at_root && rest.starts_with(": ") {
        return true;
    }
    if at_root && rest.starts_with("object: ") {
        return true;
    }
    let node = node.trim_start();
    // What may follow a present node when the field is missing: `.name`, `[key]` or `.name[key]`.
    let missing_last = |rest: &str| {
        let plain = |s: &str| s.len() - s.trim_start_matches(|c: char| c.is_ascii_alphanumeric()).len();
        // `.name` (`name` at the root), when there is one.
        let named = match (at_root, rest.strip_prefix('.')) {
            (true, _) => plain(rest),
            (false, Some(r)) if plain(r) > 0 => 1 + plain(r),
            (false, _) => 0,
        };
        let after = &rest[named..];
        // `[key]`, when there is one: up to the first `]: `.
        let keyed = after.strip_prefix('[').and_then(|r| r.find("]: ")).map_or(0, |end| end + 2);
        (named > 0 || keyed > 0) && after[keyed..].starts_with(": ")
    };
    if node.starts_with('{') {
        let Some(children) = members(node) else {
            return false;
        };
        for (key, child) in &children {
            let after = if at_root {
                rest.strip_prefix(key.as_str())
            } else {
                rest.strip_prefix('.')
                    .and_then(|r| r.strip_prefix(key.as_str()))
                    .or_else(|| rest.strip_prefix('[').and_then(|r| r.strip_prefix(key.as_str())).and_then(|r| r.strip_prefix(']')))
            };
            if after.is_some_and(|after| walk(child.get(), after, false)) {
                return true;
            }
        }
        missing_last(rest)
    } else if node.starts_with('[') {
        let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(node) else {
            return false;
        };
        let Some((index, after)) = rest.strip_prefix('[').and_then(|r| r.split_once(']')) else {
            return false;
        };
        match index.parse::<usize>().ok().and_then(|i| items.get(i)) {
            Some(item) => walk(item.get(), after, false),
            None => false,
        }
    } else if node.starts_with("null") {
        missing_last(rest)
    } else {
        false
    }
}

/// The uid the answer must carry.
enum Uid {
    /// The body is JSON: HTTP 200 with this uid, or 400 when there is none.
    Must(Option<String>),
    /// The body is not JSON: 400, or 200 with this uid.
    May(Option<String>),
}

impl fmt::Display for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Uid::Must(Some(uid)) => write!(f, "HTTP 200 with uid {uid:?}"),
            Uid::Must(None) => write!(f, "HTTP 400 (no uid)"),
            Uid::May(Some(uid)) => write!(f, "HTTP 400, or 200 with uid {uid:?} (body not JSON)"),
            Uid::May(None) => write!(f, "HTTP 400 (body not JSON, no uid)"),
        }
    }
}

/// Rule 1: the uid `body` carries, and how surely.
fn expected_uid(body: &[u8]) -> Uid {
    match serde_json::from_slice::<Value>(body) {
        Ok(tree) => Uid::Must(tree.pointer("/request/uid").and_then(Value::as_str).filter(|u| !u.is_empty()).map(str::to_string)),
        // The tree reader stops at its depth limit: the rest of the body is JSON when the
        // skipping read gets through it and every byte is UTF-8 (which that read leaves unchecked).
        Err(e) if e.to_string().starts_with("recursion limit exceeded") && std::str::from_utf8(body).is_ok() => {
            Uid::Must(skipping_read_uid(body))
        }
        Err(_) => Uid::May(skipping_read_uid(body)),
    }
}

/// `request.uid` read skipping every other value (the last of a repeated key), when it is a
/// non-empty string.
fn skipping_read_uid(body: &[u8]) -> Option<String> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let uid = Member::<Member<UidText>>::deserialize(&mut de).ok()?;
    de.end().ok()?;
    uid.0.and_then(|r| r.0).and_then(|u| u.0).filter(|u| !u.is_empty())
}

/// Member `T::NAME` of a JSON object, the last if repeated; none when the value is no object.
struct Member<T>(Option<T>);

/// The value read as the uid: its text when a string.
struct UidText(Option<String>);

trait Named {
    const NAME: &'static str;
}
impl Named for Member<UidText> {
    const NAME: &'static str = "request";
}
impl Named for UidText {
    const NAME: &'static str = "uid";
}

impl<'de, T: Named + Deserialize<'de>> Deserialize<'de> for Member<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Named + Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Member<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Member<T>, A::Error> {
                let mut found = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key == T::NAME {
                        found = Some(map.next_value::<T>()?);
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(Member(found))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Member<T>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Member(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Member<T>, E> {
                Ok(Member(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Member<T>, E> {
                Ok(Member(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Member<T>, E> {
                Ok(Member(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Member<T>, E> {
                Ok(Member(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Member<T>, E> {
                Ok(Member(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Member<T>, E> {
                Ok(Member(None))
            }
        }
        deserializer.deserialize_any(V(std::marker::PhantomData))
    }
}

impl<'de> Deserialize<'de> for UidText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = UidText;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<UidText, E> {
                Ok(UidText(Some(v.to_string())))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<UidText, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(UidText(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<UidText, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(UidText(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<UidText, E> {
                Ok(UidText(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<UidText, E> {
                Ok(UidText(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<UidText, E> {
                Ok(UidText(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<UidText, E> {
                Ok(UidText(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<UidText, E> {
                Ok(UidText(None))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// The path of a JSON array in `request.object` of `body` where the CRD's schema of the object's
/// kind (`request.kind.kind`) has an object, if there is one.
pub fn array_for_an_object(body: &[u8]) -> Option<String> {
    static SCHEMAS: std::sync::OnceLock<Vec<(String, Value)>> = std::sync::OnceLock::new();
    let schemas = SCHEMAS.get_or_init(|| {
        karpenter_rs::crds::render()
            .into_iter()
            .map(|(_, yaml)| {
                let crd: Value = serde_yaml_ng::from_str(&yaml).expect("a CRD is YAML");
                let kind = crd["spec"]["names"]["kind"].as_str().expect("a CRD names its kind").to_string();
                (kind, crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone())
            })
            .collect()
    });
    let request = members(std::str::from_utf8(body).ok()?)?.get("request").and_then(|r| members(r.get()))?;
    let kind: Value = serde_json::from_str(request.get("kind")?.get()).ok()?;
    let (_, schema) = schemas.iter().find(|(k, _)| kind["kind"] == k.as_str())?;
    // A Provisioner's inline `spec.provider` is an AWSNodeTemplate's spec, read as one though its
    // schema keeps it as any object.
    let provider = schemas
        .iter()
        .find(|(k, _)| k == "AWSNodeTemplate")
        .map(|(_, s)| &s["properties"]["spec"])
        .expect("both CRDs are rendered");
    // Walked as text, level by level: the object may be nested past a tree's depth elsewhere.
    fn find(schema: &Value, raw: &str, path: String, provider: &Value) -> Option<String> {
        let schema = if path == ".spec.provider" { provider } else { schema };
        let raw = raw.trim_start();
        if raw.starts_with('[') {
            if schema["type"] == "object" {
                return Some(path);
            }
            let items: Vec<&RawValue> = serde_json::from_str(raw).ok()?;
            return items
                .iter()
                .enumerate()
                .find_map(|(i, item)| find(&schema["items"], item.get(), format!("{path}[{i}]"), provider));
        }
        members(raw)?.iter().find_map(|(k, v)| {
            let child = schema["properties"].get(k).or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()))?;
            find(child, v.get(), format!("{path}.{k}"), provider)
        })
    }
    find(schema, request.get("object")?.get(), String::new(), provider)
}
