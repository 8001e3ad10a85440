//! Gateway-side tools in the config: `[[mcp_servers]]`, `[[http_tools]]` and
//! each provider's `gateway_tools`, validated once into types that cannot be
//! invalid. Every error names its key path.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use http::header::{HeaderName, HeaderValue};
use http::uri::Scheme;
use serde_json::Value;

use super::raw::{RawHttpTool, RawMcpServer, RawTools, ShowGatewayTools};
use super::{ConfigError, secs};
use crate::config::Builtin;
use crate::config::vocabulary::tool_names as names;

/// One `[[mcp_servers]]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServerConfig {
    pub name: String,
    pub transport: McpTransport,
    /// `None`: every tool the server lists.
    pub allowed_tools: Option<HashSet<String>>,
    pub prefix: String,
    pub timeout: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub enum McpTransport {
    /// A child process speaking MCP on stdin/stdout.
    Stdio {
        program: String,
        args: Vec<String>,
        /// Set on top of [`CHILD_ENV_ALLOWLIST`]; values already resolved.
        env: BTreeMap<String, String>,
    },
    /// Streamable HTTP.
    Http {
        url: String,
        headers: Vec<(HeaderName, HeaderValue)>,
    },
}

/// Variables a stdio server inherits from toolgate's environment. Nothing
/// else is passed on: the environment holds the providers' API keys.
pub const CHILD_ENV_ALLOWLIST: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "TEMP",
    "TMP",
    "SYSTEMROOT",
];

/// One `[[http_tools]]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpToolConfig {
    pub name: String,
    pub description: String,
    pub url: http::Uri,
    /// An object schema (`{"type": "object"}` when none was given).
    pub parameters: Value,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub timeout: Duration,
}

/// Where a provider's gateway tools come from, in `gateway_tools` order.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolSource {
    /// Every (allowed) tool of this `[[mcp_servers]]` entry.
    Mcp(Arc<McpServerConfig>),
    Http(Arc<HttpToolConfig>),
    Builtin(Builtin),
}

impl ToolSource {
    /// The name written in `gateway_tools`.
    pub fn label(&self) -> String {
        match self {
            ToolSource::Mcp(server) => server.name.clone(),
            ToolSource::Http(tool) => tool.name.clone(),
            ToolSource::Builtin(b) => format!("builtin:{}", b.name()),
        }
    }
}

/// A provider's gateway tool settings; present only when `gateway_tools` is non-empty.
#[derive(Debug, Clone)]
pub struct GatewaySettings {
    pub sources: Vec<ToolSource>,
    pub max_rounds: u32,
    pub max_parallel_tools: usize,
    pub show: ShowGatewayTools,
}

/// Most rounds a config may ask for: each is a paid model call.
pub(crate) const MAX_ROUNDS_LIMIT: u32 = 64;
/// Most parallel executions per request a config may ask for.
const MAX_PARALLEL_LIMIT: usize = 64;

