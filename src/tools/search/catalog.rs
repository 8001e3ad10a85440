//! One answer's searchable tools: which of the tools a request may call are
//! declared at once and which wait to be found, and the search over those.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::Value;

use super::index::{Document, Index, IndexCache};
use super::{Found, SEARCH_TOOL};
use crate::config::UNLISTED_FIELD;
use crate::exchange::request::{Message, Role, Tool};

/// The tools of an answer that are found by search rather than declared.
#[derive(Debug)]
pub struct Catalog {
    tools: Vec<Tool>,
    index: Arc<Index>,
}

/// How a request's tools are offered: those declared from the first round,
/// and the catalog the rest wait in (none when all fit the threshold).
pub struct Split {
    pub declared: Vec<Tool>,
    pub catalog: Option<Catalog>,
}

/// Splits the tools a request may call. When the client's function tools
/// and the gateway's together number more than `threshold`, the gateway's
/// wait to be found, and so do the client's if they alone number more;
/// `search_tools` is declared beside what stays, and so is every waiting
/// tool named in `found` (found earlier in this conversation, or the
/// client's named `tool_choice`). With `unlisted` (natural mode), the other
/// waiting tools are declared too, marked [`unlisted`]: no contract shows
/// them, but a call the model makes to one by its exact name is read.
pub fn split(
    client: Vec<Tool>,
    gateway: Vec<Tool>,
    threshold: usize,
    found: &HashSet<String>,
    unlisted: bool,
    cache: &IndexCache,
) -> Split {
    let client_functions = client.iter().filter(|t| t.name().is_some()).count();
    if client_functions + gateway.len() <= threshold {
        let mut declared = client;
        declared.extend(gateway);
        return Split {
            declared,
            catalog: None,
        };
    }
    let mut declared = Vec::new();
    let mut waiting = gateway;
    if client_functions > threshold {
        for tool in client {
            if tool.name().is_some() {
                waiting.push(tool);
            } else {
                declared.push(tool);
            }
        }
    } else {
        declared = client;
    }
    declared.push(Tool::from_value(super::declaration()));
    for tool in &waiting {
        if tool.name().is_some_and(|n| found.contains(n)) {
            declared.push(tool.clone());
        } else if unlisted {
            let mut tool = tool.clone();
            mark(&mut tool, true);
            declared.push(tool);
        }
    }
    Split {
        declared,
        catalog: Some(Catalog::new(waiting, cache)),
    }
}

impl Catalog {
    pub fn new(tools: Vec<Tool>, cache: &IndexCache) -> Catalog {
        let documents: Vec<Document> = tools.iter().map(document).collect();
        let index = cache.get(&documents);
        Catalog { tools, index }
    }

    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The waiting tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.name() == Some(name))
    }

    /// Answers a `search_tools` call: the result the model reads and the
    /// tools it found, or what is wrong with the arguments.
    pub fn answer(&self, arguments: &str) -> Result<(String, Vec<&Tool>), String> {
        let arguments: Value = serde_json::from_str(arguments)
            .map_err(|e| format!("the arguments are not a JSON object: {e}"))?;
        let (query, limit) = super::read_arguments(&arguments)?;
        let hits: Vec<&Tool> = self
            .index
            .search(&query, limit)
            .into_iter()
            .filter_map(|i| self.tools.get(i))
            .collect();
        let found: Vec<Found> = hits
            .iter()
            .map(|t| {
                let d = document(t);
                Found {
                    name: d.name,
                    description: d.description,
                    schema: None,
                }
            })
            .collect();
        Ok((super::result(&query, &found), hits))
    }
}

/// Marks a tool as waiting to be found (`true`) or as found (`false`).
pub fn mark(tool: &mut Tool, waiting: bool) {
    if let Tool::Function(f) = tool {
        if waiting {
            f.extra.insert(UNLISTED_FIELD.into(), Value::Bool(true));
        } else {
            f.extra.remove(UNLISTED_FIELD);
        }
    }
}

/// Whether a declared tool is marked as waiting to be found.
pub fn is_unlisted(tool: &Tool) -> bool {
    matches!(tool, Tool::Function(f) if f.extra.get(UNLISTED_FIELD) == Some(&Value::Bool(true)))
}

fn document(tool: &Tool) -> Document<'_> {
    match tool {
        Tool::Function(f) => Document {
            name: &f.name,
            description: f.description.as_deref().unwrap_or(""),
            parameters: f.parameters.as_ref(),
        },
        Tool::Other(_) => Document {
            name: "",
            description: "",
            parameters: None,
        },
    }
}

