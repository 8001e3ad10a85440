//! Constrained calls for vLLM and SGLang (`constrain = "structural_tag"`):
//! each declared tool's call as an xgrammar structural tag, the tag's
//! `begin` the call's text up to its arguments (the tool's name in it, so
//! the arguments' schema is that tool's), its content the arguments' JSON
//! Schema, its `end` what closes the call, sent as the request's
//! `response_format: {"type": "structural_tag", "format": …}`.
//!
//! Lazy for `auto` (`triggered_tags`): text is free until the model writes
//! a declared tool's opener up to its name (the trigger, as in the GBNF
//! grammar's `grammar_triggers`), and from there only the rest of that
//! tool's opener, arguments its schema accepts, and the closer; then text
//! again. A name no tool has is no trigger, so what a model writes to call
//! a tool that does not exist stays text. Eager for `required` or a named
//! tool (`tags_with_separator`, at least one): the answer is calls, one per
//! line. Without `parallel_tool_calls`, the first call ends the answer.
//!
//! The JSON syntaxes' arguments are a JSON object between a fixed opener
//! and closer, so their tags' content is `json_schema`. Python's calls are
//! one list, `[a(k=v), b(…)]`: a tag per tool begins with its trigger
//! `[name(`, its content is xgrammar's `grammar` type (the EBNF of the GBNF
//! grammar's rules: that tool's keyword arguments, `)`, and with
//! `parallel_tool_calls` further calls to any declared tool), and `]` ends
//! it. Eager, the answer is one list.

use serde_json::{Value, json};

use super::Budget;
use crate::natural::error::RequestError;
use crate::natural::policy::{Choice, Policy};
use crate::natural::syntax::{self, Syntax};
use crate::natural::tools::{Tool, ToolSet};

/// The structural tag of a request's calls: its `format` object, which
/// xgrammar compiles (vLLM and SGLang pass it to `compile_structural_tag`
/// as they receive it).
#[derive(Debug, Clone, PartialEq)]
pub struct StructuralTag {
    /// `triggered_tags` (lazy) or `tags_with_separator` (eager).
    pub format: Value,
}

impl StructuralTag {
    /// The request field that carries it: `response_format`.
    pub fn fields(&self) -> Vec<(&'static str, Value)> {
        vec![(
            "response_format",
            json!({"type": "structural_tag", "format": self.format}),
        )]
    }
}

/// What a tag holds between its `begin` and `end`.
#[derive(Debug, Clone, PartialEq)]
enum Content<'t> {
    /// A JSON value its schema accepts (xgrammar's `json_schema`).
    JsonSchema(&'t Value),
    /// A tool that declares no parameters: an empty object.
    NoArguments,
    /// Text an EBNF grammar accepts (xgrammar's `grammar`).
    Grammar(String),
}

impl Content<'_> {
    fn to_json(&self) -> Value {
        let schema = match self {
            Content::JsonSchema(schema) => (*schema).clone(),
            Content::NoArguments => {
                json!({"type": "object", "properties": {}, "additionalProperties": false})
            }
            Content::Grammar(grammar) => return json!({"type": "grammar", "grammar": grammar}),
        };
        json!({"type": "json_schema", "json_schema": schema})
    }
}

/// One tool's call in a syntax: the words that start it (up to the end of
/// its name), everything before its arguments, the arguments, everything
/// after them.
#[derive(Debug, Clone, PartialEq)]
struct Call<'t> {
    trigger: String,
    begin: String,
    content: Content<'t>,
    end: String,
}

impl Call<'_> {
    fn tag(&self) -> Value {
        json!({
            "type": "tag",
            "begin": self.begin,
            "content": self.content.to_json(),
            "end": self.end,
        })
    }
}

