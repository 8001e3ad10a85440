//! The system block: instructions on how to call tools, then the contracts.
//!
//! Seed 000 puts the block before the client's own system prompt, separated by
//! a blank line, so the client's instructions (often "answer briefly", persona,
//! ...) come last and keep their weight.

use serde_json::{Value, json};

use crate::config::SEARCH_TOOL;
use crate::natural::contract;
use crate::natural::error::RequestError;
use crate::natural::policy::{Choice, Policy};
use crate::natural::syntax::{Syntax, python};
use crate::natural::tools::ToolSet;

/// The placeholder a user instruction template must contain.
pub const CONTRACTS_PLACEHOLDER: &str = "{contracts}";

/// The largest system block (instructions and contracts) a request may need.
pub const MAX_BLOCK_BYTES: usize = 4 * 1024 * 1024;

/// Renders the whole block for the tools `offered` under `policy`.
///
/// With a user `template`, its `{contracts}` placeholder is replaced and the
/// per-request rules (required, named, at most one call) that differ from the
/// default are appended after it, because a static template cannot know them.
/// A template without the placeholder (rejected by `NaturalOptions::validate`,
/// but possible if that was skipped) gets the contracts appended.
///
/// A block over [`MAX_BLOCK_BYTES`] is refused, naming the tool whose contract
/// crossed the limit: it would cost every request that carries it (and the
/// upstream's context) far more than any real tool set does.
pub fn render_block(
    offered: &ToolSet,
    policy: &Policy,
    syntax: Syntax,
    template: Option<&str>,
) -> Result<String, RequestError> {
    let contracts = render_contracts(offered, syntax)?;
    let block = match template {
        None => {
            let searching = offered.tools.iter().any(|t| t.name == SEARCH_TOOL);
            let mut block = instructions(syntax, policy, searching);
            block.push_str("\n\n# Available tools\n\n");
            block.push_str(&contracts);
            block
        }
        Some(template) => {
            let mut block = if template.contains(CONTRACTS_PLACEHOLDER) {
                template.replace(CONTRACTS_PLACEHOLDER, &contracts)
            } else {
                format!("{}\n\n{contracts}", template.trim_end())
            };
            let rules = policy_rules(policy);
            if !rules.is_empty() {
                block.push_str("\n\n");
                block.push_str(&rules.join("\n"));
            }
            block
        }
    };
    if block.len() > MAX_BLOCK_BYTES {
        // Only a template repeating the placeholder gets here.
        let name = offered.names().last().unwrap_or_default();
        return Err(RequestError::ContractTooLarge {
            name: name.to_string(),
            limit: MAX_BLOCK_BYTES,
        });
    }
    Ok(block)
}

/// All contracts, separated by a blank line; refused as soon as they pass
/// [`MAX_BLOCK_BYTES`], so the work done is bounded by the limit plus one
/// contract.
pub fn render_contracts(tools: &ToolSet, syntax: Syntax) -> Result<String, RequestError> {
    let mut out = String::new();
    for tool in tools.tools.iter().filter(|t| !t.unlisted) {
        if !out.is_empty() {
            out.push_str("\n\n");
        }
        contract::render(tool, syntax, &mut out);
        if out.len() > MAX_BLOCK_BYTES {
            return Err(RequestError::ContractTooLarge {
                name: tool.name.clone(),
                limit: MAX_BLOCK_BYTES,
            });
        }
    }
    Ok(out)
}