pub fn mcp_servers(raw: &[RawMcpServer]) -> Result<Vec<Arc<McpServerConfig>>, ConfigError> {
    let mut out: Vec<Arc<McpServerConfig>> = Vec::with_capacity(raw.len());
    for (i, s) in raw.iter().enumerate() {
        let path = format!("mcp_servers[{i}]");
        source_name(&format!("{path}.name"), &s.name)?;
        if out.iter().any(|o| o.name == s.name) {
            return Err(ConfigError::new(
                format!("{path}.name"),
                format!("duplicate MCP server name {:?}", s.name),
            ));
        }
        let transport = match (&s.command, &s.url) {
            (Some(command), None) => {
                let Some((program, args)) = command.split_first() else {
                    return Err(ConfigError::new(
                        format!("{path}.command"),
                        "must name a program: [\"program\", \"arg\", ...]",
                    ));
                };
                if !s.headers.is_empty() {
                    return Err(ConfigError::new(
                        format!("{path}.headers"),
                        "applies to `url` servers only",
                    ));
                }
                let mut env = BTreeMap::new();
                for (k, v) in &s.env {
                    let key_path = format!("{path}.env.{k}");
                    if k.is_empty() || k.contains(['=', '\0']) {
                        return Err(ConfigError::new(&key_path, "not a valid variable name"));
                    }
                    env.insert(k.clone(), resolve(&key_path, v)?);
                }
                McpTransport::Stdio {
                    program: program.clone(),
                    args: args.to_vec(),
                    env,
                }
            }
            (None, Some(url)) => {
                let mut headers = headers(&format!("{path}.headers"), &s.headers)?;
                let uri = http_url(&format!("{path}.url"), url, &mut headers)?;
                if !s.env.is_empty() {
                    return Err(ConfigError::new(
                        format!("{path}.env"),
                        "applies to `command` servers only",
                    ));
                }
                McpTransport::Http {
                    url: uri.to_string(),
                    headers,
                }
            }
            (Some(_), Some(_)) => {
                return Err(ConfigError::new(
                    format!("{path}.url"),
                    "an MCP server has either `command` (stdio) or `url` (streamable HTTP), not both",
                ));
            }
            (None, None) => {
                return Err(ConfigError::new(
                    format!("{path}.command"),
                    "missing: give `command` (stdio) or `url` (streamable HTTP)",
                ));
            }
        };
        if !s.prefix.is_empty() && !names::is_valid_fragment(&s.prefix) {
            return Err(ConfigError::new(
                format!("{path}.prefix"),
                "may hold only ASCII letters, digits, '_' and '-'",
            ));
        }
        out.push(Arc::new(McpServerConfig {
            name: s.name.clone(),
            transport,
            allowed_tools: s
                .allowed_tools
                .as_ref()
                .map(|list| list.iter().cloned().collect()),
            prefix: s.prefix.clone(),
            timeout: secs(&format!("{path}.timeout_secs"), s.timeout_secs)?,
        }));
    }
    Ok(out)
}

pub fn http_tools(
    raw: &[RawHttpTool],
    servers: &[Arc<McpServerConfig>],
) -> Result<Vec<Arc<HttpToolConfig>>, ConfigError> {
    let mut out: Vec<Arc<HttpToolConfig>> = Vec::with_capacity(raw.len());
    for (i, t) in raw.iter().enumerate() {
        let path = format!("http_tools[{i}]");
        if !names::is_valid(&t.name) {
            return Err(ConfigError::new(
                format!("{path}.name"),
                "must be 1-64 ASCII letters, digits, '_' or '-' (what models accept as a function name)",
            ));
        }
        if out.iter().any(|o| o.name == t.name) || servers.iter().any(|s| s.name == t.name) {
            return Err(ConfigError::new(
                format!("{path}.name"),
                format!(
                    "{:?} is already the name of another http tool or MCP server",
                    t.name
                ),
            ));
        }
        let mut headers = headers(&format!("{path}.headers"), &t.headers)?;
        let url = http_url(&format!("{path}.url"), &t.url, &mut headers)?;
        let parameters = match &t.parameters {
            None => serde_json::json!({"type": "object", "properties": {}}),
            Some(p) => schema(&format!("{path}.parameters"), p)?,
        };
        out.push(Arc::new(HttpToolConfig {
            name: t.name.clone(),
            description: t.description.clone(),
            url,
            parameters,
            headers,
            timeout: secs(&format!("{path}.timeout_secs"), t.timeout_secs)?,
        }));
    }
    Ok(out)
}

/// `[mcp_gateway]`, validated: where toolgate serves its tools over MCP,
/// and which.
#[derive(Debug, Clone)]
pub struct McpGatewayConfig {
    /// Where it is served.
    pub path: String,
    /// The tools it serves (its `tools`, or every configured one).
    pub sources: Vec<ToolSource>,
    /// `tools/list` offers `search_tools` alone; every tool stays callable.
    pub tool_search: bool,
}

