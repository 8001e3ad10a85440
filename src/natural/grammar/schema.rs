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
//!
//! The work is linear in the schema: a subschema seen twice (the same value
//! anywhere in the tool's parameters, or in another tool's) is one rule,
//! written once; a `type` array's repeated entries count once; and every
//! node written counts against the grammar's [`Budget`](super::Budget),
//! past which the writer stops descending and the request is refused.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hash, Hasher};

use serde_json::{Map, Value};

use super::gbnf::{self, Rules};

/// Nesting deeper than this is any JSON value.
const MAX_DEPTH: usize = 12;

/// The rules already written for a subschema, by value: a schema seen again
/// is a reference to its rule.
pub struct Shared<'s> {
    hasher: RandomState,
    rules: HashMap<u64, Vec<(&'s Value, String)>>,
    /// Values are written as Python literals (`True`, `None`, Python
    /// strings), not JSON.
    python: bool,
}

impl Default for Shared<'_> {
    fn default() -> Self {
        Shared {
            hasher: RandomState::new(),
            rules: HashMap::new(),
            python: false,
        }
    }
}

impl<'s> Shared<'s> {
    /// Rules whose values are Python literals (the python syntax).
    pub fn python() -> Self {
        Shared {
            python: true,
            ..Shared::default()
        }
    }

    /// The shared rule of values of `kind` (`value`, `string`, `int`,
    /// `number`, `bool`, `null`, `object`, `array`) in this dialect.
    fn base(&self, kind: &str) -> String {
        if self.python {
            format!("py-{kind}")
        } else {
            format!("json-{kind}")
        }
    }

    /// `value` as a literal of this dialect.
    fn literal(&self, value: &Value) -> String {
        if self.python {
            let mut out = String::new();
            crate::natural::syntax::python::write_value(value, &mut out);
            gbnf::literal(&out)
        } else {
            json_literal(value)
        }
    }

    /// The hash of `schema`, and how many nodes it read (a string counts
    /// a node per 64 bytes).
    fn key(&self, schema: &Value) -> (u64, usize) {
        let mut hasher = self.hasher.build_hasher();
        let read = hash_value(schema, &mut hasher);
        (hasher.finish(), read)
    }

    fn find(&self, key: u64, schema: &Value) -> Option<&str> {
        self.rules
            .get(&key)?
            .iter()
            .find(|(seen, _)| *seen == schema)
            .map(|(_, name)| name.as_str())
    }
}

/// A hash of `value` that equal values share (an object's members in their
/// order: two objects equal but for the order hash apart, which only costs
/// a rule); returns the nodes read.
fn hash_value(value: &Value, state: &mut impl Hasher) -> usize {
    match value {
        Value::Null => 0u8.hash(state),
        Value::Bool(b) => (1u8, b).hash(state),
        Value::Number(n) => (2u8, n.to_string()).hash(state),
        Value::String(s) => {
            (3u8, s).hash(state);
            return 1 + s.len() / 64;
        }
        Value::Array(items) => {
            (4u8, items.len()).hash(state);
            return 1 + items
                .iter()
                .map(|item| hash_value(item, state))
                .sum::<usize>();
        }
        Value::Object(members) => {
            (5u8, members.len()).hash(state);
            let mut read = 1;
            for (key, member) in members {
                key.hash(state);
                read += 1 + key.len() / 64 + hash_value(member, state);
            }
            return read;
        }
    }
    1
}

