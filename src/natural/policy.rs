//! What the client allows or demands of the model's calls: `tool_choice`, the
//! legacy `function_call`, and `parallel_tool_calls`.
//!
//! An upstream without native tools cannot enforce any of this, so the policy
//! becomes instructions on the way up and the response side checks the reply
//! against it on the way down.

use serde_json::{Map, Value};

use crate::natural::error::RequestError;
use crate::natural::tools::ToolSet;

/// Whether and which tool the model may or must call.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Choice {
    /// No calls (`"none"`).
    None,
    /// The model decides (`"auto"`, or no choice given).
    Auto,
    /// At least one call (`"required"`).
    Required,
    /// Exactly this tool.
    Named(String),
}

/// The complete tool policy of one request.
///
/// It is also part of the contract cache key, because it decides which
/// contracts are rendered and what the instructions say.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Policy {
    /// The choice; for `allowed_tools` it is its mode (`Auto` or `Required`).
    pub choice: Choice,
    /// `allowed_tools`: only these tools are offered.
    pub allowed: Option<Vec<String>>,
    /// `false` when `parallel_tool_calls: false`: at most one call per reply.
    pub parallel: bool,
    /// The choice came from the legacy `function_call`, which changes the
    /// `param` of errors about it.
    pub legacy: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            choice: Choice::Auto,
            allowed: None,
            parallel: true,
            legacy: false,
        }
    }
}

impl Policy {
    /// Reads the policy fields. `tool_choice` wins over `function_call` when a
    /// client sends both; `null` counts as absent everywhere.
    pub fn from_request(
        tool_choice: Option<&Value>,
        function_call: Option<&Value>,
        parallel_tool_calls: Option<&Value>,
    ) -> Result<Policy, RequestError> {
        let mut policy = Policy::default();
        match (present(tool_choice), present(function_call)) {
            (Some(choice), _) => policy.read_tool_choice(choice)?,
            (None, Some(call)) => {
                policy.legacy = true;
                policy.choice = legacy_choice(call)?;
            }
            (None, None) => {}
        }
        policy.parallel = match present(parallel_tool_calls) {
            None => true,
            Some(Value::Bool(parallel)) => *parallel,
            Some(_) => return Err(RequestError::wrong_type("parallel_tool_calls", "a boolean")),
        };
        Ok(policy)
    }

    /// The tools to offer the model, checking that every tool the policy
    /// names was declared. The result is empty when nothing can be called.
    pub fn offered(&self, declared: &ToolSet) -> Result<ToolSet, RequestError> {
        let offered = match (&self.choice, &self.allowed) {
            (Choice::None, _) => return Ok(ToolSet::default()),
            (Choice::Named(name), _) => {
                let param = if self.legacy {
                    "function_call.name"
                } else {
                    "tool_choice.function.name"
                };
                require_declared(declared, name, param)?;
                declared.subset(std::slice::from_ref(name))
            }
            (_, Some(allowed)) => {
                for (i, name) in allowed.iter().enumerate() {
                    let param = format!("tool_choice.allowed_tools.tools[{i}].function.name");
                    require_declared(declared, name, &param)?;
                }
                declared.subset(allowed)
            }
            (_, None) => declared.clone(),
        };
        if offered.is_empty() && self.choice == Choice::Required {
            let param = if self.legacy {
                "function_call"
            } else {
                "tool_choice"
            };
            return Err(RequestError::invalid(
                param,
                "\"required\" needs at least one declared tool",
            ));
        }
        Ok(offered)
    }

    fn read_tool_choice(&mut self, choice: &Value) -> Result<(), RequestError> {
        match choice {
            Value::String(mode) => {
                self.choice = mode_choice(mode).ok_or_else(|| {
                    RequestError::invalid(
                        "tool_choice",
                        format!("'{mode}' is not one of 'none', 'auto', 'required'"),
                    )
                })?;
                Ok(())
            }
            Value::Object(object) => match object.get("type").and_then(Value::as_str) {
                Some("function") => {
                    self.choice = Choice::Named(function_name(object, "tool_choice")?);
                    Ok(())
                }
                Some("allowed_tools") => self.read_allowed_tools(object),
                Some(other) => Err(RequestError::invalid(
                    "tool_choice.type",
                    format!("'{other}' is not supported; use 'function' or 'allowed_tools'"),
                )),
                None => Err(RequestError::missing("tool_choice.type")),
            },
            _ => Err(RequestError::wrong_type(
                "tool_choice",
                "a string or an object",
            )),
        }
    }

    fn read_allowed_tools(&mut self, object: &Map<String, Value>) -> Result<(), RequestError> {
        let base = "tool_choice.allowed_tools";
        let allowed = object
            .get("allowed_tools")
            .and_then(Value::as_object)
            .ok_or_else(|| RequestError::wrong_type(base, "an object"))?;
        self.choice = match allowed.get("mode") {
            None | Some(Value::Null) => Choice::Auto,
            Some(Value::String(mode)) if mode == "auto" => Choice::Auto,
            Some(Value::String(mode)) if mode == "required" => Choice::Required,
            Some(_) => {
                return Err(RequestError::invalid(
                    format!("{base}.mode"),
                    "must be 'auto' or 'required'",
                ));
            }
        };
        let tools = allowed
            .get("tools")
            .and_then(Value::as_array)
            .ok_or_else(|| RequestError::wrong_type(format!("{base}.tools"), "an array"))?;
        let mut names = Vec::with_capacity(tools.len());
        for (i, tool) in tools.iter().enumerate() {
            let param = format!("{base}.tools[{i}]");
            let tool = tool
                .as_object()
                .ok_or_else(|| RequestError::wrong_type(param.clone(), "an object"))?;
            names.push(function_name(tool, &param)?);
        }
        self.allowed = Some(names);
        Ok(())
    }
}

