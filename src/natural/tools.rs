//! The tools a request declares, read from `tools` and the legacy `functions`.
//!
//! Parsing is strict about what natural mode depends on (a usable, unique name
//! per tool) and lenient about the rest, because an upstream without native
//! tools never sees the declarations themselves, only our rendering of them.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::config::UNLISTED_FIELD;
use crate::config::vocabulary::tool_names;
use crate::natural::error::RequestError;
pub use crate::natural::policy::Choice;

/// One callable function as declared by the client.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    /// The name the model writes to call it.
    pub name: String,
    /// What the tool does, for the model.
    pub description: Option<String>,
    /// The JSON Schema of the arguments; `None` when the tool takes none.
    pub parameters: Option<Value>,
    /// `strict: true`: the arguments must validate against the schema exactly.
    pub strict: bool,
    /// Callable, but described by no contract: a tool `tool_search` keeps
    /// for the model to find (marked with [`UNLISTED_FIELD`]).
    pub unlisted: bool,
}

/// The tools of one request, in declaration order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolSet {
    /// The tools; names are unique.
    pub tools: Vec<Tool>,
    /// Each name's position in `tools`: lookups are O(1), so checking 40k
    /// declarations for duplicates is linear.
    index: HashMap<String, usize>,
}

impl ToolSet {
    /// A set of `tools`; of repeated names, the first is found by name.
    pub fn from_tools(tools: Vec<Tool>) -> ToolSet {
        let mut index = HashMap::with_capacity(tools.len());
        for (i, tool) in tools.iter().enumerate() {
            index.entry(tool.name.clone()).or_insert(i);
        }
        ToolSet { tools, index }
    }

    /// Reads `tools` (the current shape) and `functions` (the legacy one).
    ///
    /// Both may be present; their tools are merged, `tools` first. `null`
    /// counts as absent because several clients send it for "no tools".
    pub fn from_request(
        tools: Option<&Value>,
        functions: Option<&Value>,
    ) -> Result<ToolSet, RequestError> {
        let mut set = ToolSet::default();
        for (i, entry) in array_field(tools, "tools")?.iter().enumerate() {
            let base = format!("tools[{i}]");
            let entry = entry
                .as_object()
                .ok_or_else(|| RequestError::wrong_type(base.clone(), "an object"))?;
            match entry.get("type") {
                None | Some(Value::Null) => {}
                Some(Value::String(kind)) if kind == "function" => {}
                Some(Value::String(kind)) => {
                    return Err(RequestError::invalid(
                        format!("{base}.type"),
                        format!("tool type '{kind}' is not supported; use 'function'"),
                    ));
                }
                Some(_) => {
                    return Err(RequestError::wrong_type(format!("{base}.type"), "a string"));
                }
            }
            let function = format!("{base}.function");
            let body = entry
                .get("function")
                .ok_or_else(|| RequestError::missing(function.clone()))?;
            set.push(parse_function(body, &function)?, format!("{function}.name"))?;
        }
        for (i, entry) in array_field(functions, "functions")?.iter().enumerate() {
            set.push(
                parse_function(entry, &format!("functions[{i}]"))?,
                format!("functions[{i}].name"),
            )?;
        }
        Ok(set)
    }

    /// The tool names in declaration order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.iter().map(|tool| tool.name.as_str())
    }

    /// The tool called `name`, if declared.
    pub fn get(&self, name: &str) -> Option<&Tool> {
        self.index.get(name).map(|&i| &self.tools[i])
    }

    /// Whether a tool called `name` is declared.
    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// How many tools there are.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether there are no tools at all.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The tools whose names are in `names`, keeping declaration order.
    pub fn subset(&self, names: &[String]) -> ToolSet {
        let names: HashSet<&str> = names.iter().map(String::as_str).collect();
        ToolSet::from_tools(
            self.tools
                .iter()
                .filter(|tool| names.contains(tool.name.as_str()))
                .cloned()
                .collect(),
        )
    }

    /// Adds a tool, rejecting a second tool of the same name; `param` is where
    /// its name was declared, for the error.
    fn push(&mut self, tool: Tool, param: String) -> Result<(), RequestError> {
        if self.contains(&tool.name) {
            return Err(RequestError::DuplicateTool {
                param,
                name: tool.name,
            });
        }
        self.index.insert(tool.name.clone(), self.tools.len());
        self.tools.push(tool);
        Ok(())
    }
}

