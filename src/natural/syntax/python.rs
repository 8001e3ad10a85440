//! JSON values written as Python literals, for the `python` syntax: a call
//! is `name(key=value, …)`, several calls one list `[a(…), b(…)]`.
//!
//! `null` is `None`, `true` and `false` are `True` and `False`, strings
//! are double-quoted with Python's escapes, numbers, lists and dicts keep
//! their JSON text. A key that is no identifier (`first-name`) cannot be a
//! keyword argument and is written `**{"first-name": …}`, which the parser
//! reads back. The parser (`natural::parser::python`) reads all of it.

use serde_json::Value;

/// Whether `key` can be written as a keyword argument: an ASCII
/// identifier (`[A-Za-z_][A-Za-z0-9_]*`).
pub fn is_identifier(key: &str) -> bool {
    let mut bytes = key.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Appends `name(arguments)`: an object's members as keyword arguments,
/// any other value as the one positional argument (what a client sent;
/// the parser refuses it back as no call).
pub fn write_call(name: &str, arguments: &Value, out: &mut String) {
    out.push_str(name);
    out.push('(');
    match arguments {
        Value::Object(members) => {
            for (i, (key, value)) in members.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_keyword(key, out);
                write_value(value, out);
                if !is_identifier(key) {
                    out.push('}');
                }
            }
        }
        other => write_value(other, out),
    }
    out.push(')');
}

/// Appends what comes before a keyword argument's value: `key=`, or
/// `**{"key": ` for a key that is no identifier (closed by `}`).
pub fn write_keyword(key: &str, out: &mut String) {
    if is_identifier(key) {
        out.push_str(key);
        out.push('=');
    } else {
        out.push_str("**{");
        write_string(key, out);
        out.push_str(": ");
    }
}

/// Appends `value` as a Python literal.
pub fn write_value(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("None"),
        Value::Bool(true) => out.push_str("True"),
        Value::Bool(false) => out.push_str("False"),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_value(item, out);
            }
            out.push(']');
        }
        Value::Object(members) => {
            out.push('{');
            for (i, (key, item)) in members.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_string(key, out);
                out.push_str(": ");
                write_value(item, out);
            }
            out.push('}');
        }
    }
}

/// Appends `s` as a double-quoted Python string: `\\`, `\"`, `\n`, `\r`,
/// `\t` and `\uHHHH` for the other control characters (escapes JSON
/// shares, so the grammar's strings are the same); the rest as it is.
pub fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(arguments: Value) -> String {
        let mut out = String::new();
        write_call("get_weather", &arguments, &mut out);
        out
    }

    #[test]
    fn values_are_python_literals() {
        assert_eq!(
            call(
                json!({"city": "Paris", "days": 2, "metric": true, "note": null,
                "tags": ["a", 1.5, false], "where": {"lat": -1e-3}})
            ),
            r#"get_weather(city="Paris", days=2, metric=True, note=None, tags=["a", 1.5, False], where={"lat": -0.001})"#
        );
        assert_eq!(call(json!({})), "get_weather()");
    }

    #[test]
    fn strings_use_python_escapes() {
        assert_eq!(
            call(json!({"s": "a\"b\\c\nd\te\u{1}é/"})),
            r#"get_weather(s="a\"b\\c\nd\te\u0001é/")"#
        );
    }

    #[test]
    fn a_key_that_is_no_identifier_is_a_dict_splat() {
        assert_eq!(
            call(json!({"first-name": "Ada", "age": 36})),
            r#"get_weather(**{"first-name": "Ada"}, age=36)"#
        );
        assert!(is_identifier("_a1") && !is_identifier("1a") && !is_identifier(""));
    }
}