/// The structural tag for calls to `offered` in `syntax` under `policy`;
/// `None` when nothing may be called. Python's grammars over
/// [`Budget::DEFAULT`] are refused, naming the tool that crossed it.
pub fn for_tools(
    offered: &ToolSet,
    syntax: Syntax,
    policy: &Policy,
) -> Result<Option<StructuralTag>, RequestError> {
    if offered.tools.is_empty() || policy.choice == Choice::None {
        return Ok(None);
    }
    let eager = matches!(policy.choice, Choice::Required | Choice::Named(_));
    let calls: Vec<Call<'_>> = if syntax == Syntax::Python {
        let grammars = super::python_tag_grammars(offered, policy.parallel, Budget::DEFAULT)?;
        offered
            .tools
            .iter()
            .zip(grammars)
            .map(|(tool, grammar)| {
                let begin = format!("[{}(", tool.name);
                Call {
                    trigger: begin.clone(),
                    begin,
                    content: Content::Grammar(grammar),
                    end: "]".to_owned(),
                }
            })
            .collect()
    } else {
        offered
            .tools
            .iter()
            .map(|tool| call(syntax, tool, eager))
            .collect()
    };
    // A python list holds all of an answer's calls: eager, one list.
    let stop_after_first = !policy.parallel || (eager && syntax == Syntax::Python);
    let tags: Vec<Value> = calls.iter().map(Call::tag).collect();
    let format = if eager {
        json!({
            "type": "tags_with_separator",
            "tags": tags,
            "separator": "\n",
            "at_least_one": true,
            "stop_after_first": stop_after_first,
        })
    } else {
        let triggers: Vec<&str> = calls.iter().map(|c| c.trigger.as_str()).collect();
        json!({
            "type": "triggered_tags",
            "triggers": triggers,
            "tags": tags,
            "at_least_one": false,
            "stop_after_first": stop_after_first,
        })
    };
    Ok(Some(StructuralTag { format }))
}

