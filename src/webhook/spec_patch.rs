//! The JSON patch `/mutate` answers with: the difference between a spec as decoded and the same
//! spec after its defaults, with paths under `/spec`. No I/O.
//!
//! A spec is encoded once before and once after the defaults, each top-level field on its own
//! (`Fields::of`, a serializer that hands every field to serde_json and keeps where its bytes
//! start and end), so the two are compared field by field without reading any JSON back. Only a
//! field whose bytes differ becomes patch operations, and the patch only touches what changed: a
//! field that was absent is added and one that is gone removed, taking the encoded field as it
//! is; an array whose encoding begins with the old one's elements (defaults append) gets only its
//! new elements appended (`/-`); any other change is diffed as JSON trees (`json_patch::diff`), so
//! entries of a field that did not change are never rewritten.

use std::ops::Range;

use serde::ser::{self, Impossible, Serialize, SerializeMap, SerializeStruct};
use serde_json::value::RawValue;
use serde_json::Value;

/// An object's top-level fields, each encoded as JSON, in the order they were written.
#[derive(Debug, Default)]
pub struct Fields {
    names: String,
    bytes: Vec<u8>,
    fields: Vec<(Range<usize>, Range<usize>)>,
}

impl Fields {
    /// Encodes `object` (a struct, or a map with string keys) field by field.
    pub fn of<T: Serialize + ?Sized>(object: &T) -> Result<Fields, serde_json::Error> {
        let mut fields = Fields {
            names: String::with_capacity(256),
            bytes: Vec::with_capacity(1024),
            fields: Vec::with_capacity(16),
        };
        object.serialize(Capture {
            out: &mut fields,
            key: None,
        })?;
        Ok(fields)
    }

    /// The names of the fields present, in the order they were written.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.fields.iter().map(|(name, _)| &self.names[name.clone()])
    }

    /// The encoded value of field `name`, if present.
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|(n, _)| &self.names[n.clone()] == name)
            .map(|(_, value)| &self.bytes[value.clone()])
    }

    /// Whether both hold the same fields with the same encodings.
    fn same(&self, other: &Fields) -> bool {
        self.names == other.names && self.bytes == other.bytes && self.fields == other.fields
    }
}

/// The JSON patch (as bytes) that turns the object encoded as `before` into the one encoded as
/// `after`, with paths under `/spec`; empty when nothing changed. Operations come in the order
/// of the fields' names.
pub fn patch(before: &Fields, after: &Fields) -> Vec<u8> {
    if before.same(after) {
        return Vec::new();
    }
    let mut names: Vec<&str> = before.names().chain(after.names()).collect();
    names.sort_unstable();
    names.dedup();
    let mut out = Vec::with_capacity(256);
    out.push(b'[');
    for name in names {
        match (before.get(name), after.get(name)) {
            (Some(old), Some(new)) if old == new => {}
            (None, None) => {}
            (None, Some(new)) => write_op(&mut out, "add", &pointer(name, ""), Some(new)),
            (Some(_), None) => write_op(&mut out, "remove", &pointer(name, ""), None),
            (Some(old), Some(new)) => {
                let tail = appended(old, new);
                match tail.as_deref().and_then(|t| serde_json::from_slice::<Vec<&RawValue>>(t).ok()) {
                    Some(added) => {
                        let path = pointer(name, "/-");
                        for element in added {
                            write_op(&mut out, "add", &path, Some(element.get().as_bytes()));
                        }
                    }
                    None => {
                        let tree = |bytes: &[u8]| serde_json::from_slice::<Value>(bytes).expect("an encoded field is JSON");
                        let prefix = pointer(name, "");
                        for op in json_patch::diff(&tree(old), &tree(new)).0 {
                            let mut op = serde_json::to_value(&op).expect("a JSON patch operation serializes");
                            let inner = op["path"].as_str().unwrap_or_default();
                            op["path"] = Value::from(format!("{prefix}{inner}"));
                            separate(&mut out);
                            serde_json::to_writer(&mut out, &op).expect("writing to memory cannot fail");
                        }
                    }
                }
            }
        }
    }
    if out.len() == 1 {
        return Vec::new();
    }
    out.push(b']');
    out
}

/// When `new` encodes an array that holds every element of the array `old` encodes, first and
/// unchanged, and more after them: those further elements as an encoded array. JSON values are
/// self-delimiting, so `new` keeps `old`'s elements exactly when its bytes begin with `old`'s
/// without the closing `]`, followed by `,` (or anything, when `old` is `[]`).
fn appended(old: &[u8], new: &[u8]) -> Option<Vec<u8>> {
    if old.first() != Some(&b'[') || new.first() != Some(&b'[') || new.len() <= old.len() {
        return None;
    }
    let kept = &old[..old.len() - 1];
    if !new.starts_with(kept) {
        return None;
    }
    let rest = match kept.len() {
        1 => &new[1..],
        n if new[n] == b',' => &new[n + 1..],
        _ => return None,
    };
    let mut tail = Vec::with_capacity(rest.len() + 1);
    tail.push(b'[');
    tail.extend_from_slice(rest);
    Some(tail)
}

