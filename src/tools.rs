//! Gateway-side tools: tools toolgate runs itself (seeds 003 and 004).
//!
//! The operator configures MCP servers ([`mcp`]), HTTP tools ([`http`]) and
//! built-in tools ([`builtin`]); a provider's `gateway_tools` offers them to
//! its models next to the client's own tools. [`Tools::offer`] resolves what
//! one request is offered, [`executor`] runs a call, and [`rounds`] decides,
//! round after round, what the model's calls lead to.

pub mod builtin;
pub mod drive;
pub mod executor;
pub mod http;
pub mod mcp;
pub mod names;
pub mod rounds;
pub mod search;
pub mod show;
pub mod steps;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::{Value, json};

use crate::config::{Config, GatewaySettings, ToolSource};
use builtin::Builtin;
use mcp::{McpHost, State};

/// A tool the gateway runs, as offered to models.
#[derive(Debug)]
pub struct GatewayTool {
    /// The name models call it by.
    pub name: String,
    pub description: String,
    /// Its arguments' JSON schema (an object schema).
    pub parameters: Value,
    pub kind: ToolKind,
    /// Compiled once; `None` when the schema does not compile (the server's
    /// problem: its calls then go unvalidated rather than unusable).
    validator: Option<jsonschema::Validator>,
}

#[derive(Debug, Clone)]
pub enum ToolKind {
    Mcp {
        server: String,
        /// The name on the server.
        original: String,
        timeout: Duration,
    },
    Http(Arc<crate::config::HttpToolConfig>),
    Builtin(Builtin),
}

impl GatewayTool {
    pub fn new(name: String, description: String, parameters: Value, kind: ToolKind) -> Self {
        let validator = jsonschema::validator_for(&parameters).ok();
        if validator.is_none() {
            tracing::warn!(tool = ?name, "the tool's input schema does not compile; its calls are not validated");
        }
        GatewayTool {
            name,
            description,
            parameters,
            kind,
            validator,
        }
    }

    /// Where the tool runs: its MCP server's name, `http` or `builtin`.
    pub fn server(&self) -> &str {
        match &self.kind {
            ToolKind::Mcp { server, .. } => server,
            ToolKind::Http(_) => "http",
            ToolKind::Builtin(_) => "builtin",
        }
    }

    /// The tool as a Chat Completions `tools` entry.
    pub fn declaration(&self) -> Value {
        let mut function = json!({"name": self.name, "parameters": self.parameters});
        if !self.description.is_empty() {
            function["description"] = Value::String(self.description.clone());
        }
        json!({"type": "function", "function": function})
    }

    /// Checks arguments against the schema; the complaint otherwise.
    pub fn check(&self, arguments: &Value) -> Result<(), String> {
        match &self.validator {
            None => Ok(()),
            Some(v) => v.iter_errors(arguments).next().map_or(Ok(()), |e| {
                Err(format!("{} (at `{}`)", e, e.instance_path()))
            }),
        }
    }
}

/// The tools one request is offered, in `gateway_tools` order.
#[derive(Debug, Clone, Default)]
pub struct Offer {
    pub tools: Vec<Arc<GatewayTool>>,
    /// The provider's tools the request's key may not be offered (by name,
    /// as far as they are known): a call to one is refused, never run.
    pub withheld: Vec<String>,
    /// The MCP servers the key may use that are down or still starting:
    /// their tools are left out until they are up again.
    pub unavailable: Vec<Absent>,
}

impl Offer {
    pub fn get(&self, name: &str) -> Option<&Arc<GatewayTool>> {
        self.tools.iter().find(|t| t.name == name)
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Whether `name` is one of the provider's tools withheld from this key.
    pub fn is_withheld(&self, name: &str) -> bool {
        self.withheld.iter().any(|w| w == name)
    }

    /// The server that is down or starting whose tool `name` was, as far as
    /// its last listing tells.
    pub fn absent(&self, name: &str) -> Option<&Absent> {
        self.unavailable
            .iter()
            .find(|a| a.tools.iter().any(|t| t == name))
    }

    /// The offer for a request whose client declares `client`'s tools: a
    /// withheld tool does not exist for this key, so a client tool of the
    /// same name is simply the client's, and a call to it goes back to the
    /// client (refusing it would tell the key the hidden tool exists).
    pub fn beside<'a>(mut self, client: impl IntoIterator<Item = &'a str>) -> Offer {
        let client: std::collections::HashSet<&str> = client.into_iter().collect();
        self.withheld.retain(|name| !client.contains(name.as_str()));
        for absent in &mut self.unavailable {
            if absent.tools.iter().any(|t| client.contains(t.as_str())) {
                absent.tools = absent
                    .tools
                    .iter()
                    .filter(|t| !client.contains(t.as_str()))
                    .cloned()
                    .collect();
            }
        }
        self
    }
}

/// Why a provider's tools cannot be offered at all: a conflict among them
/// (two tools of one name) or an entry that is not configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    /// The `gateway_tools` entry concerned.
    pub server: String,
    pub reason: String,
}

/// An MCP server whose tools are left out of an offer for now. Why it is
/// down (a child's stderr, a URL, a path) stays in the log and `/readyz`:
/// it never reaches a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Absent {
    pub server: String,
    /// It connects for the first time, or again after being down.
    pub starting: bool,
    /// When it is tried again, when known.
    pub retry_in: Option<Duration>,
    /// The names of its tools when it was last up.
    pub tools: Arc<[String]>,
}