/// Validates `[mcp_gateway]`.
pub fn mcp_gateway(
    raw: &crate::config::raw::mcp_gateway::RawMcpGateway,
    servers: &[Arc<McpServerConfig>],
    http: &[Arc<HttpToolConfig>],
) -> Result<McpGatewayConfig, ConfigError> {
    let path = raw.path.clone().unwrap_or_else(|| "/mcp".to_owned());
    let reserved = ["/v1", "/toolgate", "/healthz", "/readyz", "/metrics"];
    let plain = path.len() > 1
        && path.starts_with('/')
        && !path.ends_with('/')
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/-_.".contains(&b));
    if !plain
        || reserved
            .iter()
            .any(|r| path == *r || path.starts_with(&format!("{r}/")))
    {
        return Err(ConfigError::new(
            "mcp_gateway.path",
            format!(
                "must be a path such as \"/mcp\" (letters, digits, '/-_.'), outside /v1, /toolgate, /healthz, /readyz and /metrics, not {path:?}"
            ),
        ));
    }
    let entries: Vec<String> = match &raw.tools {
        Some(list) => list.clone(),
        None => servers
            .iter()
            .map(|s| s.name.clone())
            .chain(http.iter().map(|t| t.name.clone()))
            .chain(Builtin::ALL.iter().map(|b| format!("builtin:{}", b.name())))
            .collect(),
    };
    if entries.is_empty() {
        return Err(ConfigError::new("mcp_gateway.tools", "names no tool"));
    }
    let raw_tools = RawTools {
        gateway_tools: entries,
        ..RawTools::default()
    };
    let settings = settings("mcp_gateway", &raw_tools, servers, http)
        .map_err(|mut e| {
            e.path = e
                .path
                .replace("mcp_gateway.gateway_tools", "mcp_gateway.tools");
            e
        })?
        .ok_or_else(|| ConfigError::new("mcp_gateway.tools", "names no tool"))?;
    Ok(McpGatewayConfig {
        path,
        sources: settings.sources,
        tool_search: raw.tool_search,
    })
}

