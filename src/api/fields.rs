//! The JSON types of the request fields a door reads. A field of the wrong
//! type is a `400` naming it (in the door's error shape), never read as its
//! default: `stream: "yes"` is not a non-streamed request. `null` counts as
//! absent. Fields a door passes on unread are not checked here.

use serde_json::{Map, Value};

use crate::error::GatewayError;

/// What a field must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Bool,
    String,
    Number,
    /// An integer of at least 1.
    Positive,
    /// An integer of at least 0.
    Count,
    Object,
    /// A list of strings.
    Strings,
    /// A list with at least one element.
    NonEmptyList,
}

impl Kind {
    fn holds(self, value: &Value) -> bool {
        match self {
            Kind::Bool => value.is_boolean(),
            Kind::String => value.is_string(),
            Kind::Number => value.is_number(),
            Kind::Positive => value.as_u64().is_some_and(|n| n >= 1),
            Kind::Count => value.is_u64(),
            Kind::Object => value.is_object(),
            Kind::Strings => value
                .as_array()
                .is_some_and(|l| l.iter().all(Value::is_string)),
            Kind::NonEmptyList => value.as_array().is_some_and(|l| !l.is_empty()),
        }
    }

    fn described(self) -> &'static str {
        match self {
            Kind::Bool => "a boolean",
            Kind::String => "a string",
            Kind::Number => "a number",
            Kind::Positive => "a positive integer",
            Kind::Count => "a non-negative integer",
            Kind::Object => "an object",
            Kind::Strings => "a list of strings",
            Kind::NonEmptyList => "a non-empty list",
        }
    }
}

/// Checks each `(field, kind)` of `request` that is present and not `null`;
/// the first field of the wrong type is the error.
pub fn check(request: &Map<String, Value>, fields: &[(&str, Kind)]) -> Result<(), GatewayError> {
    for (name, kind) in fields {
        match request.get(*name) {
            None | Some(Value::Null) => {}
            Some(value) if kind.holds(value) => {}
            Some(_) => {
                return Err(GatewayError::bad_request(
                    format!("`{name}` must be {}", kind.described()),
                    Some(name),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn run(v: Value, fields: &[(&str, Kind)]) -> Result<(), (String, Option<String>)> {
        check(v.as_object().unwrap(), fields).map_err(|e| match e {
            GatewayError::BadRequest { message, param } => (message, param),
            other => panic!("{other:?}"),
        })
    }

    #[test]
    fn each_kind_takes_its_type_and_null_and_refuses_others() {
        let cases = [
            (Kind::Bool, json!(true), json!("yes")),
            (Kind::String, json!("m"), json!(1)),
            (Kind::Number, json!(0.5), json!("0.5")),
            (Kind::Positive, json!(1), json!(0)),
            (Kind::Positive, json!(10), json!("10")),
            (Kind::Count, json!(0), json!(-1)),
            (Kind::Object, json!({}), json!(0)),
            (Kind::Strings, json!(["a"]), json!(["a", 1])),
            (Kind::NonEmptyList, json!([1]), json!([])),
        ];
        for (kind, good, bad) in cases {
            let fields = [("f", kind)];
            assert_eq!(run(json!({"f": good}), &fields), Ok(()), "{kind:?}");
            assert_eq!(run(json!({"f": null}), &fields), Ok(()), "{kind:?}");
            assert_eq!(run(json!({}), &fields), Ok(()), "{kind:?}");
            let (message, param) = run(json!({"f": bad}), &fields).unwrap_err();
            assert_eq!(param.as_deref(), Some("f"));
            assert!(message.starts_with("`f` must be "), "{message}");
        }
    }

    #[test]
    fn the_first_listed_field_is_named() {
        let fields = [("a", Kind::Bool), ("b", Kind::Bool)];
        let (_, param) = run(json!({"b": 1, "a": 1}), &fields).unwrap_err();
        assert_eq!(param.as_deref(), Some("a"));
    }
}
