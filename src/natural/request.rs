//! The entry point of the request direction: one Chat Completions body in,
//! the body for an upstream without native tools out.

use std::sync::Arc;

use serde_json::Value;
use serde_json::value::RawValue;

use crate::config::{Constrain, DEFAULT_MAX_TOOL_RESULT_CHARS, ResultRole};
pub use crate::natural::cache::ContractCache;
use crate::natural::cache::{KeyRef, Prepared};
pub use crate::natural::error::RequestError;
use crate::natural::fields::{self, Fields};
use crate::natural::grammar::{self, structural_tag};
use crate::natural::grounding::Conversation;
use crate::natural::history::{self, HistoryOptions};
use crate::natural::policy::{Choice, Policy};
use crate::natural::prompt::{self, CONTRACTS_PLACEHOLDER};
use crate::natural::syntax::Syntax;
use crate::natural::tools::ToolSet;

/// The request fields that carry a client's own grammar (llama.cpp's): with
/// `constrain = "gbnf"` the gateway writes the grammar, and a client's
/// would be lost, so a request with tools may not send one.
const GRAMMAR_FIELDS: [&str; 4] = ["grammar", "grammar_lazy", "grammar_triggers", "json_schema"];

/// The request fields that carry a client's own constraint on vLLM and
/// SGLang: with `constrain = "structural_tag"` the gateway sends its tag in
/// `response_format`, which the servers take alongside none of these (vLLM:
/// `structured_outputs` and the older `guided_*`; SGLang: `regex`, `ebnf`,
/// `json_schema`), so a request with tools may not send one. A
/// `response_format` of type `"text"` asks for nothing and is replaced.
const STRUCTURED_FIELDS: [&str; 9] = [
    "response_format",
    "structured_outputs",
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
    "regex",
    "ebnf",
    "json_schema",
];

/// The request fields that only native tool calling understands. They are
/// removed; their meaning moves into the system prompt.
const TOOL_FIELDS: [&str; 5] = [
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "functions",
    "function_call",
];

/// How natural mode rewrites requests for one provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NaturalOptions {
    /// How calls are written.
    pub syntax: Syntax,
    /// A user instruction template with the placeholder `{contracts}`;
    /// `None` uses the built-in instructions.
    pub instructions: Option<String>,
    /// Tool results longer than this are cut with a visible marker.
    pub max_tool_result_chars: usize,
    /// The role of rewritten tool results.
    pub result_role: ResultRole,
    /// Whether the body carries a grammar or a structural tag for the calls.
    pub constrain: Constrain,
    /// `on_ungrounded = "ask"`: the plan keeps what the client wrote, for
    /// the grounding check of the reply's calls.
    pub ground: bool,
}

impl Default for NaturalOptions {
    fn default() -> Self {
        NaturalOptions {
            syntax: Syntax::default(),
            instructions: None,
            max_tool_result_chars: DEFAULT_MAX_TOOL_RESULT_CHARS,
            result_role: ResultRole::default(),
            constrain: Constrain::default(),
            ground: false,
        }
    }
}

impl NaturalOptions {
    /// Checks the options once, when the configuration is loaded, so a broken
    /// template is reported at startup rather than silently on each request.
    pub fn validate(&self) -> Result<(), String> {
        match &self.instructions {
            Some(template) if !template.contains(CONTRACTS_PLACEHOLDER) => Err(format!(
                "the natural-mode instructions template must contain the placeholder {CONTRACTS_PLACEHOLDER}"
            )),
            _ => Ok(()),
        }
    }
}

/// What the response side needs to parse the model's reply.
#[derive(Debug, Clone)]
pub struct ResponsePlan {
    /// The tools actually offered (after `allowed_tools` / named-choice filtering).
    pub tools: Arc<ToolSet>,
    /// The tool choice; for `allowed_tools`, its mode.
    pub choice: Choice,
    /// `false`: at most one call may be taken from the reply.
    pub parallel_tool_calls: bool,
    /// The client asked for a usage chunk (`stream_options.include_usage`);
    /// read here so the response side need not parse the request again.
    pub include_usage: bool,
    /// The request declared legacy `functions` (and no `tools`): the reply
    /// carries one `function_call`, not `tool_calls`.
    pub legacy_functions: bool,
    /// What the client wrote, when its calls are checked for grounding
    /// (`NaturalOptions::ground`).
    pub conversation: Option<Arc<Conversation>>,
}

/// The result of [`rewrite`].
#[derive(Debug, Clone)]
pub enum Rewrite {
    /// Nothing tool-related in the request: forward the original bytes.
    Unchanged,
    /// The new body; `plan` is `None` when the reply must not be parsed
    /// (`tool_choice: "none"`, or no tools offered).
    Rewritten {
        /// The serialized new body.
        body: Vec<u8>,
        /// How to parse the reply.
        plan: Option<ResponsePlan>,
    },
}

