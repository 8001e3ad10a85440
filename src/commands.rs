//! The subcommands besides serving. `render` and `parse` run the same code
//! the gateway runs, so a user can see exactly what a provider would
//! receive (`render` sends the request through the gateway to a listener on
//! loopback) and what a model output turns into; `tools` lists the gateway
//! tools; `probe` measures which syntax a model follows.

pub mod probe;
pub mod render;

pub use render::{Render, Rendered, render};

use serde_json::{Value, json};

use crate::config::Config;
use crate::natural::parser::{Event, Parser, ParserOptions};
use crate::natural::syntax::Syntax;
use crate::natural::tools::ToolSet;
use crate::natural::validate::SchemaCache;

/// What `text` (a model's whole output) turns into with these tools:
/// `{"content", "tool_calls", "invalid"}` as pretty JSON. Invalid blocks are
/// listed with their reasons instead of failing, to help debugging.
pub fn parse(tools_json: &[u8], syntax: Syntax, text: &str) -> Result<String, String> {
    let tools: Value =
        serde_json::from_slice(tools_json).map_err(|e| format!("tools file is not JSON: {e}"))?;
    // Accept a bare `tools` array or a whole request carrying one.
    let (tools, functions) = match &tools {
        Value::Object(o) => (o.get("tools"), o.get("functions")),
        other => (Some(other), None),
    };
    let set = ToolSet::from_request(tools, functions).map_err(|e| e.to_string())?;
    let options = ParserOptions {
        syntax,
        ..ParserOptions::default()
    };
    let mut parser = Parser::new(set.names(), options);
    let mut events = Vec::new();
    parser.feed(text, &mut events);
    parser.finish(&mut events);
    let schemas = SchemaCache::new();
    let mut content = String::new();
    let mut calls = Vec::new();
    let mut invalid = Vec::new();
    for event in events {
        match event {
            Event::Text(t) => content.push_str(&t),
            Event::Call(c) => {
                let checked = set
                    .get(&c.name)
                    .map_or(Ok(()), |tool| schemas.check(tool, &c.arguments));
                match checked {
                    Ok(()) => calls.push(json!({
                        "type": "function",
                        "function": {"name": c.name, "arguments": Value::Object(c.arguments).to_string()},
                    })),
                    Err(reason) => invalid.push(json!({"tool": c.name, "reason": format!("arguments do not match the schema: {reason}"), "raw": c.raw})),
                }
            }
            Event::Invalid(b) => {
                invalid.push(json!({"tool": b.name, "reason": b.reason.to_string(), "raw": b.raw}));
            }
        }
    }
    let out = json!({
        "content": if content.trim().is_empty() && !calls.is_empty() { Value::Null } else { Value::String(content) },
        "tool_calls": calls,
        "invalid": invalid,
    });
    Ok(serde_json::to_string_pretty(&out).unwrap_or_default())
}

/// `toolgate tools`: connects to every configured tool server and lists
/// every gateway tool with its source and schema. `Err` names each server
/// that failed (the listing of the others is still printed first).
pub async fn tools(config: &Config, wait: std::time::Duration) -> (String, Result<(), String>) {
    use crate::tools::mcp::State;
    let tools = crate::tools::Tools::start(config);
    tools.mcp().settled(wait).await;
    let mut listed: Vec<Value> = Vec::new();
    let mut failed: Vec<String> = Vec::new();
    for (name, state) in tools.servers(config) {
        match &*state {
            State::Up { tools, .. } => {
                for tool in tools.iter() {
                    listed.push(describe(tool, &format!("mcp server {name}")));
                }
            }
            State::Starting => failed.push(format!(
                "MCP server `{name}` did not start within {}s",
                wait.as_secs()
            )),
            // A one-shot command retries nothing: the reason alone.
            State::Down { error, .. } => failed.push(format!("MCP server `{name}`: {error}")),
        }
    }
    for http in &config.http_tools {
        let tool = crate::tools::GatewayTool::new(
            http.name.clone(),
            http.description.clone(),
            http.parameters.clone(),
            crate::tools::ToolKind::Http(http.clone()),
        );
        let url = http.url.to_string();
        let source = format!("http tool {}", crate::config::redact::url(&url));
        listed.push(describe(&tool, &source));
        // Calling the tool would run it: the listing only connects.
        if let Err(why) = reachable(&http.url, wait).await {
            failed.push(format!("http tool `{}`: {why}", http.name));
        }
    }
    for b in crate::tools::builtin::Builtin::ALL {
        let tool = crate::tools::GatewayTool::new(
            b.name().to_owned(),
            b.description().to_owned(),
            b.parameters(),
            crate::tools::ToolKind::Builtin(b),
        );
        listed.push(describe(&tool, &format!("builtin:{}", b.name())));
    }
    let offered: Vec<Value> = config
        .providers
        .iter()
        .filter_map(|p| {
            let g = p.tools.gateway.as_ref()?;
            let mut entry = json!({"provider": p.name});
            match tools.offer(g, |_| true) {
                Ok(offer) => {
                    let names: Vec<&str> = offer.tools.iter().map(|t| t.name.as_str()).collect();
                    entry["gateway_tools"] = json!(names);
                    // Down servers' reasons are in `failed` below.
                    if !offer.unavailable.is_empty() {
                        let absent: Vec<String> = offer
                            .unavailable
                            .iter()
                            .map(crate::tools::Absent::describe)
                            .collect();
                        entry["unavailable"] = json!(absent);
                    }
                }
                Err(u) => {
                    entry["gateway_tools"] =
                        json!(format!("unavailable: `{}` {}", u.server, u.reason));
                }
            }
            Some(entry)
        })
        .collect();
    let out = json!({"tools": listed, "providers": offered});
    let text = serde_json::to_string_pretty(&out).unwrap_or_default();
    let result = if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; "))
    };
    (text, result)
}

/// Whether a TCP connection to `url`'s host and port opens within `wait`.
async fn reachable(url: &http::Uri, wait: std::time::Duration) -> Result<(), String> {
    let host = url.host().unwrap_or_default();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = url.port_u16().unwrap_or(match url.scheme_str() {
        Some("https") => 443,
        _ => 80,
    });
    match tokio::time::timeout(wait, tokio::net::TcpStream::connect((host, port))).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("cannot connect to {host}:{port}: {e}")),
        Err(_) => Err(format!(
            "cannot connect to {host}:{port} within {}s",
            wait.as_secs()
        )),
    }
}

fn describe(tool: &crate::tools::GatewayTool, source: &str) -> Value {
    json!({
        "name": tool.name,
        "source": source,
        "description": tool.description,
        "parameters": tool.parameters,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOOLS: &str = r#"[{"type":"function","function":{"name":"GetWeather","parameters":{"type":"object","properties":{"location":{"type":"string"}},"required":["location"]}}}]"#;

    #[test]
    fn parse_reports_content_calls_and_invalid_blocks() {
        let text = "Sure.\n<GetWeather>\n```json\n{\"location\": \"Paris\"}\n```\n</GetWeather>\n<GetWeather>{\"city\": 1}</GetWeather>";
        let out: Value =
            serde_json::from_str(&parse(TOOLS.as_bytes(), Syntax::Tag, text).unwrap()).unwrap();
        assert_eq!(out["tool_calls"][0]["function"]["name"], "GetWeather");
        assert_eq!(
            out["tool_calls"][0]["function"]["arguments"],
            "{\"location\":\"Paris\"}"
        );
        assert_eq!(out["invalid"].as_array().unwrap().len(), 1);
        assert!(out["content"].as_str().unwrap().starts_with("Sure."));
    }
}
