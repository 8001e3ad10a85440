//! The gateway-side tool tables as written: `[[mcp_servers]]`, `[[http_tools]]`
//! and the gateway keys of `[providers.tools]`. Validated by
//! [`crate::config::gateway_tools`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `[[mcp_servers]]`: an MCP server toolgate connects to, as a stdio child
/// process (`command`) or over streamable HTTP (`url`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawMcpServer {
    pub name: String,
    /// Program and arguments of a stdio server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Endpoint of a streamable-HTTP server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// HTTP headers for a `url` server; a value `env:NAME` is read from the environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Environment of a `command` server, on top of a small allowlist
    /// (toolgate's own environment, with its keys, is not passed on).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Only these of the server's tools are offered (all when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<String>>,
    /// Put before each of the server's tool names.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prefix: String,
    /// Longest one call may take.
    #[serde(default = "default_mcp_timeout")]
    pub timeout_secs: f64,
}

fn default_mcp_timeout() -> f64 {
    30.0
}

/// `[[http_tools]]`: a tool answered by POSTing its arguments as JSON to `url`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawHttpTool {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub url: String,
    /// JSON schema of the arguments (an object schema).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<toml::Value>,
    /// Extra request headers; a value `env:NAME` is read from the environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    #[serde(default = "default_http_timeout")]
    pub timeout_secs: f64,
}

fn default_http_timeout() -> f64 {
    10.0
}

/// What the client sees of the gateway's own tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ShowGatewayTools {
    /// `gateway_tool_calls` on chunk deltas and on the message.
    #[default]
    Fields,
    /// `fields`, and a `<details type="tool_calls">` block in the content.
    Details,
    /// Nothing beyond the model's own text.
    None,
}