/// Rewrites a Chat Completions body for an upstream in natural mode.
///
/// The tool fields are removed, the contracts and instructions go before the
/// system prompt and the tool history becomes text. Every other field keeps
/// its position and its bytes: only `messages` (and the small tool-policy
/// fields) are parsed, and `tools` is read only when its rendering is not
/// cached yet.
pub fn rewrite(
    body: &[u8],
    options: &NaturalOptions,
    cache: &ContractCache,
) -> Result<Rewrite, RequestError> {
    let fields = Fields::parse(body)?;
    let mut messages = fields.parsed("messages")?;
    let has_tool_fields = TOOL_FIELDS.iter().any(|field| fields.get(field).is_some());
    if !has_tool_fields && !history::has_tool_history(messages.as_ref()) {
        return Ok(Rewrite::Unchanged);
    }

    let (policy, declared) = policy_and_tools(&fields)?;
    let prepared = prepare(declared, &policy, options, cache)?;

    let list = match messages.as_mut() {
        Some(Value::Array(list)) => list,
        Some(_) => return Err(RequestError::wrong_type("messages", "an array")),
        None => return Err(RequestError::missing("messages")),
    };
    // Read before the instructions and the tool history go in.
    let conversation =
        (options.ground && prepared.is_some()).then(|| Arc::new(Conversation::from_messages(list)));
    let history_options = HistoryOptions {
        syntax: options.syntax,
        max_tool_result_chars: options.max_tool_result_chars,
        result_role: options.result_role,
    };
    history::rewrite(list, &history_options)?;
    // The block goes in as a placeholder and its escaped text replaces it
    // once the body is written: escaping a few KiB of contracts again for
    // every request was a twentieth of a natural-mode stream's work. (The
    // placeholder is random per process; a body that holds it anyway takes
    // the plain way.)
    let placeholder = prompt::placeholder();
    let splice = prepared
        .as_ref()
        .filter(|_| memchr::memmem::find(body, placeholder.as_bytes()).is_none());
    if let Some(prepared) = &prepared {
        let text = if splice.is_some() {
            placeholder
        } else {
            &prepared.block
        };
        prompt::inject(list, text);
    }

    let plan = prepared
        .as_ref()
        .map(|prepared| response_plan(&fields, prepared, &policy, declared))
        .transpose()?
        .map(|plan| ResponsePlan {
            conversation,
            ..plan
        });
    let grammar = prepared.as_ref().and_then(|p| p.grammar_fields.as_deref());
    let mut drop = TOOL_FIELDS.to_vec();
    if grammar.is_some() {
        drop.extend(refuse_constraints(&fields, options.constrain)?);
    }
    let mut body = fields.write(&drop, "messages", &messages);
    if let Some(prepared) = splice {
        prompt::splice(&mut body, placeholder, &prepared.block_json);
    }
    if let Some(members) = grammar {
        append_members(&mut body, members);
    }
    Ok(Rewrite::Rewritten { body, plan })
}

/// How to read the answer to a request that goes upstream as it is (a
/// passthrough provider rescuing calls written as text): the tools it
/// offers and its policy; `None` when it offers none.
pub fn plan(
    body: &[u8],
    options: &NaturalOptions,
    cache: &ContractCache,
) -> Result<Option<ResponsePlan>, RequestError> {
    let fields = Fields::parse(body)?;
    if !TOOL_FIELDS.iter().any(|field| fields.get(field).is_some()) {
        return Ok(None);
    }
    let (policy, declared) = policy_and_tools(&fields)?;
    match prepare(declared, &policy, options, cache)? {
        Some(prepared) => response_plan(&fields, &prepared, &policy, declared).map(Some),
        None => Ok(None),
    }
}

/// Appends JSON object members (`"a":1,"b":2`) to the object in `body`.
/// Refuses a client's own constraint where the gateway sends one
/// (`constrain`); returns the fields to drop as they constrain nothing (a
/// `response_format` of type `"text"`).
fn refuse_constraints(
    fields: &Fields<'_>,
    constrain: Constrain,
) -> Result<Option<&'static str>, RequestError> {
    let (names, what, field): (&[&str], _, _) = match constrain {
        Constrain::Off => return Ok(None),
        Constrain::Gbnf => (&GRAMMAR_FIELDS, "a grammar", "`grammar`"),
        Constrain::StructuralTag => (&STRUCTURED_FIELDS, "a structural tag", "`response_format`"),
    };
    let mut plain = None;
    for &name in names {
        let Some(raw) = fields.get(name) else {
            continue;
        };
        if name == "response_format" && is_text_format(raw.get()) {
            plain = Some(name);
            continue;
        }
        let mode = constrain.as_str();
        return Err(RequestError::invalid(
            name,
            format!(
                "`{name}` cannot be sent with tools to this provider: it constrains tool calls with {what} of its own in {field} (constrain = \"{mode}\")"
            ),
        ));
    }
    Ok(plain)
}

