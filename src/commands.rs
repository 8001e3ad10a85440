//! The offline subcommands: `toolgate render` and `toolgate parse`. They run
//! the same code the gateway runs, without a network, so a user can see what
//! a natural-mode provider would receive and what a model output turns into.

use serde_json::{Value, json};

use crate::config::{Config, Mode};
use crate::natural::parser::{Event, Parser, ParserOptions};
use crate::natural::syntax::Syntax;
use crate::natural::tools::ToolSet;
use crate::natural::validate::SchemaCache;

/// The request body that would go upstream for `provider`, pretty-printed.
pub fn render(config: &Config, provider: &str, request: &[u8]) -> Result<String, String> {
    let p = config
        .provider(provider)
        .ok_or_else(|| format!("no provider named {provider:?} in the config"))?;
    let body = match p.tools.mode {
        Mode::Natural => crate::natural::Engine::new(config)
            .render(provider, request)
            .map_err(|e| e.to_string())?,
        _ => request.to_vec(),
    };
    let value: Value =
        serde_json::from_slice(&body).map_err(|e| format!("the request is not JSON: {e}"))?;
    Ok(serde_json::to_string_pretty(&value).unwrap_or_default())
}

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
                invalid.push(json!({"tool": b.name, "reason": b.reason.to_string(), "raw": b.raw}))
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

    #[test]
    fn render_shows_contracts_for_a_natural_provider() {
        let config = Config::from_toml(crate::config::EMBEDDED_DEFAULT).unwrap();
        let request = format!(
            r#"{{"model":"demo","messages":[{{"role":"user","content":"hi"}}],"tools":{TOOLS}}}"#
        );
        let out = render(&config, "demo", request.as_bytes()).unwrap();
        assert!(out.contains("## GetWeather"), "{out}");
        assert!(!out.contains("\"tools\""), "{out}");
        assert!(render(&config, "nope", b"{}").is_err());
    }
}
