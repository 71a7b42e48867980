//! The JSON of request bodies, kept as Go's decoder will read it: objects keep their keys in
//! order, duplicates included, and field names match as Go's `encoding/json` matches them.
//!
//! Docker decodes a body with `encoding/json` into Go structs. Two of its rules matter to a
//! proxy that rewrites bodies: a struct field takes every key equal to its name under Unicode
//! case folding (`labels`, `LABELS`, `labelſ` are all `Labels`), and keys are applied in order,
//! so the last one wins (a map field merges them, a null resets it). `serde_json::Value` keeps
//! neither the order nor the duplicates, so bodies are read into [`Json`], whose objects are
//! lists of pairs, and written back from it.
//!
//! Numbers are `serde_json::Number`: Docker's numeric fields are integers, and an integer
//! (up to `u64`/`i64`) is written back digit for digit; a fraction or an exponent is written
//! back as an `f64`, which Go's integer fields reject before and after alike. What serde
//! cannot read (invalid UTF-8 in a string, a lone surrogate, bytes after the value) Go would
//! read leniently; the proxy refuses such a body instead of passing it on unstamped.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

/// A JSON value whose objects keep their keys in order, duplicates included.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    /// Parses a whole body: one value, nothing but whitespace after it.
    pub fn parse(bytes: &[u8]) -> Result<Json, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    pub fn to_vec(&self) -> Vec<u8> {
        // Writing into a Vec cannot fail, and every key is a string.
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn str(s: &str) -> Json {
        Json::String(s.to_string())
    }
}

/// Whether a JSON key names the Go struct field `field` (ASCII, as Docker's fields are), as
/// `encoding/json` decides: equal under simple case folding, where `ſ` (U+017F) folds with
/// `s` and the Kelvin sign `K` (U+212A) with `k`.
pub(crate) fn go_field(key: &str, field: &str) -> bool {
    let mut keys = key.chars();
    for f in field.chars() {
        let c = match keys.next() {
            Some('\u{17f}') => 's',
            Some('\u{212a}') => 'k',
            Some(c) => c,
            None => return false,
        };
        if !c.eq_ignore_ascii_case(&f) {
            return false;
        }
    }
    keys.next().is_none()
}

/// Decodes one value into a Go `map[string]V` as `encoding/json` does: an object merges into
/// the map (a later key replaces an earlier one), a null resets it to nil. `Err` for any
/// other value, which Go refuses too.
pub(crate) fn go_map(
    map: &mut Option<Vec<(String, Json)>>,
    value: &Json,
) -> Result<(), &'static str> {
    match value {
        Json::Null => *map = None,
        Json::Object(pairs) => {
            let m = map.get_or_insert_with(Vec::new);
            for (k, v) in pairs {
                insert(m, k, v.clone());
            }
        }
        _ => return Err("not an object"),
    }
    Ok(())
}

/// Sets `key` in a list of pairs used as a map (replacing its value in place).
pub(crate) fn insert(map: &mut Vec<(String, Json)>, key: &str, value: Json) {
    match map.iter_mut().find(|(k, _)| k == key) {
        Some(slot) => slot.1 = value,
        None => map.push((key.to_string(), value)),
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Json, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("JSON")
    }
    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_bool<E>(self, b: bool) -> Result<Json, E> {
        Ok(Json::Bool(b))
    }
    fn visit_u64<E>(self, n: u64) -> Result<Json, E> {
        Ok(Json::Number(n.into()))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Json, E> {
        Ok(Json::Number(n.into()))
    }
    fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<Json, E> {
        serde_json::Number::from_f64(n)
            .map(Json::Number)
            .ok_or_else(|| E::custom("a number out of range"))
    }
    fn visit_str<E>(self, s: &str) -> Result<Json, E> {
        Ok(Json::String(s.to_string()))
    }
    fn visit_string<E>(self, s: String) -> Result<Json, E> {
        Ok(Json::String(s))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(v) = seq.next_element()? {
            items.push(v);
        }
        Ok(Json::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut pairs = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, Json>()? {
            pairs.push((k, v));
        }
        Ok(Json::Object(pairs))
    }
}

impl Serialize for Json {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Null => s.serialize_unit(),
            Json::Bool(b) => s.serialize_bool(*b),
            Json::Number(n) => n.serialize(s),
            Json::String(v) => s.serialize_str(v),
            Json::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for i in items {
                    seq.serialize_element(i)?;
                }
                seq.end()
            }
            Json::Object(pairs) => {
                let mut map = s.serialize_map(Some(pairs.len()))?;
                for (k, v) in pairs {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_and_duplicates_survive_a_round_trip() {
        let text = br#"{"b":1,"a":[true,null,"x"],"b":{"c":-2,"C":18446744073709551615},"n":1.5}"#;
        let v = Json::parse(text).unwrap();
        assert_eq!(v.to_vec(), text);
        let Json::Object(pairs) = &v else { panic!() };
        assert_eq!(pairs.iter().filter(|(k, _)| k == "b").count(), 2);
    }

    #[test]
    fn what_serde_refuses() {
        assert!(Json::parse(b"{} x").is_err(), "bytes after the value");
        assert!(
            Json::parse(br#"{"a":"\ud800"}"#).is_err(),
            "a lone surrogate"
        );
        assert!(Json::parse(b"{\"a\":\"\xff\"}").is_err(), "invalid UTF-8");
        assert!(Json::parse(b"").is_err());
        assert_eq!(Json::parse(b" null ").unwrap(), Json::Null);
    }

    #[test]
    fn field_names_fold_as_go_folds_them() {
        for key in ["Labels", "labels", "LABELS", "lAbElS", "labelſ", "LABELſ"] {
            assert!(go_field(key, "Labels"), "{key}");
        }
        assert!(go_field("\u{212a}ind", "Kind"));
        for key in ["Label", "Labelss", "Lábels", "labels ", "Labelſx"] {
            assert!(!go_field(key, "Labels"), "{key}");
        }
    }

    #[test]
    fn maps_merge_in_order_and_reset_on_null() {
        let decode = |t: &str| {
            let Json::Array(values) = Json::parse(t.as_bytes()).unwrap() else {
                panic!()
            };
            let mut map = None;
            values
                .iter()
                .try_for_each(|v| go_map(&mut map, v))
                .map(|_| map)
        };
        let m = decode(r#"[{"a":"1","b":"1"},{"a":"2"},{"a":"3","a":"4"}]"#).unwrap();
        let want = vec![("a".into(), Json::str("4")), ("b".into(), Json::str("1"))];
        assert_eq!(m, Some(want));
        assert_eq!(decode(r#"[{"a":"1"},null]"#).unwrap(), None);
        assert_eq!(decode(r#"[null,{"a":"1"}]"#).unwrap().unwrap().len(), 1);
        assert!(decode(r#"[{"a":"1"},"x"]"#).is_err());
    }
}
