//! Tool search for large catalogs (`tool_search`): instead of declaring
//! every tool, the gateway declares `search_tools(query)`, answers its calls
//! itself from a lexical index, and declares what was found from the next
//! round on (see [`Catalog`] and `tools::rounds`).
//!
//! Ranking is BM25 over each tool's name, description and parameter names
//! ([`index::Index`]), built once per distinct tool list ([`IndexCache`]).
//! Pure but for the cache's lock.

pub mod catalog;
pub mod index;

pub use catalog::Catalog;
pub use index::{Index, IndexCache};

use serde_json::{Value, json};

/// The name the model (or an MCP client) calls the search by.
pub use crate::config::SEARCH_TOOL;
/// Matches one search answers with, unless asked for fewer or more.
pub const DEFAULT_LIMIT: usize = 5;
/// Matches one search answers with at most.
pub const MAX_LIMIT: usize = 20;
/// A match's description is cut to this many characters in a result.
const SUMMARY_CHARS: usize = 160;

/// What `search_tools` does, as the model reads it.
pub const DESCRIPTION: &str = "Finds tools for a task among many that are not listed here. Describe what you need in a few words; the tools it finds can be called from your next step on. Search whenever none of your tools fits the request.";

/// The `search_tools` declaration, as a Chat Completions `tools` entry.
pub fn declaration() -> Value {
    json!({"type": "function", "function": {
        "name": SEARCH_TOOL,
        "description": DESCRIPTION,
        "parameters": parameters(),
    }})
}

/// `search_tools` over a list of gateway tools (the MCP door's): the
/// result lists each match's input schema too, for a client that calls
/// what it found by name.
pub fn over_gateway_tools(
    tools: &[std::sync::Arc<super::GatewayTool>],
    cache: &IndexCache,
    arguments: &Value,
) -> Result<String, String> {
    let (query, limit) = read_arguments(arguments)?;
    let documents: Vec<index::Document> = tools
        .iter()
        .map(|t| index::Document {
            name: &t.name,
            description: &t.description,
            parameters: Some(&t.parameters),
        })
        .collect();
    let found: Vec<Found> = cache
        .get(&documents)
        .search(&query, limit)
        .into_iter()
        .map(|i| Found {
            name: &tools[i].name,
            description: &tools[i].description,
            schema: Some(&tools[i].parameters),
        })
        .collect();
    Ok(result(&query, &found))
}

/// `search_tools`' arguments' schema.
pub fn parameters() -> Value {
    json!({
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What the tool should do, in a few words", "examples": ["task in a few words"]},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT, "description": "How many tools to return"},
        },
        "required": ["query"],
    })
}

/// A search call's arguments: the query and how many matches it wants.
pub fn read_arguments(arguments: &Value) -> Result<(String, usize), String> {
    let query = arguments
        .get("query")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|q| !q.is_empty())
        .ok_or("`query` must be a non-empty string saying what the tool should do")?;
    let limit = match arguments.get("limit") {
        None | Some(Value::Null) => DEFAULT_LIMIT,
        Some(v) => v
            .as_u64()
            .filter(|n| (1..=MAX_LIMIT as u64).contains(n))
            .ok_or(format!("`limit` must be an integer from 1 to {MAX_LIMIT}"))?
            as usize,
    };
    Ok((query.to_owned(), limit))
}

/// One match as a result lists it.
pub struct Found<'a> {
    pub name: &'a str,
    pub description: &'a str,
    /// Its arguments' schema, for callers that declare it themselves (MCP).
    pub schema: Option<&'a Value>,
}

/// A search's result, as JSON text: the matches (name and the first line
/// of the description, cut), and what to do next.
pub fn result(query: &str, found: &[Found<'_>]) -> String {
    let tools: Vec<Value> = found
        .iter()
        .map(|f| {
            let mut tool = json!({"name": f.name, "description": summary(f.description)});
            if let Some(schema) = f.schema {
                tool["inputSchema"] = schema.clone();
            }
            tool
        })
        .collect();
    let note = if tools.is_empty() {
        format!(
            "No tool matched {query:?}. Search again with other words, or answer without a tool."
        )
    } else {
        "These tools can be called now: call the one that does what was asked, with the values given.".to_owned()
    };
    json!({"tools": tools, "note": note}).to_string()
}

/// The names a search's result (as [`result`] wrote it) listed; none when
/// the text is not such a result.
pub fn names_in_result(text: &str) -> Vec<String> {
    let Ok(Value::Object(result)) = serde_json::from_str::<Value>(text) else {
        return Vec::new();
    };
    let Some(Value::Array(tools)) = result.get("tools") else {
        return Vec::new();
    };
    tools
        .iter()
        .filter_map(|t| t.get("name")?.as_str().map(str::to_owned))
        .collect()
}

/// A description's first line, cut at [`SUMMARY_CHARS`] on a character
/// boundary.
fn summary(description: &str) -> String {
    let line = description
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    match line.char_indices().nth(SUMMARY_CHARS) {
        None => line.to_owned(),
        Some((at, _)) => format!("{}…", &line[..at]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_checked() {
        assert_eq!(
            read_arguments(&json!({"query": " weather "})).unwrap(),
            ("weather".to_owned(), DEFAULT_LIMIT)
        );
        assert_eq!(
            read_arguments(&json!({"query": "x", "limit": 3}))
                .unwrap()
                .1,
            3
        );
        assert!(read_arguments(&json!({"query": ""})).is_err());
        assert!(read_arguments(&json!({})).is_err());
        assert!(read_arguments(&json!({"query": "x", "limit": 0})).is_err());
        assert!(read_arguments(&json!({"query": "x", "limit": 99})).is_err());
    }

    #[test]
    fn a_result_names_its_tools_and_reads_back() {
        let long = "é".repeat(400);
        let text = result(
            "weather",
            &[
                Found {
                    name: "GetWeather",
                    description: "\nThe weather.\nSecond line.",
                    schema: None,
                },
                Found {
                    name: "Long",
                    description: &long,
                    schema: None,
                },
            ],
        );
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["tools"][0]["description"], "The weather.");
        assert_eq!(
            v["tools"][1]["description"]
                .as_str()
                .unwrap()
                .chars()
                .count(),
            SUMMARY_CHARS + 1
        );
        assert_eq!(names_in_result(&text), ["GetWeather", "Long"]);
        assert!(names_in_result("not json").is_empty());
        let none = result("weather", &[]);
        assert!(none.contains("No tool matched"), "{none}");
    }
}