/// Parses one function declaration (`tools[i].function` or `functions[i]`).
fn parse_function(value: &Value, base: &str) -> Result<Tool, RequestError> {
    let object = value
        .as_object()
        .ok_or_else(|| RequestError::wrong_type(base, "an object"))?;
    let name_param = format!("{base}.name");
    let name = match object.get("name") {
        Some(Value::String(name)) => name,
        None | Some(Value::Null) => return Err(RequestError::missing(name_param)),
        Some(_) => return Err(RequestError::wrong_type(name_param, "a string")),
    };
    check_name(name, &name_param)?;
    let description = optional_string(object.get("description"), &format!("{base}.description"))?;
    let parameters = match object.get("parameters") {
        None | Some(Value::Null) => None,
        Some(schema @ Value::Object(_)) => Some(schema.clone()),
        Some(_) => {
            return Err(RequestError::wrong_type(
                format!("{base}.parameters"),
                "a JSON Schema object",
            ));
        }
    };
    let strict = match object.get("strict") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(strict)) => *strict,
        Some(_) => {
            return Err(RequestError::wrong_type(
                format!("{base}.strict"),
                "a boolean",
            ));
        }
    };
    Ok(Tool {
        name: name.clone(),
        description,
        parameters,
        strict,
        unlisted: object.get(UNLISTED_FIELD) == Some(&Value::Bool(true)),
    })
}

/// Rejects names the text syntaxes cannot carry: the model writes the name
/// inside `<...>`, an attribute or a JSON string, and the parser must find it
/// again, so whitespace, quotes, angle brackets and slashes are out.
fn check_name(name: &str, param: &str) -> Result<(), RequestError> {
    if name.is_empty() {
        return Err(RequestError::invalid(
            param,
            "a tool name must not be empty",
        ));
    }
    // Names are written into the prompt, the grammar and every call: as
    // long as models accept (OpenAI refuses longer ones too).
    if name.chars().count() > tool_names::MAX_LEN {
        return Err(RequestError::invalid(
            param,
            format!(
                "the tool name '{}…' is longer than {} characters",
                name.chars().take(tool_names::MAX_LEN).collect::<String>(),
                tool_names::MAX_LEN
            ),
        ));
    }
    // The parser cannot read these inside an opener (quotes, brackets of
    // the bracket syntax): a call to such a tool would never be parsed.
    let bad = |c: char| {
        c.is_whitespace()
            || c.is_control()
            || matches!(c, '<' | '>' | '"' | '\'' | '`' | '[' | ']' | '/' | '\\')
    };
    if let Some(c) = name.chars().find(|c| bad(*c)) {
        return Err(RequestError::invalid(
            param,
            format!(
                "the tool name '{name}' contains {c:?}, which natural mode cannot write; use letters, digits, '_', '-' or '.'"
            ),
        ));
    }
    Ok(())
}

/// An optional string field; `null` counts as absent.
fn optional_string(value: Option<&Value>, param: &str) -> Result<Option<String>, RequestError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(RequestError::wrong_type(param, "a string")),
    }
}

/// An optional array field; absent and `null` give an empty slice.
fn array_field<'a>(value: Option<&'a Value>, param: &str) -> Result<&'a [Value], RequestError> {
    match value {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Err(RequestError::wrong_type(param, "an array")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_tools_then_functions() {
        let tools = json!([{"type": "function", "function": {
            "name": "a", "description": "A.", "parameters": {"type": "object"}, "strict": true
        }}]);
        let functions = json!([{"name": "b"}]);
        let set = ToolSet::from_request(Some(&tools), Some(&functions)).expect("valid");
        assert_eq!(set.names().collect::<Vec<_>>(), ["a", "b"]);
        let a = set.get("a").expect("declared");
        assert!(a.strict);
        assert_eq!(a.description.as_deref(), Some("A."));
        assert_eq!(set.get("b").and_then(|b| b.parameters.clone()), None);
    }

    #[test]
    fn null_and_missing_mean_no_tools() {
        let set = ToolSet::from_request(Some(&Value::Null), None).expect("valid");
        assert!(set.is_empty());
    }

    #[test]
    fn type_defaults_to_function_and_other_types_are_refused() {
        let untyped = json!([{"function": {"name": "a"}}]);
        assert!(ToolSet::from_request(Some(&untyped), None).is_ok());
        let custom = json!([{"type": "custom", "custom": {"name": "a"}}]);
        let err = ToolSet::from_request(Some(&custom), None).expect_err("unsupported");
        assert_eq!(err.param(), Some("tools[0].type"));
    }

    #[test]
    fn names_that_break_the_syntax_are_refused() {
        for name in ["", "a b", "a<b", "a\"b", "a/b"] {
            let tools = json!([{"type": "function", "function": {"name": name}}]);
            let err = ToolSet::from_request(Some(&tools), None).expect_err(name);
            assert_eq!(err.param(), Some("tools[0].function.name"), "{name}");
        }
        let tools = json!([{"type": "function", "function": {"name": "ns.tool-1_x"}}]);
        assert!(ToolSet::from_request(Some(&tools), None).is_ok());
    }

    #[test]
    fn subset_keeps_declaration_order() {
        let tools = json!([{"function": {"name": "a"}}, {"function": {"name": "b"}}, {"function": {"name": "c"}}]);
        let set = ToolSet::from_request(Some(&tools), None).expect("valid");
        let subset = set.subset(&["c".to_string(), "a".to_string()]);
        assert_eq!(subset.names().collect::<Vec<_>>(), ["a", "c"]);
    }
}