impl Absent {
    /// `tool server `x` is down`, as a client may read it.
    pub fn describe(&self) -> String {
        let state = if self.starting {
            "is still starting"
        } else {
            "is down"
        };
        format!("tool server `{}` {state}", self.server)
    }
}

/// The gateway's tool runtime: MCP connections and the HTTP tool client,
/// started once and kept across reloads.
pub struct Tools {
    host: McpHost,
    http: http::HttpTools,
    /// HTTP and built-in tools by `gateway_tools` label, rebuilt on reload.
    fixed: RwLock<HashMap<String, Arc<GatewayTool>>>,
    /// `tool_search`'s indexes of the tool lists seen last.
    indexes: search::IndexCache,
}

impl Tools {
    pub fn start(config: &Config) -> Tools {
        let tools = Tools {
            host: McpHost::start(&config.mcp_servers),
            http: http::HttpTools::new(),
            fixed: RwLock::new(HashMap::new()),
            indexes: search::IndexCache::default(),
        };
        tools.set_fixed(config);
        tools
    }

    /// A reloaded config: MCP servers reconciled, fixed tools rebuilt.
    pub fn reload(&self, config: &Config) {
        self.host.reconcile(&config.mcp_servers);
        self.set_fixed(config);
    }

    fn set_fixed(&self, config: &Config) {
        let mut fixed = HashMap::new();
        for t in &config.http_tools {
            let tool = GatewayTool::new(
                t.name.clone(),
                t.description.clone(),
                t.parameters.clone(),
                ToolKind::Http(t.clone()),
            );
            fixed.insert(t.name.clone(), Arc::new(tool));
        }
        for b in Builtin::ALL {
            let tool = GatewayTool::new(
                b.name().to_owned(),
                b.description().to_owned(),
                b.parameters(),
                ToolKind::Builtin(b),
            );
            fixed.insert(format!("builtin:{}", b.name()), Arc::new(tool));
        }
        *self
            .fixed
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = fixed;
    }

    pub fn mcp(&self) -> &McpHost {
        &self.host
    }

    pub fn http(&self) -> &http::HttpTools {
        &self.http
    }

    /// The indexes `tool_search` searches, kept per distinct tool list.
    pub fn search_indexes(&self) -> &search::IndexCache {
        &self.indexes
    }

    /// What a provider offers now to a key that may be offered the entries
    /// `allowed` accepts (the others are withheld). An MCP server that is
    /// not connected only takes its own tools out (named in
    /// [`Offer::unavailable`]); the offer is refused when two of its tools
    /// would share a name.
    pub fn offer(
        &self,
        settings: &GatewaySettings,
        allowed: impl Fn(&str) -> bool,
    ) -> Result<Offer, Unavailable> {
        let mut tools: Vec<Arc<GatewayTool>> = Vec::new();
        let mut withheld: Vec<String> = Vec::new();
        let mut unavailable: Vec<Absent> = Vec::new();
        for source in &settings.sources {
            if !allowed(&source.label()) {
                match source {
                    ToolSource::Mcp(server) => {
                        if let State::Up { tools: listed, .. } = &*self.host.state(&server.name) {
                            withheld.extend(listed.iter().map(|t| t.name.clone()));
                        }
                    }
                    ToolSource::Http(tool) => withheld.push(tool.name.clone()),
                    ToolSource::Builtin(builtin) => withheld.push(builtin.name().to_owned()),
                }
                continue;
            }
            match source {
                ToolSource::Mcp(server) => match &*self.host.state(&server.name) {
                    State::Up { tools: listed, .. } => tools.extend(listed.iter().cloned()),
                    State::Starting => unavailable.push(Absent {
                        server: server.name.clone(),
                        starting: true,
                        retry_in: None,
                        tools: self.host.known(&server.name),
                    }),
                    State::Down { retry_in, .. } => unavailable.push(Absent {
                        server: server.name.clone(),
                        starting: false,
                        retry_in: *retry_in,
                        tools: self.host.known(&server.name),
                    }),
                },
                fixed => {
                    let label = fixed.label();
                    let found = self
                        .fixed
                        .read()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .get(&label)
                        .cloned();
                    match found {
                        Some(tool) => tools.push(tool),
                        None => {
                            return Err(Unavailable {
                                server: label,
                                reason: "is not configured".into(),
                            });
                        }
                    }
                }
            }
        }
        let mut seen = std::collections::HashSet::with_capacity(tools.len());
        for tool in &tools {
            if !seen.insert(tool.name.as_str()) {
                return Err(Unavailable {
                    server: tool.server().to_owned(),
                    reason: format!(
                        "offers a tool named {:?}, and so does another of this provider's gateway tools",
                        tool.name
                    ),
                });
            }
        }
        Ok(Offer {
            tools,
            withheld,
            unavailable,
        })
    }

    /// Each MCP server's state, by name, for `/readyz`.
    pub fn servers(&self, config: &Config) -> Vec<(String, Arc<State>)> {
        config
            .mcp_servers
            .iter()
            .map(|s| (s.name.clone(), self.host.state(&s.name)))
            .collect()
    }
}
