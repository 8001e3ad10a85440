//! A request body's top-level fields, each kept as its raw JSON text.
//!
//! Natural mode changes a few fields of a request and forwards the rest.
//! Split into borrowed raw values, the fields it does not change (`tools`
//! above all, often the largest part of an agent's request) are neither
//! parsed into a tree nor serialized again: their bytes are copied.

use std::collections::HashMap;
use std::fmt;

use serde::Serialize;
use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::natural::error::RequestError;

/// A replaced value larger than this (raw) is measured before the body is
/// written.
const LARGE: usize = 1 << 20;

/// Counts the bytes written to it.
struct Counter(usize);

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The fields of a JSON object, in order, values unparsed. A repeated name
/// keeps its first position and its last value, as a parsed object would.
#[derive(Debug)]
pub struct Fields<'a> {
    entries: Vec<(String, &'a RawValue)>,
    /// Each name's position in `entries`: a body of 40k keys is split in
    /// linear time.
    index: HashMap<String, usize>,
}

impl<'a> Fields<'a> {
    /// Splits `body`, which must be a JSON object.
    pub fn parse(body: &'a [u8]) -> Result<Self, RequestError> {
        match serde_json::from_slice::<Parsed<'a>>(body) {
            Ok(Parsed::Object(fields)) => Ok(fields),
            Ok(Parsed::Other) => Err(RequestError::NotAnObject),
            Err(err) => Err(RequestError::InvalidJson {
                message: err.to_string(),
            }),
        }
    }

    /// The raw value of the field `name`.
    pub fn get(&self, name: &str) -> Option<&'a RawValue> {
        self.index.get(name).map(|&i| self.entries[i].1)
    }

    /// The field `name` parsed into a tree (`None` when absent).
    pub fn parsed(&self, name: &str) -> Result<Option<Value>, RequestError> {
        self.get(name).map(parse).transpose()
    }

    /// The object again without the fields in `drop`, and with `name`'s value
    /// replaced by `value`; every other field is copied as it came.
    pub fn write(&self, drop: &[&str], name: &str, value: &impl Serialize) -> Vec<u8> {
        // Sized up front: a body of many MiB that outgrew an estimate would
        // be copied into twice its size (a large value is measured first).
        let replaced = self.get(name).map_or(0, |raw| raw.get().len());
        let value_len = if replaced > LARGE {
            let mut counter = Counter(0);
            let _ = serde_json::to_writer(&mut counter, value);
            counter.0
        } else {
            replaced + replaced / 4 + 1024
        };
        let mut out = Vec::with_capacity(
            self.entries
                .iter()
                .filter(|(field, _)| field != name)
                .map(|(_, raw)| raw.get().len() + 16)
                .sum::<usize>()
                + value_len
                + name.len()
                + 16,
        );
        out.push(b'{');
        let kept = self
            .entries
            .iter()
            .filter(|(field, _)| !drop.contains(&field.as_str()));
        for (i, (field, raw)) in kept.enumerate() {
            if i > 0 {
                out.push(b',');
            }
            // Serializing a string or a `Value` into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut out, field);
            out.push(b':');
            if field == name {
                let _ = serde_json::to_writer(&mut out, value);
            } else {
                out.extend_from_slice(raw.get().as_bytes());
            }
        }
        out.push(b'}');
        out
    }
}

/// A raw value parsed into a tree. The body was valid JSON, so this fails
/// only where parsing a whole body would have failed too.
pub fn parse(raw: &RawValue) -> Result<Value, RequestError> {
    serde_json::from_str(raw.get()).map_err(|err| RequestError::InvalidJson {
        message: err.to_string(),
    })
}

/// What the body turned out to be.
enum Parsed<'a> {
    Object(Fields<'a>),
    /// Valid JSON, but not an object.
    Other,
}

impl<'de> Deserialize<'de> for Parsed<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(BodyVisitor)
    }
}

struct BodyVisitor;

impl<'de> Visitor<'de> for BodyVisitor {
    type Value = Parsed<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut entries: Vec<(String, &'de RawValue)> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        while let Some(name) = map.next_key::<String>()? {
            let raw: &'de RawValue = map.next_value()?;
            match index.get(&name) {
                Some(&i) => entries[i].1 = raw,
                None => {
                    index.insert(name.clone(), entries.len());
                    entries.push((name, raw));
                }
            }
        }
        Ok(Parsed::Object(Fields { entries, index }))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        // Read to the end, so the parser sees the whole body is valid.
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Parsed::Other)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Parsed::Other)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Parsed::Other)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Parsed::Other)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Parsed::Other)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Parsed::Other)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Parsed::Other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rewritten(body: &str, drop: &[&str], value: Value) -> Value {
        let fields = Fields::parse(body.as_bytes()).unwrap();
        serde_json::from_slice(&fields.write(drop, "messages", &value)).unwrap()
    }

    #[test]
    fn untouched_fields_keep_their_bytes_and_order() {
        let body = r#"{"model":"m", "tools" : [ {"a":1} ],"messages":[],"temperature":0.50}"#;
        let fields = Fields::parse(body.as_bytes()).unwrap();
        assert_eq!(fields.get("tools").unwrap().get(), r#"[ {"a":1} ]"#);
        let out = fields.write(&[], "messages", &json!([1]));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"model":"m","tools":[ {"a":1} ],"messages":[1],"temperature":0.50}"#
        );
    }

    #[test]
    fn dropped_fields_are_gone_and_escaped_names_survive() {
        let body = r#"{"tools":[],"a\"b":"\u00e9","messages":[{"x":1}]}"#;
        assert_eq!(
            rewritten(body, &["tools"], json!([])),
            json!({"a\"b": "é", "messages": []})
        );
    }

    #[test]
    fn a_repeated_name_keeps_its_first_place_and_last_value() {
        let body = r#"{"model":"a","messages":[],"model":"b"}"#;
        let fields = Fields::parse(body.as_bytes()).unwrap();
        assert_eq!(fields.get("model").unwrap().get(), r#""b""#);
        assert_eq!(
            String::from_utf8(fields.write(&[], "messages", &json!([]))).unwrap(),
            r#"{"model":"b","messages":[]}"#
        );
    }

    #[test]
    fn not_an_object_and_invalid_json_are_told_apart() {
        for body in ["[1,2]", "3", "\"s\"", "null", "true"] {
            assert_eq!(
                Fields::parse(body.as_bytes()).unwrap_err(),
                RequestError::NotAnObject,
                "{body}"
            );
        }
        for body in ["{", "[1,", "{\"a\":}", "{} x", ""] {
            assert!(
                matches!(
                    Fields::parse(body.as_bytes()),
                    Err(RequestError::InvalidJson { .. })
                ),
                "{body}"
            );
        }
    }
}
