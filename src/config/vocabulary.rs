//! The words a config file uses that features act on: the syntax of text
//! calls, the role of rewritten tool results, the built-in tools, what a
//! tool may be named, and the defaults features fall back to. Config owns
//! them so that it imports no feature; the behaviour stays with the
//! features (`natural::syntax` writes and reads a [`Syntax`],
//! `tools::builtin` runs a [`Builtin`]).

use serde::{Deserialize, Serialize};

/// Broken tool calls a natural-mode reply may send to the fallback model,
/// unless `fallback_max_calls` says otherwise.
pub const DEFAULT_MAX_REPAIRS: usize = 3;

/// Characters of a tool result written into a natural-mode history, unless
/// `max_tool_result_chars` says otherwise: large enough for real results,
/// small enough that one runaway result cannot fill the context.
pub const DEFAULT_MAX_TOOL_RESULT_CHARS: usize = 20_000;

/// The tool `tool_search` declares in place of a large catalog (answered by
/// `tools::search`; natural mode's instructions tell the model to use it).
pub const SEARCH_TOOL: &str = "search_tools";

/// The function field the answer path marks a natural-mode tool with when it
/// waits to be found (`tool_search`): no contract describes it, but a call
/// the model makes to it by name is read like any other. Natural mode takes
/// `tools` out of the upstream request, so the field never leaves toolgate.
pub const UNLISTED_FIELD: &str = "toolgate_unlisted";

/// How a tool call is written as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Syntax {
    /// `<ToolName>`, a fenced ```` ```json ```` block, `</ToolName>` (the default in natural mode).
    #[default]
    Tag,
    /// `<tool_call name="ToolName">`, the arguments JSON, `</tool_call>`.
    ToolCall,
    /// `[short description]{"name": "ToolName", "arguments": {...}}`.
    Bracket,
    /// A Python list of calls with keyword arguments:
    /// `[ToolName(parameter="value"), Other(n=2)]`.
    Python,
}

impl Syntax {
    /// The name used in config files and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Syntax::Tag => "tag",
            Syntax::ToolCall => "tool_call",
            Syntax::Bracket => "bracket",
            Syntax::Python => "python",
        }
    }
}

/// Whether natural-mode calls are held to the tools' schemas while the
/// model writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Constrain {
    /// The model writes freely; calls are validated after they are parsed.
    #[default]
    Off,
    /// Each request carries a GBNF grammar (llama.cpp's `grammar`,
    /// `grammar_lazy`, `grammar_triggers`) that admits only declared tools
    /// with arguments their schemas accept, once a call has begun.
    Gbnf,
    /// Each request carries the same calls as an xgrammar structural tag
    /// (vLLM's and SGLang's `response_format: {"type": "structural_tag"}`).
    StructuralTag,
}

impl Constrain {
    /// The name used in config files.
    pub fn as_str(self) -> &'static str {
        match self {
            Constrain::Off => "off",
            Constrain::Gbnf => "gbnf",
            Constrain::StructuralTag => "structural_tag",
        }
    }
}

/// Which role rewritten tool results get.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ResultRole {
    /// A user message after the calls: what most chat
    /// templates expect, since the model did not write the results.
    #[default]
    User,
    /// Merged into the assistant message that made the calls.
    Assistant,
}

/// The tools toolgate runs itself (`builtin:NAME` in `tools`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builtin {
    /// The current date and time in UTC.
    Clock,
    /// Arithmetic on decimal numbers: `+ - * / %`, parentheses, unary minus.
    Calculator,
}

impl Builtin {
    pub const ALL: [Builtin; 2] = [Builtin::Clock, Builtin::Calculator];

    pub fn from_name(name: &str) -> Option<Builtin> {
        Self::ALL.into_iter().find(|b| b.name() == name)
    }

    /// The name the tool is offered under (and written after `builtin:`).
    pub fn name(self) -> &'static str {
        match self {
            Builtin::Clock => "clock",
            Builtin::Calculator => "calculator",
        }
    }
}

/// What models accept as a function name (`^[A-Za-z0-9_-]{1,64}$`,
/// OpenAI's rule): the names gateway tools may be offered under.
pub mod tool_names {
    /// Longest function name models accept.
    pub const MAX_LEN: usize = 64;

    /// Whether byte `b` may appear in a name.
    pub fn allowed(b: u8) -> bool {
        b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
    }

    /// Whether `name` can be offered to a model as it is.
    pub fn is_valid(name: &str) -> bool {
        !name.is_empty() && name.len() <= MAX_LEN && name.bytes().all(allowed)
    }

    /// Whether `s` may be part of a name (a `prefix`; empty is fine).
    pub fn is_valid_fragment(s: &str) -> bool {
        s.len() < MAX_LEN && s.bytes().all(allowed)
    }
}