/// The JSON pointer of field `name` of the spec, with `suffix` appended.
fn pointer(name: &str, suffix: &str) -> String {
    let mut path = String::with_capacity(6 + name.len() + suffix.len());
    path.push_str("/spec/");
    for c in name.chars() {
        match c {
            '~' => path.push_str("~0"),
            '/' => path.push_str("~1"),
            c => path.push(c),
        }
    }
    path.push_str(suffix);
    path
}

fn separate(out: &mut Vec<u8>) {
    if out.len() > 1 {
        out.push(b',');
    }
}

fn write_op(out: &mut Vec<u8>, op: &str, path: &str, value: Option<&[u8]>) {
    separate(out);
    out.extend_from_slice(b"{\"op\":\"");
    out.extend_from_slice(op.as_bytes());
    out.extend_from_slice(b"\",\"path\":");
    serde_json::to_writer(&mut *out, path).expect("writing to memory cannot fail");
    if let Some(value) = value {
        out.extend_from_slice(b",\"value\":");
        out.extend_from_slice(value);
    }
    out.push(b'}');
}

// --- the field-by-field serializer ---------------------------------------------------------------

/// Serializes a struct or a string-keyed map into `Fields`, each value through serde_json; any
/// other shape is an error.
struct Capture<'a> {
    out: &'a mut Fields,
    /// The map key waiting for its value.
    key: Option<Range<usize>>,
}

impl Capture<'_> {
    fn push_name(&mut self, name: &str) -> Range<usize> {
        let start = self.out.names.len();
        self.out.names.push_str(name);
        start..self.out.names.len()
    }

    fn push_value<T: Serialize + ?Sized>(&mut self, name: Range<usize>, value: &T) -> Result<(), serde_json::Error> {
        let start = self.out.bytes.len();
        serde_json::to_writer(&mut self.out.bytes, value)?;
        self.out.fields.push((name, start..self.out.bytes.len()));
        Ok(())
    }
}

fn not_an_object() -> serde_json::Error {
    ser::Error::custom("only a struct or a map with string keys is encoded field by field")
}

macro_rules! not_an_object {
    ($($method:ident($($arg:ty),*);)*) => {
        $(fn $method(self, $(_: $arg),*) -> Result<(), serde_json::Error> {
            Err(not_an_object())
        })*
    };
}

impl<'a> ser::Serializer for Capture<'a> {
    type Ok = ();
    type Error = serde_json::Error;
    type SerializeSeq = Impossible<(), serde_json::Error>;
    type SerializeTuple = Impossible<(), serde_json::Error>;
    type SerializeTupleStruct = Impossible<(), serde_json::Error>;
    type SerializeTupleVariant = Impossible<(), serde_json::Error>;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Impossible<(), serde_json::Error>;

    not_an_object! {
        serialize_bool(bool);
        serialize_i8(i8);
        serialize_i16(i16);
        serialize_i32(i32);
        serialize_i64(i64);
        serialize_u8(u8);
        serialize_u16(u16);
        serialize_u32(u32);
        serialize_u64(u64);
        serialize_f32(f32);
        serialize_f64(f64);
        serialize_char(char);
        serialize_str(&str);
        serialize_bytes(&[u8]);
        serialize_none();
        serialize_unit();
        serialize_unit_struct(&'static str);
        serialize_unit_variant(&'static str, u32, &'static str);
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), serde_json::Error> {
        value.serialize(self)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Result<(), serde_json::Error> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<(), serde_json::Error> {
        Err(not_an_object())
    }

    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, serde_json::Error> {
        Err(not_an_object())
    }

    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, serde_json::Error> {
        Err(not_an_object())
    }

    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeTupleStruct, serde_json::Error> {
        Err(not_an_object())
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, serde_json::Error> {
        Err(not_an_object())
    }

    fn serialize_map(self, _: Option<usize>) -> Result<Self, serde_json::Error> {
        Ok(self)
    }

    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, serde_json::Error> {
        Ok(self)
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, serde_json::Error> {
        Err(not_an_object())
    }
}

impl SerializeStruct for Capture<'_> {
    type Ok = ();
    type Error = serde_json::Error;

    fn serialize_field<T: Serialize + ?Sized>(&mut self, name: &'static str, value: &T) -> Result<(), serde_json::Error> {
        let name = self.push_name(name);
        self.push_value(name, value)
    }

    fn end(self) -> Result<(), serde_json::Error> {
        Ok(())
    }
}

impl SerializeMap for Capture<'_> {
    type Ok = ();
    type Error = serde_json::Error;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), serde_json::Error> {
        let Value::String(key) = serde_json::to_value(key)? else {
            return Err(ser::Error::custom("a map key is not a string"));
        };
        self.key = Some(self.push_name(&key));
        Ok(())
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), serde_json::Error> {
        let name = self.key.take().ok_or_else(|| ser::Error::custom("a map value without its key"))?;
        self.push_value(name, value)
    }

    fn end(self) -> Result<(), serde_json::Error> {
        Ok(())
    }
}

#[cfg(test)]
mod tests;