/// `null` or `{"type": "text"}`: a `response_format` that asks for nothing.
fn is_text_format(raw: &str) -> bool {
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Null) => true,
        Ok(Value::Object(format)) => {
            format.len() == 1 && format.get("type").and_then(Value::as_str) == Some("text")
        }
        _ => false,
    }
}

fn append_members(body: &mut Vec<u8>, members: &str) {
    if body.last() != Some(&b'}') {
        return;
    }
    body.pop();
    if body.len() > 1 {
        body.push(b',');
    }
    body.extend_from_slice(members.as_bytes());
    body.push(b'}');
}

/// The request's tool policy and its declarations, unparsed.
fn policy_and_tools<'a>(fields: &'a Fields<'a>) -> Result<(Policy, Declared<'a>), RequestError> {
    let policy = Policy::from_request(
        fields.parsed("tool_choice")?.as_ref(),
        fields.parsed("function_call")?.as_ref(),
        fields.parsed("parallel_tool_calls")?.as_ref(),
    )?;
    let declared = Declared {
        tools: fields.get("tools"),
        functions: fields.get("functions"),
    };
    Ok((policy, declared))
}

fn response_plan(
    fields: &Fields<'_>,
    prepared: &Prepared,
    policy: &Policy,
    declared: Declared<'_>,
) -> Result<ResponsePlan, RequestError> {
    let include_usage = fields
        .parsed("stream_options")?
        .and_then(|options| options.get("include_usage")?.as_bool())
        .unwrap_or(false);
    let declared_some = |raw: Option<&RawValue>| raw.is_some_and(|r| r.get() != "null");
    Ok(ResponsePlan {
        tools: prepared.tools.clone(),
        choice: policy.choice.clone(),
        parallel_tool_calls: policy.parallel,
        include_usage,
        legacy_functions: declared_some(declared.functions) && !declared_some(declared.tools),
        conversation: None,
    })
}

/// The request's tool declarations, unparsed.
#[derive(Clone, Copy)]
struct Declared<'a> {
    tools: Option<&'a RawValue>,
    functions: Option<&'a RawValue>,
}

impl Declared<'_> {
    /// The raw text of a declaration; absent reads as `null`, as it renders.
    fn text(raw: Option<&RawValue>) -> &str {
        raw.map_or("null", RawValue::get)
    }

    /// The declared tools, parsed and checked.
    fn tool_set(self) -> Result<ToolSet, RequestError> {
        let tools = self.tools.map(fields::parse).transpose()?;
        let functions = self.functions.map(fields::parse).transpose()?;
        ToolSet::from_request(
            Some(tools.as_ref().unwrap_or(&Value::Null)),
            Some(functions.as_ref().unwrap_or(&Value::Null)),
        )
    }
}

/// The offered tools and their system block, from the cache when possible;
/// `None` when the model is to get no tools.
fn prepare(
    declared: Declared<'_>,
    policy: &Policy,
    options: &NaturalOptions,
    cache: &ContractCache,
) -> Result<Option<Prepared>, RequestError> {
    if policy.choice == Choice::None {
        // Still validated: a malformed declaration is the client's bug even
        // when it is not used this turn, and OpenAI rejects it too.
        declared.tool_set()?;
        return Ok(None);
    }
    let key = KeyRef {
        tools: Declared::text(declared.tools),
        functions: Declared::text(declared.functions),
        policy,
        syntax: options.syntax,
        template: options.instructions.as_deref(),
        constrain: options.constrain,
    };
    let prepared = cache.get_or_render(key, || {
        let offered = policy.offered(&declared.tool_set()?)?;
        let block = if offered.is_empty() {
            String::new()
        } else {
            prompt::render_block(
                &offered,
                policy,
                options.syntax,
                options.instructions.as_deref(),
            )?
        };
        let fields = match options.constrain {
            Constrain::Off => None,
            Constrain::Gbnf => {
                grammar::for_tools(&offered, options.syntax, policy)?.map(|g| g.fields())
            }
            Constrain::StructuralTag => {
                structural_tag::for_tools(&offered, options.syntax, policy)?.map(|t| t.fields())
            }
        };
        let prepared = Prepared::new(Arc::new(offered), block);
        Ok(match fields {
            Some(fields) => prepared.with_fields(fields),
            None => prepared,
        })
    })?;
    Ok((!prepared.tools.is_empty()).then_some(prepared))
}
