//! Constrained calls (`[providers.tools] constrain = "gbnf"`): a GBNF
//! grammar for llama.cpp upstreams that leaves the model's text free and,
//! from a declared tool's opener on (up to its name), admits only arguments
//! its schema accepts, in the provider's syntax, then text again.
//!
//! The grammar is written so it holds whether the server applies it lazily
//! (from a trigger word on, as `grammar_lazy` asks) or from the first token
//! (llama.cpp's chat endpoint overrides `grammar_lazy` with its template's
//! own setting): its text rule never contains an opener (`text`), so the
//! only way to write one is the call rule, and a trigger's text is where a
//! call starts. `tool_choice: "required"` or a named function makes it
//! eager: the answer is calls.
//!
//! Writing a grammar costs time and memory linear in the tools' schemas
//! (each distinct subschema is one rule, written once), and never more than
//! a [`Budget`]: a request whose tools need more is refused with a `400`
//! naming the tool, before anything is sent.
//!
//! `structural_tag` holds the same calls for vLLM and SGLang
//! (`constrain = "structural_tag"`), as an xgrammar structural tag.

mod gbnf;
mod schema;
pub mod structural_tag;
mod text;

use serde_json::{Value, json};

use crate::natural::error::RequestError;
use crate::natural::policy::{Choice, Policy};
use crate::natural::syntax::{self, Syntax};
use crate::natural::tools::{Tool, ToolSet};
use gbnf::{Over, Rules};

/// The most a request's grammar may take to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Schema nodes written (a subschema shared by several places counts
    /// once).
    pub nodes: usize,
    /// Rules in the grammar.
    pub rules: usize,
    /// Bytes of grammar text.
    pub bytes: usize,
}

impl Budget {
    /// Every request's budget: 65,536 schema nodes, 65,536 rules and 4 MiB
    /// of text, well past what 128 tools of 50 parameters each need (about
    /// 20,000 rules and 1 MiB).
    pub const DEFAULT: Budget = Budget {
        nodes: 1 << 16,
        rules: 1 << 16,
        bytes: 4 << 20,
    };
}

/// `grammar_triggers` entries of this type are words (llama.cpp's
/// `COMMON_GRAMMAR_TRIGGER_TYPE_WORD`).
const TRIGGER_WORD: u64 = 1;

/// A request's grammar and how the server is to apply it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grammar {
    /// The GBNF text.
    pub gbnf: String,
    /// Whether text before the first call is free (`grammar_lazy`).
    pub lazy: bool,
    /// The words a call starts with (`grammar_triggers`).
    pub triggers: Vec<String>,
}

impl Grammar {
    /// The request fields that carry it: `grammar`, `grammar_lazy`, and
    /// `grammar_triggers` when lazy.
    pub fn fields(&self) -> Vec<(&'static str, Value)> {
        let mut fields = vec![
            ("grammar", Value::String(self.gbnf.clone())),
            ("grammar_lazy", Value::Bool(self.lazy)),
        ];
        if self.lazy {
            let triggers = self
                .triggers
                .iter()
                .map(|word| json!({"type": TRIGGER_WORD, "value": word}))
                .collect();
            fields.push(("grammar_triggers", Value::Array(triggers)));
        }
        fields
    }
}

/// The grammar for calls to `offered` in `syntax` under `policy`; `None`
/// when nothing may be called. A grammar over [`Budget::DEFAULT`] is
/// refused, naming the tool that crossed it.
pub fn for_tools(
    offered: &ToolSet,
    syntax: Syntax,
    policy: &Policy,
) -> Result<Option<Grammar>, RequestError> {
    within(offered, syntax, policy, Budget::DEFAULT)
}

