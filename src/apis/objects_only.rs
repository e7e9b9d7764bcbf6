//! Objects only as JSON objects. serde's derived structs also read a JSON array as their fields
//! in order, so `spec: []` would decode as an empty spec and `ebs: [..]` as an EBS volume; no
//! Kubernetes object schema allows that (the CRDs say `type: object`), and a webhook that read it
//! so would answer with a patch that cannot apply to the array, or name fields below it.
//! `ObjectsOnly` wraps any deserializer and refuses an array wherever a struct is read, at every
//! depth; everything else passes through unchanged. No I/O.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor};

/// The message of the refusal (its path is added by whoever tracks paths, e.g. `decode`).
pub const ARRAY_FOR_AN_OBJECT: &str = "invalid type: array, expected an object";

/// A deserializer that reads structs only from maps (JSON objects).
pub struct ObjectsOnly<D>(pub D);

/// A visitor passed down by `ObjectsOnly`: it wraps whatever it hands on, and refuses a
/// sequence when it reads a struct.
struct Visit<V> {
    inner: V,
    structure: bool,
}

impl<V> Visit<V> {
    fn any(inner: V) -> Self {
        Visit { inner, structure: false }
    }
}

/// A seed whose deserializer is wrapped in turn.
struct Seed<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Seed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(ObjectsOnly(deserializer))
    }
}

macro_rules! forward_plain {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
            self.0.$method(Visit::any(visitor))
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for ObjectsOnly<D> {
    type Error = D::Error;

    forward_plain! {
        deserialize_any deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_u128
        deserialize_f32 deserialize_f64 deserialize_char deserialize_str deserialize_string deserialize_bytes
        deserialize_byte_buf deserialize_option deserialize_unit deserialize_seq deserialize_map
        deserialize_identifier deserialize_ignored_any
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(self, name: &'static str, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_unit_struct(name, Visit::any(visitor))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, name: &'static str, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_newtype_struct(name, Visit::any(visitor))
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_tuple(len, Visit::any(visitor))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(self, name: &'static str, len: usize, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_tuple_struct(name, len, Visit::any(visitor))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_struct(
            name,
            fields,
            Visit {
                inner: visitor,
                structure: true,
            },
        )
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_enum(name, variants, Visit::any(visitor))
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

macro_rules! forward_value {
    ($($method:ident($ty:ty))*) => {$(
        fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
            self.inner.$method(v)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Visit<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.inner.expecting(f)
    }

    forward_value! {
        visit_bool(bool) visit_i8(i8) visit_i16(i16) visit_i32(i32) visit_i64(i64) visit_i128(i128)
        visit_u8(u8) visit_u16(u16) visit_u32(u32) visit_u64(u64) visit_u128(u128) visit_f32(f32) visit_f64(f64)
        visit_char(char) visit_str(&str) visit_borrowed_str(&'de str) visit_string(String) visit_bytes(&[u8])
        visit_borrowed_bytes(&'de [u8]) visit_byte_buf(Vec<u8>)
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<V::Value, D::Error> {
        self.inner.visit_some(ObjectsOnly(deserializer))
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, deserializer: D) -> Result<V::Value, D::Error> {
        self.inner.visit_newtype_struct(ObjectsOnly(deserializer))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        if self.structure {
            return Err(de::Error::custom(ARRAY_FOR_AN_OBJECT));
        }
        self.inner.visit_seq(Access(seq))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(Access(map))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.inner.visit_enum(Access(data))
    }
}

/// A sequence, map, enum or variant access whose values are read through `ObjectsOnly`.
struct Access<A>(A);

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Access<A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, A::Error> {
        self.0.next_element_seed(Seed(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Access<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, A::Error> {
        self.0.next_key_seed(Seed(seed))
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        self.0.next_value_seed(Seed(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

impl<'de, A: EnumAccess<'de>> EnumAccess<'de> for Access<A> {
    type Error = A::Error;
    type Variant = Access<A::Variant>;

    fn variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<(T::Value, Self::Variant), A::Error> {
        let (value, variant) = self.0.variant_seed(Seed(seed))?;
        Ok((value, Access(variant)))
    }
}

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Access<A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.0.unit_variant()
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
        self.0.newtype_variant_seed(Seed(seed))
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.0.tuple_variant(len, Visit::any(visitor))
    }

    fn struct_variant<V: Visitor<'de>>(self, fields: &'static [&'static str], visitor: V) -> Result<V::Value, A::Error> {
        self.0.struct_variant(
            fields,
            Visit {
                inner: visitor,
                structure: true,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(default)]
    struct Inner {
        a: Option<u8>,
        b: Vec<String>,
    }

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(default)]
    struct Outer {
        inner: Option<Inner>,
        list: Vec<Inner>,
        pair: (u8, u8),
        map: std::collections::BTreeMap<String, Inner>,
    }

    fn read<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Result<T, String> {
        T::deserialize(ObjectsOnly(&value)).map_err(|e| e.to_string())
    }

    #[test]
    fn objects_and_arrays_in_their_places_read_as_serde_reads_them() {
        let value = json!({"inner": {"a": 1, "b": ["x"]}, "list": [{"a": 2}], "pair": [3, 4], "map": {"k": {"b": []}}});
        let read: Outer = read(value.clone()).unwrap();
        assert_eq!(read, serde_json::from_value::<Outer>(value).unwrap());
        let text = r#"{"inner": null, "list": [], "pair": [1, 2], "map": {}}"#;
        let from_text = Outer::deserialize(ObjectsOnly(&mut serde_json::Deserializer::from_str(text))).unwrap();
        assert_eq!(from_text, serde_json::from_str::<Outer>(text).unwrap());
    }

    #[test]
    fn an_array_where_a_struct_is_read_is_refused_at_any_depth() {
        // serde alone reads each of these as a struct.
        for value in [
            json!([]),
            json!([null, [], [3, 4], {}]),
            json!({"inner": [], "list": [], "pair": [1, 2], "map": {}}),
            json!({"inner": null, "list": [[1]], "pair": [1, 2], "map": {}}),
            json!({"inner": null, "list": [], "pair": [1, 2], "map": {"k": [7]}}),
        ] {
            assert!(
                serde_json::from_value::<Outer>(value.clone()).is_ok(),
                "serde reads {value} as a struct"
            );
            let err = read::<Outer>(value.clone()).unwrap_err();
            assert!(err.contains(ARRAY_FOR_AN_OBJECT), "{value}: {err}");
        }
        let text = r#"{"inner": [5, ["x"]], "list": [], "pair": [1, 2], "map": {}}"#;
        let err = Outer::deserialize(ObjectsOnly(&mut serde_json::Deserializer::from_str(text))).unwrap_err();
        assert!(err.to_string().contains(ARRAY_FOR_AN_OBJECT), "{err}");
    }
}