/// `Some` unless absent or `null`.
fn present(value: Option<&Value>) -> Option<&Value> {
    value.filter(|value| !value.is_null())
}

fn mode_choice(mode: &str) -> Option<Choice> {
    match mode {
        "none" => Some(Choice::None),
        "auto" => Some(Choice::Auto),
        "required" => Some(Choice::Required),
        _ => None,
    }
}

/// The legacy `function_call`: `"none"`, `"auto"` or `{name}`.
fn legacy_choice(call: &Value) -> Result<Choice, RequestError> {
    match call {
        Value::String(mode) if mode == "none" => Ok(Choice::None),
        Value::String(mode) if mode == "auto" => Ok(Choice::Auto),
        Value::String(mode) => Err(RequestError::invalid(
            "function_call",
            format!("'{mode}' is not one of 'none', 'auto'"),
        )),
        Value::Object(object) => match object.get("name") {
            Some(Value::String(name)) => Ok(Choice::Named(name.clone())),
            None | Some(Value::Null) => Err(RequestError::missing("function_call.name")),
            Some(_) => Err(RequestError::wrong_type("function_call.name", "a string")),
        },
        _ => Err(RequestError::wrong_type(
            "function_call",
            "a string or an object",
        )),
    }
}

/// The tool name in `{type: "function", function: {name}}`; the Responses API
/// spelling `{type: "function", name}` is accepted too.
fn function_name(object: &Map<String, Value>, base: &str) -> Result<String, RequestError> {
    let (name, param) = match object.get("function") {
        Some(Value::Object(function)) => (function.get("name"), format!("{base}.function.name")),
        _ => (object.get("name"), format!("{base}.function.name")),
    };
    match name {
        Some(Value::String(name)) => Ok(name.clone()),
        None | Some(Value::Null) => Err(RequestError::missing(param)),
        Some(_) => Err(RequestError::wrong_type(param, "a string")),
    }
}

fn require_declared(declared: &ToolSet, name: &str, param: &str) -> Result<(), RequestError> {
    if declared.contains(name) {
        Ok(())
    } else {
        Err(RequestError::UndeclaredTool {
            param: param.to_string(),
            name: name.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(choice: Value, call: Value, parallel: Value) -> Result<Policy, RequestError> {
        Policy::from_request(Some(&choice), Some(&call), Some(&parallel))
    }

    #[test]
    fn string_choices() {
        for (text, choice) in [
            ("none", Choice::None),
            ("auto", Choice::Auto),
            ("required", Choice::Required),
        ] {
            let read = policy(json!(text), Value::Null, Value::Null).expect("valid");
            assert_eq!(read.choice, choice);
            assert!(read.parallel);
        }
    }

    #[test]
    fn tool_choice_wins_over_function_call() {
        let read = policy(json!("required"), json!("none"), json!(false)).expect("valid");
        assert_eq!(read.choice, Choice::Required);
        assert!(!read.parallel);
    }

    #[test]
    fn responses_api_spelling_of_a_named_choice() {
        let read = policy(
            json!({"type": "function", "name": "a"}),
            Value::Null,
            Value::Null,
        )
        .expect("valid");
        assert_eq!(read.choice, Choice::Named("a".into()));
    }

    #[test]
    fn allowed_tools_default_mode_is_auto() {
        let choice = json!({"type": "allowed_tools", "allowed_tools": {"tools": [{"type": "function", "name": "a"}]}});
        let read = policy(choice, Value::Null, Value::Null).expect("valid");
        assert_eq!(read.choice, Choice::Auto);
        assert_eq!(read.allowed, Some(vec!["a".to_string()]));
    }

    #[test]
    fn malformed_choices_name_their_param() {
        let cases = [
            (json!(3), Value::Null, "tool_choice"),
            (
                json!({"function": {"name": "a"}}),
                Value::Null,
                "tool_choice.type",
            ),
            (
                json!({"type": "web_search"}),
                Value::Null,
                "tool_choice.type",
            ),
            (
                json!({"type": "function"}),
                Value::Null,
                "tool_choice.function.name",
            ),
            (
                json!({"type": "allowed_tools", "allowed_tools": {"mode": "x", "tools": []}}),
                Value::Null,
                "tool_choice.allowed_tools.mode",
            ),
            (
                json!({"type": "allowed_tools", "allowed_tools": {"tools": [1]}}),
                Value::Null,
                "tool_choice.allowed_tools.tools[0]",
            ),
            (Value::Null, json!("required"), "function_call"),
            (Value::Null, json!({}), "function_call.name"),
        ];
        for (choice, call, param) in cases {
            let err = policy(choice, call, Value::Null).expect_err(param);
            assert_eq!(err.param(), Some(param));
        }
    }

    #[test]
    fn named_choice_must_be_declared() {
        let declared = ToolSet::default();
        let read = policy(Value::Null, json!({"name": "a"}), Value::Null).expect("valid");
        let err = read.offered(&declared).expect_err("undeclared");
        assert_eq!(err.param(), Some("function_call.name"));
    }
}