/// A provider's `gateway_tools` and its limits; `None` when it names none.
pub fn settings(
    path: &str,
    raw: &RawTools,
    servers: &[Arc<McpServerConfig>],
    http: &[Arc<HttpToolConfig>],
) -> Result<Option<GatewaySettings>, ConfigError> {
    if raw.gateway_tools.is_empty() {
        return Ok(None);
    }
    let mut sources: Vec<ToolSource> = Vec::with_capacity(raw.gateway_tools.len());
    // Names known now (HTTP and built-in tools); MCP tools are listed at run time.
    let mut static_names: HashSet<String> = HashSet::new();
    for (j, entry) in raw.gateway_tools.iter().enumerate() {
        let key_path = format!("{path}.gateway_tools[{j}]");
        let source = if let Some(name) = entry.strip_prefix("builtin:") {
            ToolSource::Builtin(Builtin::from_name(name).ok_or_else(|| {
                ConfigError::new(
                    &key_path,
                    format!(
                        "no built-in tool {name:?}; built-in tools are: {}",
                        Builtin::ALL
                            .iter()
                            .map(|b| format!("builtin:{}", b.name()))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            })?)
        } else if let Some(server) = servers.iter().find(|s| &s.name == entry) {
            ToolSource::Mcp(server.clone())
        } else if let Some(tool) = http.iter().find(|t| &t.name == entry) {
            ToolSource::Http(tool.clone())
        } else {
            let builtin = Builtin::ALL.iter().find(|b| b.name() == entry);
            let hint = builtin.map_or(String::new(), |b| {
                format!("; the built-in tool is named \"builtin:{}\"", b.name())
            });
            return Err(ConfigError::new(
                &key_path,
                format!("names no [[mcp_servers]] or [[http_tools]] entry: {entry:?}{hint}"),
            ));
        };
        if sources.contains(&source) {
            return Err(ConfigError::new(
                &key_path,
                format!("{entry:?} is listed twice"),
            ));
        }
        let offered = match &source {
            ToolSource::Http(t) => Some(t.name.clone()),
            ToolSource::Builtin(b) => Some(b.name().to_owned()),
            ToolSource::Mcp(_) => None,
        };
        if let Some(name) = offered
            && !static_names.insert(name.clone())
        {
            return Err(ConfigError::new(
                &key_path,
                format!("two gateway tools of this provider would both be named {name:?}"),
            ));
        }
        sources.push(source);
    }
    if raw.max_rounds == 0 || raw.max_rounds > MAX_ROUNDS_LIMIT {
        return Err(ConfigError::new(
            format!("{path}.max_rounds"),
            format!("must be between 1 and {MAX_ROUNDS_LIMIT}"),
        ));
    }
    if raw.max_parallel_tools == 0 || raw.max_parallel_tools > MAX_PARALLEL_LIMIT {
        return Err(ConfigError::new(
            format!("{path}.max_parallel_tools"),
            format!("must be between 1 and {MAX_PARALLEL_LIMIT}"),
        ));
    }
    Ok(Some(GatewaySettings {
        sources,
        max_rounds: raw.max_rounds,
        max_parallel_tools: raw.max_parallel_tools,
        show: raw.show_gateway_tools,
    }))
}

/// MCP server names are labels and `gateway_tools` entries.
fn source_name(path: &str, name: &str) -> Result<(), ConfigError> {
    if names::is_valid(name) {
        Ok(())
    } else {
        Err(ConfigError::new(
            path,
            "must be 1-64 ASCII letters, digits, '_' or '-'",
        ))
    }
}

/// A tool's URL, checked, without userinfo: that becomes an
/// `Authorization` header among `headers` (unless they set one).
fn http_url(
    path: &str,
    url: &str,
    headers: &mut Vec<(HeaderName, HeaderValue)>,
) -> Result<http::Uri, ConfigError> {
    let (url, basic) = super::userinfo::split(path, url)?;
    let shown = super::redact::url(&url);
    let uri: http::Uri = url
        .parse()
        .map_err(|_| ConfigError::new(path, format!("not a URL: {shown:?}")))?;
    let ok = matches!(uri.scheme(), Some(s) if *s == Scheme::HTTP || *s == Scheme::HTTPS)
        && uri.authority().is_some();
    if !ok {
        return Err(ConfigError::new(
            path,
            format!("must be an absolute http:// or https:// URL: {shown:?}"),
        ));
    }
    if let Some(basic) = basic
        && !headers
            .iter()
            .any(|(n, _)| n == http::header::AUTHORIZATION)
    {
        headers.push((http::header::AUTHORIZATION, basic));
    }
    Ok(uri)
}

/// `env:NAME` reads the variable (which must be set); anything else is literal.
fn resolve(path: &str, value: &str) -> Result<String, ConfigError> {
    match value.strip_prefix("env:") {
        None => Ok(value.to_owned()),
        Some(var) => std::env::var(var)
            .map_err(|_| ConfigError::new(path, format!("environment variable {var} is not set"))),
    }
}

fn headers(
    path: &str,
    raw: &BTreeMap<String, String>,
) -> Result<Vec<(HeaderName, HeaderValue)>, ConfigError> {
    let mut out = Vec::with_capacity(raw.len());
    for (k, v) in raw {
        let key_path = format!("{path}.{k}");
        let name = HeaderName::try_from(k.as_str())
            .map_err(|_| ConfigError::new(&key_path, "not a valid header name"))?;
        let mut value = HeaderValue::try_from(resolve(&key_path, v)?)
            .map_err(|_| ConfigError::new(&key_path, "not a valid header value"))?;
        value.set_sensitive(v.starts_with("env:"));
        out.push((name, value));
    }
    Ok(out)
}

/// A TOML table as a JSON schema for an object, checked by compiling it.
fn schema(path: &str, raw: &toml::Value) -> Result<Value, ConfigError> {
    let value = serde_json::to_value(raw)
        .map_err(|e| ConfigError::new(path, format!("not representable as JSON: {e}")))?;
    if !value.is_object() {
        return Err(ConfigError::new(path, "must be a table (a JSON schema)"));
    }
    if value
        .get("type")
        .is_some_and(|t| t != &Value::String("object".into()))
    {
        return Err(ConfigError::new(
            path,
            "must describe an object (`type = \"object\"`): tool arguments are an object",
        ));
    }
    jsonschema::validator_for(&value)
        .map_err(|e| ConfigError::new(path, format!("not a valid JSON schema: {e}")))?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    const PROVIDER: &str = "[[providers]]\nname = \"p\"\nbase_url = \"http://127.0.0.1:9/v1\"\n";

    fn load(extra: &str, tools: &str) -> Result<Config, crate::config::ConfigError> {
        Config::from_toml(&format!("{extra}\n{PROVIDER}[providers.tools]\n{tools}\n"))
    }

    #[test]
    fn sources_resolve_in_order_with_defaults() {
        let c = load(
            r#"
            [[mcp_servers]]
            name = "time"
            command = ["python3", "-m", "mcp_server_time"]
            [[http_tools]]
            name = "GetWeather"
            url = "http://127.0.0.1:9000/weather"
            parameters = { type = "object", properties = { location = { type = "string" } }, required = ["location"] }
            "#,
            r#"gateway_tools = ["time", "GetWeather", "builtin:calculator"]"#,
        )
        .unwrap();
        let g = c.providers[0].tools.gateway.as_ref().unwrap();
        let labels: Vec<String> = g.sources.iter().map(super::ToolSource::label).collect();
        assert_eq!(labels, ["time", "GetWeather", "builtin:calculator"]);
        assert_eq!((g.max_rounds, g.max_parallel_tools), (8, 8));
        assert_eq!(c.mcp_servers[0].timeout.as_secs(), 30);
        assert_eq!(c.http_tools[0].timeout.as_secs(), 10);
    }

    #[test]
    fn errors_name_the_key() {
        let err = load("", r#"gateway_tools = ["nope"]"#).unwrap_err();
        assert_eq!(err.path, "providers[0].tools.gateway_tools[0]", "{err}");
        let err = load("", r#"gateway_tools = ["builtin:teleport"]"#).unwrap_err();
        assert!(err.message.contains("builtin:calculator"), "{err}");
        let err = load("", r#"gateway_tools = ["calculator"]"#).unwrap_err();
        assert!(
            err.message.contains("named \"builtin:calculator\""),
            "{err}"
        );
        let err = load(
            "[[mcp_servers]]\nname = \"s\"\ncommand = [\"x\"]\nurl = \"http://a/\"\n",
            "",
        )
        .unwrap_err();
        assert_eq!(err.path, "mcp_servers[0].url", "{err}");
        let err = load("[[mcp_servers]]\nname = \"s\"\n", "").unwrap_err();
        assert_eq!(err.path, "mcp_servers[0].command", "{err}");
        let err = load(
            "[[http_tools]]\nname = \"bad name\"\nurl = \"http://a/\"\n",
            "",
        )
        .unwrap_err();
        assert_eq!(err.path, "http_tools[0].name", "{err}");
        let err = load(
            "[[http_tools]]\nname = \"t\"\nurl = \"http://a/\"\nparameters = { type = \"string\" }\n",
            "",
        )
        .unwrap_err();
        assert_eq!(err.path, "http_tools[0].parameters", "{err}");
        let err = load("", "gateway_tools = [\"builtin:clock\"]\nmax_rounds = 0").unwrap_err();
        assert_eq!(err.path, "providers[0].tools.max_rounds", "{err}");
        let err = load(
            "[[mcp_servers]]\nname = \"s\"\nurl = \"http://a/\"\nheaders = { authorization = \"env:TOOLGATE_TEST_UNSET_VAR\" }\n",
            "",
        )
        .unwrap_err();
        assert_eq!(err.path, "mcp_servers[0].headers.authorization", "{err}");
    }

    #[test]
    fn a_name_offered_twice_is_a_config_error() {
        let err = load(
            "[[http_tools]]\nname = \"clock\"\nurl = \"http://a/\"\n",
            r#"gateway_tools = ["clock", "builtin:clock"]"#,
        )
        .unwrap_err();
        assert_eq!(err.path, "providers[0].tools.gateway_tools[1]", "{err}");
        assert!(err.message.contains("\"clock\""), "{err}");
        let err = load("", r#"gateway_tools = ["builtin:clock", "builtin:clock"]"#).unwrap_err();
        assert!(err.message.contains("twice"), "{err}");
    }
}
