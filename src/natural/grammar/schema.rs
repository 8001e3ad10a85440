//! A tool's JSON Schema as GBNF rules for its arguments.
//!
//! The subset a tool's parameters use is written exactly: `type` (one or
//! several), `enum` and `const`, `anyOf`/`oneOf`, objects with
//! `properties` and `required`, arrays with `items`, strings, integers,
//! numbers, booleans, null. An object is written with its declared
//! properties only, in the schema's order, each optional one at most once: every value the grammar admits is valid for
//! the schema's types, required properties and enums. What the grammar does
//! not model (a `$ref`, `allOf`, `pattern`, `minimum`, lengths, an object
//! requiring a property it does not declare) is any JSON value of the
//! declared type, and the call is still validated against the whole schema
//! after it is parsed.

use serde_json::{Map, Value};

use super::gbnf::{self, Rules};

/// Nesting deeper than this is any JSON value.
const MAX_DEPTH: usize = 12;

/// The shared JSON rules, added once to `rules`.
pub fn add_json_rules(rules: &mut Rules) {
    if rules.has("json-value") {
        return;
    }
    // Bounded whitespace: a model told to write JSON can otherwise emit
    // newlines until its token budget runs out.
    rules.add("ws", r"[ \t\n]{0,24}");
    rules.add(
        "json-char",
        r#"[^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})"#,
    );
    rules.add("json-string", r#""\"" json-char* "\"""#);
    rules.add("json-int", r#""-"? ("0" | [1-9] [0-9]{0,18})"#);
    rules.add(
        "json-number",
        r#"json-int ("." [0-9]+)? ([eE] [-+]? [0-9]+)?"#,
    );
    rules.add("json-bool", r#""true" | "false""#);
    rules.add("json-null", r#""null""#);
    rules.add(
        "json-value",
        "json-object | json-array | json-string | json-number | json-bool | json-null",
    );
    rules.add(
        "json-object",
        r#""{" ws (json-string ws ":" ws json-value (ws "," ws json-string ws ":" ws json-value)*)? ws "}""#,
    );
    rules.add(
        "json-array",
        r#""[" ws (json-value (ws "," ws json-value)*)? ws "]""#,
    );
}

/// Adds the rules of values of `schema` under rule `name`; returns `name`.
pub fn add_value(rules: &mut Rules, name: &str, schema: &Value) -> String {
    add_json_rules(rules);
    let body = expression(rules, name, schema, 0);
    rules.add(name, body);
    name.to_owned()
}

/// The expression for a value of `schema` (sub-rules named after `at`).
fn expression(rules: &mut Rules, at: &str, schema: &Value, depth: usize) -> String {
    let Some(schema) = schema.as_object() else {
        // `true`, `{}`-less booleans: anything.
        return "json-value".to_owned();
    };
    if depth > MAX_DEPTH {
        return "json-value".to_owned();
    }
    if let Some(value) = schema.get("const") {
        return json_literal(value);
    }
    if let Some(Value::Array(values)) = schema.get("enum") {
        if values.is_empty() {
            return "json-value".to_owned();
        }
        return group(values.iter().map(json_literal).collect());
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(options)) = schema.get(key)
            && !options.is_empty()
        {
            let alternatives = options
                .iter()
                .enumerate()
                .map(|(i, option)| {
                    let sub = gbnf::name(at, &[&i.to_string()]);
                    let body = expression(rules, &sub, option, depth + 1);
                    rules.add(&sub, body);
                    sub
                })
                .collect();
            return group(alternatives);
        }
    }
    match schema.get("type") {
        Some(Value::String(kind)) => typed(rules, at, schema, kind, depth),
        Some(Value::Array(kinds)) => {
            let alternatives = kinds
                .iter()
                .filter_map(Value::as_str)
                .map(|kind| typed(rules, at, schema, kind, depth))
                .collect::<Vec<_>>();
            if alternatives.is_empty() {
                "json-value".to_owned()
            } else {
                group(alternatives)
            }
        }
        // Properties without a type: an object all the same.
        _ if schema.contains_key("properties") => typed(rules, at, schema, "object", depth),
        _ => "json-value".to_owned(),
    }
}

fn typed(
    rules: &mut Rules,
    at: &str,
    schema: &Map<String, Value>,
    kind: &str,
    depth: usize,
) -> String {
    match kind {
        "string" => "json-string".to_owned(),
        "integer" => "json-int".to_owned(),
        "number" => "json-number".to_owned(),
        "boolean" => "json-bool".to_owned(),
        "null" => "json-null".to_owned(),
        "array" => match schema.get("items") {
            Some(items) if items.is_object() => {
                let item = gbnf::name(at, &["item"]);
                let body = expression(rules, &item, items, depth + 1);
                rules.add(&item, body);
                format!(r#""[" ws ({item} (ws "," ws {item})*)? ws "]""#)
            }
            _ => "json-array".to_owned(),
        },
        "object" => object(rules, at, schema, depth),
        _ => "json-value".to_owned(),
    }
}

/// `{"a": …, "b": …}`: the declared properties in the schema's order, each
/// required one present, each optional one at most once. Two rules per
/// property keep it linear: `{at}-first-{i}` (members from the i-th on,
/// none written yet) and `{at}-then-{i}` (from the i-th on, after one).
fn object(rules: &mut Rules, at: &str, schema: &Map<String, Value>, depth: usize) -> String {
    let Some(Value::Object(properties)) = schema.get("properties") else {
        return "json-object".to_owned();
    };
    let required: Vec<&str> = match schema.get("required") {
        Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if required.iter().any(|r| !properties.contains_key(*r)) || properties.is_empty() {
        return "json-object".to_owned();
    }
    let members: Vec<(String, bool)> = properties
        .iter()
        .enumerate()
        .map(|(i, (key, property))| {
            let sub = gbnf::name(at, &[&i.to_string()]);
            let body = expression(rules, &sub, property, depth + 1);
            rules.add(&sub, body);
            let quoted = serde_json::to_string(key).unwrap_or_default();
            let member = format!(r#"{} ws ":" ws {sub}"#, gbnf::literal(&quoted));
            (member, required.contains(&key.as_str()))
        })
        .collect();
    let first = |i: usize| gbnf::name(at, &["first", &i.to_string()]);
    let then = |i: usize| gbnf::name(at, &["then", &i.to_string()]);
    let n = members.len();
    for (i, (member, required)) in members.iter().enumerate() {
        let (next_first, next_then) = if i + 1 == n {
            (None, None)
        } else {
            (Some(first(i + 1)), Some(then(i + 1)))
        };
        let with = |head: String| match &next_then {
            Some(rest) => format!("{head} {rest}"),
            None => head,
        };
        let first_body = match (required, &next_first) {
            (true, _) => with(member.clone()),
            (false, Some(skip)) => format!("{} | {skip}", with(member.clone())),
            (false, None) => format!("({member})?"),
        };
        let sep_member = format!(r#"ws "," ws {member}"#);
        let then_body = match (required, &next_then) {
            (true, _) => with(sep_member),
            (false, Some(rest)) => format!("({sep_member})? {rest}"),
            (false, None) => format!("({sep_member})?"),
        };
        rules.add(first(i), first_body);
        rules.add(then(i), then_body);
    }
    format!(r#""{{" ws {} ws "}}""#, first(0))
}

fn json_literal(value: &Value) -> String {
    gbnf::literal(&serde_json::to_string(value).unwrap_or_default())
}

fn group(alternatives: Vec<String>) -> String {
    if alternatives.len() == 1 {
        alternatives.into_iter().next().unwrap_or_default()
    } else {
        format!("({})", alternatives.join(" | "))
    }
}