/// The built-in instructions for `syntax` and `policy`; `searching`: the
/// tools include `search_tools`, which finds the others (`tool_search`).
pub fn instructions(syntax: Syntax, policy: &Policy, searching: bool) -> String {
    let mut format = String::new();
    syntax.render_call("ToolName", &json!({"parameter": "value"}), &mut format);
    let syntax_note = match syntax {
        Syntax::Tag => "The opening and closing tags are the exact name of the tool.",
        Syntax::ToolCall => "The name attribute is the exact name of the tool.",
        Syntax::Bracket => {
            "Write each call on a single line. The text in square brackets is a short description of what the call does."
        }
        Syntax::Python => {
            "The calls are a Python list: the exact name of the tool, then every parameter as a keyword argument whose value is a Python literal (a string in quotes, a number, True, False, None, a list or a dict)."
        }
    };
    // Measured on BFCL with Qwen2.5-Coder-0.5B (benches/bfcl.sh): with "you
    // can call the tools" and "call a tool only when it helps" the model
    // worked out answers itself in the tag and tool_call syntaxes (2 and 4
    // of 8 simple cases called); saying tools are how it answers, naming
    // what they do, made every syntax call (8 of 8). Its price is
    // irrelevance: a 0.5B model then also calls a tool made for another
    // task (4 of 10 answered in text, from 10); no wording tried kept both
    // (README's natural-mode section has the figures and a template for the
    // other trade). Asking for the user's values only took one invented
    // call away.
    let mut opening = "You answer by calling the tools listed below: for a calculation, a lookup or an action one of them provides, write the call instead of working out the answer yourself.".to_string();
    if searching {
        opening.push_str(&format!(" Many more tools exist than are listed: when none of the listed tools does what the user asks, call {SEARCH_TOOL} with the task in a few words, then call the tool it finds."));
    } else if matches!(policy.choice, Choice::Auto | Choice::None) {
        opening.push_str(" When no tool fits the request, answer directly without any call.");
    }
    opening.push_str(" Use only values the user gave; never invent one.");
    let mut lines = vec![
        "# Tools".to_string(),
        String::new(),
        opening,
        String::new(),
        "To call a tool, write the call in exactly this format:".to_string(),
        String::new(),
        format,
        String::new(),
        syntax_note.to_string(),
        String::new(),
    ];
    if policy.parallel {
        // Measured on BFCL's parallel categories with Qwen2.5-Coder-0.5B
        // (benches/bfcl.sh): told only "to make several calls, write one
        // block per call", the model stopped after the first call in most
        // cases that needed several; a worked pair shows it the shape.
        let mut pair = String::new();
        let first = json!({"parameter": "first value"});
        let second = json!({"parameter": "second value"});
        let how = if syntax == Syntax::Python {
            // One list holds every call of the reply.
            pair.push('[');
            python::write_call("ToolName", &first, &mut pair);
            pair.push_str(", ");
            python::write_call("ToolName", &second, &mut pair);
            pair.push(']');
            "in this reply, all in one list"
        } else {
            syntax.render_call("ToolName", &first, &mut pair);
            pair.push('\n');
            syntax.render_call("ToolName", &second, &mut pair);
            "in this reply, one after another"
        };
        lines.extend([
            format!("When the user asks for several things (one tool for several values, or several tools), write every call the request needs {how}. Two calls look like this:"),
            String::new(),
            pair,
            String::new(),
        ]);
    }
    lines.extend([
        "- Only the names listed under \"Available tools\" are tools; never call anything else.".to_string(),
        if syntax == Syntax::Python {
            "- The keyword arguments match the tool's parameters and include every required parameter.".to_string()
        } else {
            "- The arguments are one JSON object that matches the tool's parameters and includes every required parameter.".to_string()
        },
    ]);
    lines.extend(policy_rules(policy));
    // Measured on Qwen2.5-Coder-0.5B: saying what to do with results is
    // what makes a small model answer instead of calling again; naming the
    // `<tool_response>` blocks here made it write one instead of a call.
    lines.push("- Put any explanation for the user BEFORE the calls. After the last call, stop and wait: the results will follow.".to_string());
    lines.push("- When the results arrive, answer the user's question with them in plain words; do not call the same tool again.".to_string());
    lines.join("\n")
}

/// The rules that depend on the request's policy and differ from the
/// default (several calls allowed, calling optional).
fn policy_rules(policy: &Policy) -> Vec<String> {
    let mut rules = Vec::new();
    // Several calls are allowed by default; the built-in instructions show
    // how to write them.
    if !policy.parallel {
        rules.push("- Make at most one call per reply.".to_string());
    }
    match &policy.choice {
        Choice::Required => {
            rules.push("- You MUST call at least one tool in this reply.".to_string());
        }
        Choice::Named(name) => rules.push(format!(
            "- You MUST call the tool {name} in this reply, and no other tool."
        )),
        // Auto's rule opens the built-in instructions.
        Choice::Auto | Choice::None => {}
    }
    rules
}

/// A 32-character alphanumeric string, random per process, that stands for
/// the block while a request is written (see [`splice`]).
pub fn placeholder() -> &'static str {
    static PLACEHOLDER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PLACEHOLDER.get_or_init(|| {
        use rand::RngExt;
        let tail: String = rand::rng()
            .sample_iter(rand::distr::Alphanumeric)
            .take(24)
            .map(char::from)
            .collect();
        format!("tgblock_{tail}")
    })
}

/// Replaces the one `placeholder` in a written body with `block_json` (the
/// block as it reads inside a JSON string). JSON escapes one character at a
/// time, so the result is what writing the block itself would have given.
pub fn splice(body: &mut Vec<u8>, placeholder: &str, block_json: &str) {
    if let Some(at) = memchr::memmem::find(body, placeholder.as_bytes()) {
        // Three copies, not `Vec::splice`, which moves the block a byte at a time.
        let mut spliced = Vec::with_capacity(body.len() - placeholder.len() + block_json.len());
        spliced.extend_from_slice(&body[..at]);
        spliced.extend_from_slice(block_json.as_bytes());
        spliced.extend_from_slice(&body[at + placeholder.len()..]);
        *body = spliced;
    }
}