/// `tool`'s call as the instructions show it.
///
/// Bracket calls are lazy from the object on (`{"name": "…"`): the
/// description before it is the model's own text, and the same trigger
/// holds an object written alone after a call to the schema (the parser
/// reads it as the next call). Eager, nothing may precede a call, so its
/// `begin` carries the description the instructions show.
fn call(syntax: Syntax, tool: &Tool, eager: bool) -> Call<'_> {
    let name = &tool.name;
    let mut begin = String::new();
    let mut end = String::new();
    match syntax {
        Syntax::Bracket if !eager => syntax::write_bracket_object_open(name, &mut begin),
        _ => syntax.write_call_open(name, &mut begin),
    }
    syntax.write_call_close(name, &mut end);
    let trigger = match syntax {
        Syntax::Tag => format!("<{name}>"),
        // A list's opening bracket and its first call's name (`for_tools`
        // writes python's tags).
        Syntax::Python => format!("[{name}("),
        // Up to the quote that closes the name: no trigger is a prefix of
        // another's, and an undeclared name starts none.
        Syntax::ToolCall | Syntax::Bracket => {
            let cut = match syntax {
                Syntax::Bracket => begin.rfind(", \"arguments\""),
                _ => begin.rfind('"').map(|q| q + 1),
            };
            begin[..cut.unwrap_or(begin.len())].to_owned()
        }
    };
    let content = match &tool.parameters {
        Some(schema) => Content::JsonSchema(schema),
        None => Content::NoArguments,
    };
    Call {
        trigger,
        begin,
        content,
        end,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weather() -> Tool {
        Tool {
            name: "get_weather".into(),
            description: None,
            parameters: Some(json!({"type": "object",
                "properties": {"city": {"type": "string"}}, "required": ["city"]})),
            strict: false,
            unlisted: false,
        }
    }

    fn tag_of(syntax: Syntax, policy: &Policy) -> Value {
        for_tools(&ToolSet::from_tools(vec![weather()]), syntax, policy)
            .unwrap()
            .expect("a tag")
            .format
    }

    #[test]
    fn each_syntax_opens_its_call_with_the_tools_name() {
        let auto = Policy::default();
        for (syntax, trigger, begin, end) in [
            (
                Syntax::Tag,
                "<get_weather>",
                "<get_weather>\n```json\n",
                "\n```\n</get_weather>",
            ),
            (
                Syntax::ToolCall,
                "<tool_call name=\"get_weather\"",
                "<tool_call name=\"get_weather\">\n",
                "\n</tool_call>",
            ),
            (
                Syntax::Bracket,
                "{\"name\": \"get_weather\"",
                "{\"name\": \"get_weather\", \"arguments\": ",
                "}",
            ),
        ] {
            let format = tag_of(syntax, &auto);
            assert_eq!(format["type"], "triggered_tags", "{syntax:?}");
            assert_eq!(format["triggers"], json!([trigger]), "{syntax:?}");
            let tag = &format["tags"][0];
            assert_eq!(tag["begin"], begin, "{syntax:?}");
            assert_eq!(tag["end"], end, "{syntax:?}");
            assert_eq!(tag["content"]["json_schema"], weather().parameters.unwrap());
            assert!(tag["begin"].as_str().unwrap().starts_with(trigger));
            assert_eq!(format["stop_after_first"], false, "parallel by default");
        }
    }

    #[test]
    fn required_is_calls_only_and_none_is_no_tag() {
        let required = Policy {
            choice: Choice::Required,
            parallel: false,
            ..Policy::default()
        };
        let format = tag_of(Syntax::Bracket, &required);
        assert_eq!(format["type"], "tags_with_separator");
        assert_eq!(format["at_least_one"], true);
        assert_eq!(format["stop_after_first"], true);
        assert_eq!(
            format["tags"][0]["begin"],
            "[Calling get_weather]{\"name\": \"get_weather\", \"arguments\": "
        );
        let none = Policy {
            choice: Choice::None,
            ..Policy::default()
        };
        let tools = ToolSet::from_tools(vec![weather()]);
        assert_eq!(for_tools(&tools, Syntax::Tag, &none), Ok(None));
        assert_eq!(
            for_tools(&ToolSet::default(), Syntax::Tag, &Policy::default()),
            Ok(None)
        );
    }

    #[test]
    fn the_field_is_response_format() {
        let tag = for_tools(
            &ToolSet::from_tools(vec![Tool {
                parameters: None,
                ..weather()
            }]),
            Syntax::ToolCall,
            &Policy::default(),
        )
        .unwrap()
        .unwrap();
        let fields = tag.fields();
        assert_eq!(fields.len(), 1);
        assert_eq!(fields[0].0, "response_format");
        assert_eq!(fields[0].1["type"], "structural_tag");
        assert_eq!(
            fields[0].1["format"]["tags"][0]["content"]["json_schema"]["additionalProperties"],
            false
        );
    }

    #[test]
    fn python_tags_hold_keyword_arguments_then_the_rest_of_the_list() {
        let format = tag_of(Syntax::Python, &Policy::default());
        assert_eq!(format["type"], "triggered_tags");
        assert_eq!(format["triggers"], json!(["[get_weather("]));
        let tag = &format["tags"][0];
        assert_eq!(tag["begin"], "[get_weather(");
        assert_eq!(tag["end"], "]");
        assert_eq!(tag["content"]["type"], "grammar");
        let grammar = tag["content"]["grammar"].as_str().unwrap();
        assert!(
            grammar.starts_with("root ::= args-0-first-0 \")\" (\",\" ws call)*\n"),
            "{grammar}"
        );
        assert!(grammar.contains("\"city=\""), "{grammar}");
        assert!(grammar.contains("call-0 ::= \"get_weather(\""), "{grammar}");

        // Not parallel: the call, then `]`. Eager: one list.
        let single = Policy {
            parallel: false,
            ..Policy::default()
        };
        let format = tag_of(Syntax::Python, &single);
        let grammar = format["tags"][0]["content"]["grammar"].as_str().unwrap();
        assert!(
            grammar.starts_with("root ::= args-0-first-0 \")\"\n"),
            "{grammar}"
        );
        let required = Policy {
            choice: Choice::Required,
            ..Policy::default()
        };
        let format = tag_of(Syntax::Python, &required);
        assert_eq!(format["type"], "tags_with_separator");
        assert_eq!(format["stop_after_first"], true);
    }

    #[test]
    fn python_grammars_over_the_budget_are_refused() {
        let tools = ToolSet::from_tools(vec![weather(), weather()]);
        let small = Budget {
            bytes: 600,
            ..Budget::DEFAULT
        };
        assert!(matches!(
            super::super::python_tag_grammars(&tools, true, small),
            Err(RequestError::GrammarTooLarge { .. })
        ));
        assert_eq!(
            super::super::python_tag_grammars(&tools, true, Budget::DEFAULT)
                .unwrap()
                .len(),
            2
        );
    }
}