/// The tools a conversation already used or found: every call's name, and
/// every name a `search_tools` result in it listed.
pub fn found_in(messages: &[Message]) -> HashSet<String> {
    let mut found = HashSet::new();
    let mut searches = HashSet::new();
    for message in messages {
        for call in &message.tool_calls {
            if call.name == SEARCH_TOOL {
                searches.insert(call.id.as_str());
            } else {
                found.insert(call.name.clone());
            }
        }
        if message.role == Role::Tool
            && let Some(id) = &message.tool_call_id
            && searches.contains(id.as_str())
        {
            found.extend(super::names_in_result(&message.text_content()));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::Call;
    use serde_json::json;

    fn tool(name: &str, description: &str) -> Tool {
        Tool::from_value(json!({"type": "function", "function": {
            "name": name, "description": description,
            "parameters": {"type": "object", "properties": {}}}}))
    }

    fn names(tools: &[Tool]) -> Vec<&str> {
        tools.iter().filter_map(Tool::name).collect()
    }

    fn many(prefix: &str, n: usize) -> Vec<Tool> {
        (0..n)
            .map(|i| tool(&format!("{prefix}{i}"), "does things"))
            .collect()
    }

    #[test]
    fn under_the_threshold_everything_is_declared() {
        let cache = IndexCache::default();
        let s = split(
            many("c", 3),
            many("g", 2),
            5,
            &HashSet::new(),
            false,
            &cache,
        );
        assert_eq!(names(&s.declared), ["c0", "c1", "c2", "g0", "g1"]);
        assert!(s.catalog.is_none());
    }

    #[test]
    fn over_it_the_gateway_tools_wait_and_the_client_tools_that_fit_stay() {
        let cache = IndexCache::default();
        let found = HashSet::from(["g4".to_owned()]);
        let s = split(many("c", 3), many("g", 30), 20, &found, false, &cache);
        assert_eq!(names(&s.declared), ["c0", "c1", "c2", SEARCH_TOOL, "g4"]);
        assert_eq!(s.catalog.unwrap().len(), 30);
    }

    #[test]
    fn in_natural_mode_the_waiting_tools_are_declared_unlisted() {
        let cache = IndexCache::default();
        let found = HashSet::from(["g4".to_owned()]);
        let s = split(many("c", 1), many("g", 30), 20, &found, true, &cache);
        assert_eq!(s.declared.len(), 1 + 1 + 30);
        let listed: Vec<&str> = s
            .declared
            .iter()
            .filter(|t| !is_unlisted(t))
            .filter_map(Tool::name)
            .collect();
        assert_eq!(listed, ["c0", SEARCH_TOOL, "g4"]);
        let mut tool = s.declared[2].clone();
        assert!(is_unlisted(&tool));
        mark(&mut tool, false);
        assert!(!is_unlisted(&tool));
    }

    #[test]
    fn a_client_catalog_over_the_threshold_is_searched_too() {
        let cache = IndexCache::default();
        let mut client = many("c", 200);
        client.push(Tool::Other(json!({"type": "web_search"})));
        let s = split(client, many("g", 2), 20, &HashSet::new(), false, &cache);
        assert_eq!(s.declared.len(), 2, "the non-function tool and the search");
        assert_eq!(names(&s.declared), [SEARCH_TOOL]);
        let catalog = s.catalog.unwrap();
        assert_eq!(catalog.len(), 202);
        assert!(catalog.get("c150").is_some());
    }

    #[test]
    fn a_search_is_answered_from_the_catalog() {
        let cache = IndexCache::default();
        let mut gateway = many("g", 30);
        gateway.push(tool("get_weather", "Current weather for a city"));
        let s = split(Vec::new(), gateway, 20, &HashSet::new(), false, &cache);
        let catalog = s.catalog.unwrap();
        let (text, hits) = catalog
            .answer(r#"{"query": "weather in Paris", "limit": 2}"#)
            .unwrap();
        assert_eq!(
            names(&hits.into_iter().cloned().collect::<Vec<_>>()),
            ["get_weather"]
        );
        assert_eq!(super::super::names_in_result(&text), ["get_weather"]);
        assert!(catalog.answer("{}").is_err());
        assert!(catalog.answer("nope").is_err());
    }

    #[test]
    fn what_a_conversation_found_is_read_back() {
        let search = Call {
            id: "s1".into(),
            name: SEARCH_TOOL.into(),
            arguments: "{}".into(),
        };
        let used = Call {
            id: "u1".into(),
            name: "send_email".into(),
            arguments: "{}".into(),
        };
        let result = super::super::result(
            "q",
            &[Found {
                name: "get_weather",
                description: "",
                schema: None,
            }],
        );
        let messages = vec![
            Message::assistant("", vec![search]),
            Message::tool_result("s1", result),
            Message::assistant("", vec![used]),
            Message::tool_result("u1", r#"{"tools": [{"name": "not_a_search"}]}"#),
        ];
        let found = found_in(&messages);
        assert_eq!(
            found,
            HashSet::from(["get_weather".to_owned(), "send_email".to_owned()])
        );
    }
}
