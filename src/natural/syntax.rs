//! The textual shapes a tool call can take inside a model's message.
//!
//! The same enum drives both directions: the request side writes contracts,
//! examples and past calls in the configured syntax, and the response side
//! parses that syntax back into native calls.

use serde::{Deserialize, Serialize};

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
}

impl Syntax {
    /// The name used in config files and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Syntax::Tag => "tag",
            Syntax::ToolCall => "tool_call",
            Syntax::Bracket => "bracket",
        }
    }
}