/// How a language writes a literal value, for the grammar: its rules'
/// prefix, the escapes its strings take after a backslash, and its words for
/// true, false and null.
struct Literals {
    prefix: &'static str,
    escapes: &'static str,
    words: [&'static str; 3],
}

const JSON: Literals = Literals {
    prefix: "json",
    escapes: r#"["\\/bfnrt]"#,
    words: ["true", "false", "null"],
};

/// Python's: no `\/` (Python keeps it as two characters), and `True`,
/// `False`, `None`.
const PYTHON: Literals = Literals {
    prefix: "py",
    escapes: r#"["\\bfnrt]"#,
    words: ["True", "False", "None"],
};

/// A value's rules in `literals`' language (`<prefix>-value` and its parts),
/// added once to `rules`.
fn add_value_rules(rules: &mut Rules, literals: &Literals) {
    let Literals {
        prefix: p,
        escapes,
        words: [yes, no, null],
    } = literals;
    if rules.has(&format!("{p}-value")) {
        return;
    }
    // Bounded whitespace: a model told to write JSON can otherwise emit
    // newlines until its token budget runs out.
    if !rules.has("ws") {
        rules.add("ws", r"[ \t\n]{0,24}");
    }
    rules.add(
        format!("{p}-char"),
        format!(r#"[^"\\\x00-\x1F] | "\\" ({escapes} | "u" [0-9a-fA-F]{{4}})"#),
    );
    rules.add(format!("{p}-string"), format!(r#""\"" {p}-char* "\"""#));
    rules.add(format!("{p}-int"), r#""-"? ("0" | [1-9] [0-9]{0,18})"#);
    rules.add(
        format!("{p}-number"),
        format!(r#"{p}-int ("." [0-9]+)? ([eE] [-+]? [0-9]+)?"#),
    );
    rules.add(format!("{p}-bool"), format!(r#""{yes}" | "{no}""#));
    rules.add(format!("{p}-null"), format!(r#""{null}""#));
    rules.add(
        format!("{p}-value"),
        format!("{p}-object | {p}-array | {p}-string | {p}-number | {p}-bool | {p}-null"),
    );
    rules.add(
        format!("{p}-object"),
        format!(
            r#""{{" ws ({p}-string ws ":" ws {p}-value (ws "," ws {p}-string ws ":" ws {p}-value)*)? ws "}}""#
        ),
    );
    rules.add(
        format!("{p}-array"),
        format!(r#""[" ws ({p}-value (ws "," ws {p}-value)*)? ws "]""#),
    );
}

/// The shared JSON rules, added once to `rules`.
pub fn add_json_rules(rules: &mut Rules) {
    add_value_rules(rules, &JSON);
}

/// The shared Python-literal rules (the python syntax), added once: a
/// value's rules in Python's literals, and keyword arguments (`py-kwargs`)
/// for a schema the grammar does not model.
pub fn add_python_rules(rules: &mut Rules) {
    if rules.has("py-kwargs") {
        return;
    }
    add_value_rules(rules, &PYTHON);
    rules.add("py-kwarg", r#"[A-Za-z_] [A-Za-z0-9_]{0,63} "=" py-value"#);
    rules.add("py-kwargs", r#"(py-kwarg (ws "," ws py-kwarg)*)?"#);
}

/// Adds the rules of values of `schema` under rule `name`; returns the rule
/// to use: `name`, or the rule an equal schema already has in `shared`.
pub fn add_value<'s>(
    rules: &mut Rules,
    shared: &mut Shared<'s>,
    name: &str,
    schema: &'s Value,
) -> String {
    add_dialect_rules(rules, shared);
    sub_rule(rules, shared, name, schema, 0)
}

/// Adds the rules of a call's keyword arguments for the parameters
/// `schema` under rule `name` (the python syntax): an object schema's
/// properties as `key=value` (or `**{"key": value}` for a key that is no
/// identifier), in its order, the required ones present; any other schema
/// any keyword arguments. Returns the rule to use.
pub fn add_kwargs<'s>(
    rules: &mut Rules,
    shared: &mut Shared<'s>,
    name: &str,
    schema: &'s Value,
) -> String {
    add_dialect_rules(rules, shared);
    let modelled = schema.as_object().filter(|object| {
        ["anyOf", "oneOf", "enum", "const"]
            .iter()
            .all(|key| !object.contains_key(*key))
            && object
                .get("properties")
                .and_then(Value::as_object)
                .is_some_and(|p| !p.is_empty())
    });
    match modelled {
        Some(object) if rules.visit() => members(rules, shared, name, object, 0, Shape::Kwargs)
            .unwrap_or_else(|| "py-kwargs".to_owned()),
        _ => "py-kwargs".to_owned(),
    }
}

fn add_dialect_rules(rules: &mut Rules, shared: &Shared<'_>) {
    if shared.python {
        add_python_rules(rules);
    } else {
        add_json_rules(rules);
    }
}

/// The rule for values of `schema`: the one an equal schema already has,
/// else a new rule named `at`.
fn sub_rule<'s>(
    rules: &mut Rules,
    shared: &mut Shared<'s>,
    at: &str,
    schema: &'s Value,
    depth: usize,
) -> String {
    if !schema.is_object() || depth > MAX_DEPTH || rules.over().is_some() {
        // `true` and other non-object schemas: anything.
        return shared.base("value");
    }
    let (key, read) = shared.key(schema);
    if !rules.read(read) {
        return shared.base("value");
    }
    if let Some(name) = shared.find(key, schema) {
        return name.to_owned();
    }
    // Named before its body is written: a schema never contains itself, so
    // no reference reaches the rule before it exists.
    shared
        .rules
        .entry(key)
        .or_default()
        .push((schema, at.to_owned()));
    let body = expression(rules, shared, at, schema, depth);
    rules.add(at, body);
    at.to_owned()
}

/// The expression for a value of `schema` (sub-rules named after `at`).
fn expression<'s>(
    rules: &mut Rules,
    shared: &mut Shared<'s>,
    at: &str,
    schema: &'s Value,
    depth: usize,
) -> String {
    let Some(schema) = schema.as_object() else {
        // `true`, `{}`-less booleans: anything.
        return shared.base("value");
    };
    if depth > MAX_DEPTH || !rules.visit() {
        return shared.base("value");
    }
    if let Some(value) = schema.get("const") {
        return shared.literal(value);
    }
    if let Some(Value::Array(values)) = schema.get("enum") {
        if values.is_empty() {
            return shared.base("value");
        }
        return group(values.iter().map(|v| shared.literal(v)).collect());
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
                    sub_rule(rules, shared, &sub, option, depth + 1)
                })
                .collect::<Vec<_>>();
            return group(dedup(alternatives));
        }
    }
    match schema.get("type") {
        Some(Value::String(kind)) => typed(rules, shared, at, schema, kind, depth),
        Some(Value::Array(kinds)) => {
            // Each kind once, however often the array repeats it.
            let mut seen = HashSet::new();
            let alternatives = kinds
                .iter()
                .filter_map(Value::as_str)
                .filter(|kind| seen.insert(*kind))
                .map(|kind| typed(rules, shared, at, schema, kind, depth))
                .collect::<Vec<_>>();
            let alternatives = dedup(alternatives);
            if alternatives.is_empty() {
                shared.base("value")
            } else {
                group(alternatives)
            }
        }
        // Properties without a type: an object all the same.
        _ if schema.contains_key("properties") => typed(rules, shared, at, schema, "object", depth),
        _ => shared.base("value"),
    }
}

fn typed<'s>(
    rules: &mut Rules,
    shared: &mut Shared<'s>,
    at: &str,
    schema: &'s Map<String, Value>,
    kind: &str,
    depth: usize,
) -> String {
    match kind {
        "string" => shared.base("string"),
        "integer" => shared.base("int"),
        "number" => shared.base("number"),
        "boolean" => shared.base("bool"),
        "null" => shared.base("null"),
        "array" => match schema.get("items") {
            Some(items) if items.is_object() => {
                let item = gbnf::name(at, &["item"]);
                let item = sub_rule(rules, shared, &item, items, depth + 1);
                format!(r#""[" ws ({item} (ws "," ws {item})*)? ws "]""#)
            }
            _ => shared.base("array"),
        },
        "object" => object(rules, shared, at, schema, depth),
        _ => shared.base("value"),
    }
}

/// How an object's members are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// `{"a": …, "b": …}` (a JSON object, a Python dict).
    Braces,
    /// `a=…, b=…` (a Python call's keyword arguments).
    Kwargs,
}

/// `{"a": …, "b": …}`: the declared properties in the schema's order, each
/// required one present, each optional one at most once.
fn object<'s>(
    rules: &mut Rules,
    shared: &mut Shared<'s>,
    at: &str,
    schema: &'s Map<String, Value>,
    depth: usize,
) -> String {
    members(rules, shared, at, schema, depth, Shape::Braces)
        .unwrap_or_else(|| shared.base("object"))
}

/// An object's members in `shape`; `None` when the schema's properties
/// are not modelled (none, or a required one undeclared). Two rules per
/// property keep it linear: `{at}-first-{i}` (members from the i-th on,
/// none written yet) and `{at}-then-{i}` (from the i-th on, after one).
fn members<'s>(
    rules: &mut Rules,
    shared: &mut Shared<'s>,
    at: &str,
    schema: &'s Map<String, Value>,
    depth: usize,
    shape: Shape,
) -> Option<String> {
    let Some(Value::Object(properties)) = schema.get("properties") else {
        return None;
    };
    let required: HashSet<&str> = match schema.get("required") {
        Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
        _ => HashSet::new(),
    };
    if required.iter().any(|r| !properties.contains_key(*r)) || properties.is_empty() {
        return None;
    }
    let members: Vec<(String, bool)> = properties
        .iter()
        .enumerate()
        .map(|(i, (key, property))| {
            let sub = gbnf::name(at, &[&i.to_string()]);
            let sub = sub_rule(rules, shared, &sub, property, depth + 1);
            let member = match shape {
                Shape::Braces => {
                    let quoted = serde_json::to_string(key).unwrap_or_default();
                    format!(r#"{} ws ":" ws {sub}"#, gbnf::literal(&quoted))
                }
                Shape::Kwargs => {
                    let mut open = String::new();
                    crate::natural::syntax::python::write_keyword(key, &mut open);
                    let close = if python_identifier(key) {
                        ""
                    } else {
                        r#" "}""#
                    };
                    format!("{} {sub}{close}", gbnf::literal(&open))
                }
            };
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
    Some(match shape {
        Shape::Braces => format!(r#""{{" ws {} ws "}}""#, first(0)),
        Shape::Kwargs => first(0),
    })
}

fn python_identifier(key: &str) -> bool {
    crate::natural::syntax::python::is_identifier(key)
}

fn json_literal(value: &Value) -> String {
    gbnf::literal(&serde_json::to_string(value).unwrap_or_default())
}

/// `alternatives` without repeats, in order.
fn dedup(alternatives: Vec<String>) -> Vec<String> {
    let mut seen = HashSet::new();
    alternatives
        .into_iter()
        .filter(|alternative| seen.insert(alternative.clone()))
        .collect()
}

fn group(alternatives: Vec<String>) -> String {
    if alternatives.len() == 1 {
        alternatives.into_iter().next().unwrap_or_default()
    } else {
        format!("({})", alternatives.join(" | "))
    }
}
