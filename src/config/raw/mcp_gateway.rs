//! `[mcp_gateway]` as written.

use serde::{Deserialize, Serialize};

/// `[mcp_gateway]`: toolgate serves its gateway tools as one MCP server.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawMcpGateway {
    /// Where it is served (`/mcp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The `gateway_tools` entries it serves; default: every configured one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Offer `search_tools` instead of the whole list.
    #[serde(default)]
    pub tool_search: bool,
}