/// Puts `block` before the system prompt: into the first `system` or
/// `developer` message (`developer` is the newer name for the same thing),
/// or as a new system message at position 0 when there is none.
pub fn inject(messages: &mut Vec<Value>, block: &str) {
    let target = messages.iter_mut().find(|message| {
        matches!(
            message.get("role").and_then(Value::as_str),
            Some("system" | "developer")
        )
    });
    let Some(Value::Object(message)) = target else {
        messages.insert(0, json!({"role": "system", "content": block}));
        return;
    };
    let content = message.get_mut("content");
    match content {
        Some(Value::String(text)) if !text.trim().is_empty() => {
            *text = format!("{block}\n\n{text}");
        }
        Some(Value::Array(parts)) => {
            // Parts are usually concatenated as they are, so the separating
            // blank line travels inside the new part.
            parts.insert(0, json!({"type": "text", "text": format!("{block}\n\n")}));
        }
        _ => {
            message.insert("content".to_string(), Value::String(block.to_string()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inject_into_empty_or_null_system_content() {
        for content in [json!(""), json!(null)] {
            let mut messages = vec![json!({"role": "system", "content": content})];
            inject(&mut messages, "BLOCK");
            assert_eq!(
                messages,
                vec![json!({"role": "system", "content": "BLOCK"})]
            );
        }
    }

    #[test]
    fn splicing_the_escaped_block_writes_what_injecting_it_writes() {
        let block = "## GetWeather\n\"quoted\" \\ back\tslash é 🌦 \u{1} </script>";
        let block_json = {
            let q = serde_json::to_string(block).unwrap();
            q[1..q.len() - 1].to_owned()
        };
        for messages in [
            json!([{"role": "system", "content": "Be brief."}]),
            json!([{"role": "system", "content": ""}, {"role": "user", "content": "x"}]),
            json!([{"role": "user", "content": "u"}, {"role": "developer", "content": "dev"}]),
            json!([{"role": "system", "content": [{"type": "text", "text": "parts"}]}]),
            json!([{"role": "system"}]),
            json!([{"role": "user", "content": "no system"}]),
        ] {
            let Value::Array(list) = messages else {
                unreachable!()
            };
            let mut direct = list.clone();
            inject(&mut direct, block);
            let mut spliced = list.clone();
            inject(&mut spliced, placeholder());
            let mut written = serde_json::to_vec(&spliced).unwrap();
            splice(&mut written, placeholder(), &block_json);
            assert_eq!(
                String::from_utf8(written).unwrap(),
                serde_json::to_string(&direct).unwrap()
            );
        }
    }

    #[test]
    fn inject_targets_the_first_system_or_developer_message() {
        let mut messages = vec![
            json!({"role": "user", "content": "u"}),
            json!({"role": "system", "content": "first"}),
            json!({"role": "system", "content": "second"}),
        ];
        inject(&mut messages, "BLOCK");
        assert_eq!(messages[1]["content"], "BLOCK\n\nfirst");
        assert_eq!(messages[2]["content"], "second");
    }

    #[test]
    fn instructions_follow_the_policy() {
        let auto = instructions(Syntax::Tag, &Policy::default(), false);
        // Several calls are shown as a worked pair, in the syntax.
        let mut pair = String::new();
        Syntax::Tag.render_call("ToolName", &json!({"parameter": "first value"}), &mut pair);
        pair.push('\n');
        Syntax::Tag.render_call("ToolName", &json!({"parameter": "second value"}), &mut pair);
        assert!(
            auto.contains(&format!("Two calls look like this:\n\n{pair}\n\n")),
            "{auto}"
        );
        assert!(auto.contains("instead of working out the answer yourself"));
        assert!(auto.contains("When no tool fits the request, answer directly"));
        assert!(auto.contains("BEFORE the calls"));
        assert!(
            !auto
                .lines()
                .any(|line| line == "Example:" || line.starts_with("## "))
        );

        let named = Policy {
            choice: Choice::Named("X".into()),
            parallel: false,
            ..Policy::default()
        };
        let text = instructions(Syntax::Bracket, &named, false);
        assert!(text.contains("Make at most one call per reply."));
        assert!(!text.contains("Two calls") && !text.contains("second value"));
        assert!(text.contains("You MUST call the tool X in this reply, and no other tool."));
        assert!(!text.contains("When no tool fits"));
    }

    #[test]
    fn template_without_placeholder_still_gets_the_contracts() {
        let tools = ToolSet::from_tools(vec![crate::natural::tools::Tool {
            name: "T".into(),
            description: None,
            parameters: None,
            strict: false,
            unlisted: false,
        }]);
        let block = render_block(
            &tools,
            &Policy::default(),
            Syntax::Tag,
            Some("Use tools.\n"),
        )
        .unwrap();
        assert!(block.starts_with("Use tools.\n\n## T\n"));
    }

    #[test]
    fn a_block_over_the_cap_is_refused_naming_the_tool() {
        // Each contract shows its 1 MiB description: the fifth crosses 4 MiB.
        let description = "d".repeat(1024 * 1024);
        let tools = ToolSet::from_tools(
            (0..8)
                .map(|i| crate::natural::tools::Tool {
                    name: format!("T{i}"),
                    description: Some(description.clone()),
                    parameters: None,
                    strict: false,
                    unlisted: false,
                })
                .collect(),
        );
        let err = render_block(&tools, &Policy::default(), Syntax::Tag, None).unwrap_err();
        assert_eq!(
            err,
            RequestError::ContractTooLarge {
                name: "T3".into(),
                limit: MAX_BLOCK_BYTES
            }
        );
        assert_eq!(err.param(), Some("tools"));
        assert!(err.to_string().contains("'T3'"));
    }
}
