//! A server's `tools/list`, read page by page within bounds, and the tools
//! toolgate offers from it. Sans-IO: the supervisor asks for the pages and
//! hands each to [`Listing::page`]; a server's answers are untrusted input.

use std::sync::Arc;

use rmcp::model::Tool;
use serde_json::Value;

use crate::config::McpServerConfig;
use crate::tools::{GatewayTool, ToolKind, names};

/// Most tools one server may offer; a server listing more is refused.
pub const MAX_TOOLS_PER_SERVER: usize = 512;
/// Most `tools/list` pages read from one server; a server that pages on
/// past it is refused (a cursor that never ends would grow without bound).
pub const MAX_LIST_PAGES: usize = 64;
/// Most tools read across a listing's pages, `allowed_tools` or not.
pub const MAX_LISTED_TOOLS: usize = 4 * MAX_TOOLS_PER_SERVER;
/// Most bytes of names, descriptions and schemas read across a listing.
pub const MAX_LISTED_BYTES: usize = 16 * 1024 * 1024;

/// The pages read so far.
#[derive(Default)]
pub struct Listing {
    tools: Vec<Tool>,
    bytes: usize,
    pages: usize,
}

impl Listing {
    /// Takes one page: the cursor of the next page to ask for, `None` when
    /// the listing is complete, or why the server is refused.
    pub fn page(
        &mut self,
        tools: Vec<Tool>,
        next: Option<String>,
    ) -> Result<Option<String>, String> {
        self.pages += 1;
        for tool in &tools {
            self.bytes += tool.name.len()
                + tool.description.as_ref().map_or(0, |d| d.len())
                + serde_json::to_string(&*tool.input_schema).map_or(0, |s| s.len());
        }
        self.tools.extend(tools);
        if self.tools.len() > MAX_LISTED_TOOLS {
            return Err(format!(
                "tools/list gave more than {MAX_LISTED_TOOLS} tools"
            ));
        }
        if self.bytes > MAX_LISTED_BYTES {
            return Err(format!(
                "tools/list gave more than {} MiB of tools",
                MAX_LISTED_BYTES / (1024 * 1024)
            ));
        }
        match next {
            Some(_) if self.pages >= MAX_LIST_PAGES => {
                Err(format!("tools/list went on past {MAX_LIST_PAGES} pages"))
            }
            next => Ok(next),
        }
    }

    /// Every tool listed.
    pub fn into_tools(self) -> Vec<Tool> {
        self.tools
    }
}

/// The tools toolgate offers from a complete listing: those `allowed_tools`
/// keeps, named with the server's prefix. Two tools offered under one name,
/// or more than [`MAX_TOOLS_PER_SERVER`], refuse the server.
pub fn offered(
    config: &McpServerConfig,
    listed: Vec<Tool>,
) -> Result<Vec<Arc<GatewayTool>>, String> {
    let mut tools: Vec<Arc<GatewayTool>> = Vec::new();
    for tool in listed {
        let original = tool.name.to_string();
        if config
            .allowed_tools
            .as_ref()
            .is_some_and(|allowed| !allowed.contains(&original))
        {
            continue;
        }
        let name = names::qualify(&config.prefix, &original);
        if tools.iter().any(|t| t.name == name) {
            return Err(format!(
                "two of its tools would both be offered as {name:?}"
            ));
        }
        if tools.len() == MAX_TOOLS_PER_SERVER {
            return Err(format!("lists more than {MAX_TOOLS_PER_SERVER} tools"));
        }
        tools.push(Arc::new(GatewayTool::new(
            name,
            tool.description.map(|d| d.to_string()).unwrap_or_default(),
            Value::Object((*tool.input_schema).clone()),
            ToolKind::Mcp {
                server: config.name.clone(),
                original,
                timeout: config.timeout,
            },
        )));
    }
    Ok(tools)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    fn tool(name: String, description: usize) -> Tool {
        Tool::new(
            name,
            "d".repeat(description),
            Arc::new(serde_json::Map::new()),
        )
    }

    proptest! {
        /// Whatever a server pages out: the listing ends complete within
        /// every bound, or is refused as soon as one is crossed; it never
        /// holds more than one page past a bound.
        #[test]
        fn a_listing_stays_within_its_bounds(
            pages in proptest::collection::vec((0usize..400, 0usize..200_000, any::<bool>()), 1..80),
        ) {
            let mut listing = Listing::default();
            let mut held = 0usize;
            let mut biggest_page = 0usize;
            for (i, (count, description, more)) in pages.iter().enumerate() {
                let page: Vec<Tool> = (0..*count).map(|n| tool(format!("t{i}_{n}"), *description / count.max(&1))).collect();
                held += page.len();
                biggest_page = biggest_page.max(page.len());
                let last = i + 1 == pages.len();
                let next = (*more && !last).then(|| format!("c{i}"));
                match listing.page(page, next.clone()) {
                    Ok(Some(_)) => prop_assert!(next.is_some()),
                    Ok(None) => {
                        prop_assert!(next.is_none());
                        let tools = listing.into_tools();
                        prop_assert_eq!(tools.len(), held);
                        prop_assert!(tools.len() <= MAX_LISTED_TOOLS);
                        prop_assert!(i < MAX_LIST_PAGES);
                        return Ok(());
                    }
                    Err(why) => {
                        prop_assert!(
                            held > MAX_LISTED_TOOLS || i + 1 >= MAX_LIST_PAGES || why.contains("MiB"),
                            "refused early: {}", why
                        );
                        prop_assert!(held <= MAX_LISTED_TOOLS + biggest_page);
                        return Ok(());
                    }
                }
            }
            prop_assert!(false, "the pages ran out before the listing ended");
        }

        /// What is offered has unique names, at most the server's bound,
        /// and only allowed tools.
        #[test]
        fn offered_tools_are_unique_allowed_and_bounded(
            names in proptest::collection::vec("[a-c]{1,3}", 0..700),
            allow in proptest::option::of(proptest::collection::hash_set("[a-c]{1,3}", 0..20)),
        ) {
            let config = McpServerConfig {
                name: "s".into(),
                transport: crate::config::McpTransport::Stdio {
                    program: "true".into(),
                    args: Vec::new(),
                    env: Default::default(),
                },
                allowed_tools: allow.clone(),
                prefix: String::new(),
                timeout: std::time::Duration::from_secs(1),
            };
            let listed: Vec<Tool> = names.iter().map(|n| tool(n.clone(), 0)).collect();
            match offered(&config, listed) {
                Ok(tools) => {
                    let unique: HashSet<&str> = tools.iter().map(|t| t.name.as_str()).collect();
                    prop_assert_eq!(unique.len(), tools.len());
                    prop_assert!(tools.len() <= MAX_TOOLS_PER_SERVER);
                    if let Some(allow) = &allow {
                        prop_assert!(tools.iter().all(|t| allow.contains(t.name.as_str())));
                    }
                }
                Err(why) => prop_assert!(why.contains("both be offered") || why.contains("more than")),
            }
        }
    }
}