/// [`for_tools`] within `budget`.
pub fn within(
    offered: &ToolSet,
    syntax: Syntax,
    policy: &Policy,
    budget: Budget,
) -> Result<Option<Grammar>, RequestError> {
    if offered.tools.is_empty() || policy.choice == Choice::None {
        return Ok(None);
    }
    let mut rules = Rules::new(budget);
    let mut shared = if syntax == Syntax::Python {
        schema::Shared::python()
    } else {
        schema::Shared::default()
    };
    let mut calls = Vec::with_capacity(offered.tools.len());
    for (i, tool) in offered.tools.iter().enumerate() {
        calls.push(add_call(&mut rules, &mut shared, syntax, tool, i).0);
        refuse_over(&rules, budget, &tool.name)?;
    }
    rules.add("call", calls.join(" | "));
    // Between calls: spaces and line breaks (and in bracket, commas). In
    // bracket a call may also be an object alone, after the previous one,
    // which the parser reads as the next call.
    let (gap, next) = match syntax {
        Syntax::Bracket => {
            let objects: Vec<String> = (0..offered.tools.len())
                .map(|i| gbnf::name("object", &[&i.to_string()]))
                .collect();
            rules.add("next-object", objects.join(" | "));
            (r#"[ \t\r\n,]*"#, "(call | next-object)")
        }
        Syntax::Tag | Syntax::ToolCall => (r#"[ \t\r\n]*"#, "call"),
        // The calls of a reply are one list: `[a(…), b(…)]`.
        Syntax::Python => {
            let list = if policy.parallel {
                r#""[" call ("," ws call)* "]""#
            } else {
                r#""[" call "]""#
            };
            rules.add("list", list);
            (r#"[ \t\r\n]*"#, "list")
        }
    };
    rules.add("gap", gap);
    let triggers = triggers(offered, syntax);
    let eager = matches!(policy.choice, Choice::Required | Choice::Named(_));
    let root = if eager {
        // The answer is calls, one or (parallel) several.
        if syntax == Syntax::Python {
            "ws list ws".to_owned()
        } else if policy.parallel {
            format!("ws call (gap {next})* ws")
        } else {
            "ws call ws".to_owned()
        }
    } else if syntax == Syntax::Python {
        // A list's `]` ends its calls: the text after it is free again.
        let words: Vec<Vec<char>> = triggers.iter().map(|t| t.chars().collect()).collect();
        let free = text::add_text_without(&mut rules, "text", &words);
        let more = if policy.parallel { "*" } else { "?" };
        format!("{free} (list {free}){more}")
    } else {
        let words: Vec<Vec<char>> = triggers.iter().map(|t| t.chars().collect()).collect();
        let free = text::add_text_without(&mut rules, "text", &words);
        // Text after a call never begins (past the gap) with `{`: an
        // object there reads as a call the grammar did not check (bracket)
        // or as arguments lost to text (the tag syntaxes, whose blocks
        // take several objects instead).
        let start = text::add_text_not_starting_with(
            &mut rules,
            "text",
            &words,
            &['{', ' ', '\t', '\n', '\r', ','],
        );
        let after = if policy.parallel && syntax == Syntax::Bracket {
            format!("(gap next-object)* gap {start}")
        } else {
            format!("gap {start}")
        };
        rules.add("after", after);
        let more = if policy.parallel { "*" } else { "?" };
        let whole = format!("{free} (call after){more}");
        match syntax {
            // Applied lazily, the grammar reads from the trigger `]{` on:
            // the rest of a call whose description was free text.
            Syntax::Bracket if policy.parallel => {
                format!(r#"{whole} | "]" next-object after (call after)*"#)
            }
            Syntax::Bracket => format!(r#"{whole} | "]" next-object after"#),
            Syntax::Tag | Syntax::ToolCall | Syntax::Python => whole,
        }
    };
    rules.add("root", root);
    let last = offered.tools.last().map_or("", |tool| tool.name.as_str());
    refuse_over(&rules, budget, last)?;
    Ok(Some(Grammar {
        gbnf: rules.text(),
        lazy: !eager,
        triggers,
    }))
}

/// The python syntax's calls for structural tags (xgrammar's EBNF, which
/// reads these rules as GBNF writes them): for each tool, in order, the
/// grammar of what follows its trigger `[name(` up to the list's closing
/// `]`: its keyword arguments, `)`, and, when `parallel`, further calls to
/// any declared tool (`, other(…)`). The rules are the GBNF grammar's
/// ([`add_call`]); with `parallel` every tool's grammar holds every tool's
/// rules, so the total (tools × rules) is what [`Budget`] bounds.
pub(crate) fn python_tag_grammars(
    offered: &ToolSet,
    parallel: bool,
    budget: Budget,
) -> Result<Vec<String>, RequestError> {
    let tools: Vec<(usize, &Tool)> = offered.tools.iter().enumerate().collect();
    let mut grammars = Vec::with_capacity(tools.len());
    let mut bytes = 0;
    let mut push = |grammar: String, name: &str| {
        bytes += grammar.len();
        if bytes > budget.bytes {
            return Err(RequestError::GrammarTooLarge {
                name: name.to_owned(),
                limit: format!("{} bytes", budget.bytes),
            });
        }
        grammars.push(grammar);
        Ok(())
    };
    // Parallel: one text of every call's rules, a root per tool.
    // Otherwise each tool's rules alone.
    let groups: Vec<&[(usize, &Tool)]> = if parallel {
        vec![&tools[..]]
    } else {
        tools.chunks(1).collect()
    };
    for group in groups {
        let mut rules = Rules::new(budget);
        let mut shared = schema::Shared::python();
        let mut calls = Vec::with_capacity(group.len());
        let mut args = Vec::with_capacity(group.len());
        for &(i, tool) in group {
            let (call, arg) = add_call(&mut rules, &mut shared, Syntax::Python, tool, i);
            refuse_over(&rules, budget, &tool.name)?;
            calls.push(call);
            args.push(arg);
        }
        let rest = if parallel {
            rules.add("call", calls.join(" | "));
            r#" ("," ws call)*"#
        } else {
            ""
        };
        let last = group.last().map_or("", |(_, tool)| tool.name.as_str());
        refuse_over(&rules, budget, last)?;
        let text = rules.text();
        for (arg, (_, tool)) in args.iter().zip(group) {
            push(format!("root ::= {arg} \")\"{rest}\n{text}"), &tool.name)?;
        }
    }
    Ok(grammars)
}

/// The `400` for a grammar that crossed its budget at tool `name`.
fn refuse_over(rules: &Rules, budget: Budget, name: &str) -> Result<(), RequestError> {
    let limit = match rules.over() {
        None => return Ok(()),
        Some(Over::Nodes) => format!("{} schema nodes", budget.nodes),
        Some(Over::Rules) => format!("{} rules", budget.rules),
        Some(Over::Bytes) => format!("{} bytes", budget.bytes),
    };
    Err(RequestError::GrammarTooLarge {
        name: name.to_owned(),
        limit,
    })
}

/// The words a call opens with, up to the end of the tool's name: what the
/// text may never contain. A name no tool has is no trigger: what a model
/// writes to call a tool that does not exist stays text (the parser reads
/// it as such) instead of being forced into a call of a declared tool
/// (Qwen2.5-Coder-0.5B, asked what none of its tools does, wrote
/// `[Calling calculate_triangle_area]{"name": "calculate_triangle_area", …`;
/// with `]{` as the trigger, the grammar turned 8 such answers of 25 into
/// calls of the one tool it had).
fn triggers(offered: &ToolSet, syntax: Syntax) -> Vec<String> {
    offered
        .tools
        .iter()
        .map(|t| match syntax {
            Syntax::Tag => format!("<{}>", t.name),
            Syntax::ToolCall => {
                let mut open = String::new();
                syntax.write_call_open(&t.name, &mut open);
                let end = open.rfind('"').map_or(open.len(), |q| q + 1);
                open[..end].to_owned()
            }
            Syntax::Bracket => {
                let mut open = String::from("]");
                syntax::write_bracket_object_open(&t.name, &mut open);
                let end = open.rfind(", \"arguments\"").unwrap_or(open.len());
                open[..end].to_owned()
            }
            // A list's opening bracket and its first call's name.
            Syntax::Python => format!("[{}(", t.name),
        })
        .collect()
}

/// One tool's call rule, in the form the syntax's parser reads; returns
/// its name and its arguments' rule.
///
/// A tag-style block holds one argument object, then its closing tag. The
/// parser also reads several objects in one block (models write that), but
/// a grammar that allows them lets a model at temperature 0 repeat the
/// object until its tokens run out, the block never closed (Qwen2.5-Coder-
/// 0.5B on BFCL, 3 of 23 simple cases): further calls are further blocks.
fn add_call<'s>(
    rules: &mut Rules,
    shared: &mut schema::Shared<'s>,
    syntax: Syntax,
    tool: &'s Tool,
    index: usize,
) -> (String, String) {
    let args = gbnf::name("args", &[&index.to_string()]);
    let args = match (&tool.parameters, syntax) {
        // Keyword arguments, from the schema's properties.
        (Some(schema), Syntax::Python) => schema::add_kwargs(rules, shared, &args, schema),
        (None, Syntax::Python) => {
            schema::add_python_rules(rules);
            "py-kwargs".to_owned()
        }
        (Some(schema), _) => schema::add_value(rules, shared, &args, schema),
        (None, _) => {
            schema::add_json_rules(rules);
            rules.add(&args, r#""{" ws "}""#);
            args
        }
    };
    // The call's text around its arguments, as the instructions show it.
    let name = &tool.name;
    let body = match syntax {
        Syntax::Tag | Syntax::ToolCall => {
            // As the instructions show it, with the freedom the parser
            // allows: whitespace around the objects, the fence optional.
            let (mut open, mut close) = (String::new(), String::new());
            syntax.write_call_open(name, &mut open);
            syntax.write_call_close(name, &mut close);
            let open = open.trim_end().trim_end_matches("```json").trim_end();
            let close = close.trim_start().trim_start_matches("```").trim_start();
            schema::add_json_rules(rules);
            if !rules.has("fence-open") {
                rules.add("fence-open", r#""```" ("json" | "JSON")? [ \t]* "\n""#);
            }
            format!(
                r#"{} ws (fence-open ws)? {args} ws ("```" ws)? {}"#,
                gbnf::literal(open),
                gbnf::literal(close)
            )
        }
        Syntax::Bracket => {
            // The model's own description in brackets, then the object,
            // on one line.
            let mut open = String::new();
            syntax::write_bracket_object_open(name, &mut open);
            let object = gbnf::name("object", &[&index.to_string()]);
            rules.add(&object, format!(r#"{} {args} "}}""#, gbnf::literal(&open)));
            format!(r#""[" [^\]\n]{{1,120}} "]" {object}"#)
        }
        // `name(key=value, …)`: the list around it is the `list` rule.
        Syntax::Python => format!(r#"{} {args} ")""#, gbnf::literal(&format!("{name}("))),
    };
    let call = gbnf::name("call", &[&index.to_string()]);
    rules.add(&call, body);
    (call, args)
}

#[cfg(test)]
mod tests;
