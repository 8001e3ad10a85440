//! Which provider serves a model. Pure: no IO, no state.

use std::borrow::Cow;
use std::sync::Arc;

use crate::config::Provider;

/// A routing decision: the provider and the model name to send it.
#[derive(Debug)]
pub struct Route<'a> {
    /// The provider that serves it.
    pub provider: &'a Arc<Provider>,
    /// The model name upstream, after prefix stripping and `model_rewrite`.
    pub model: Cow<'a, str>,
    /// The name after prefix stripping, before `model_rewrite`: what a
    /// failover provider rewrites its own way.
    pub name: &'a str,
}

impl Route<'_> {
    /// Whether the body's `model` must be rewritten before forwarding.
    pub fn changes_model(&self, requested: &str) -> bool {
        self.model != requested
    }
}

/// `P/rest` where `P` names a provider goes to `P` as `rest`; otherwise the
/// first provider whose `models` globs match gets the name unchanged, so
/// `meta-llama/Llama-3.1-8B` is an ordinary model name unless a provider is
/// called `meta-llama`.
pub fn route<'a>(providers: &'a [Arc<Provider>], model: &'a str) -> Option<Route<'a>> {
    if let Some((prefix, rest)) = model.split_once('/')
        && !rest.is_empty()
        && let Some(provider) = providers.iter().find(|p| p.name == prefix)
    {
        return Some(Route {
            provider,
            model: rewrite(provider, rest),
            name: rest,
        });
    }
    providers
        .iter()
        .find(|p| p.models.is_match(model))
        .map(|provider| Route {
            provider,
            model: rewrite(provider, model),
            name: model,
        })
}

/// The providers that take a request `route`'s provider failed, in order:
/// its `failover` list, each followed by its own (depth first, each
/// provider once). Config validation rules out cycles.
pub fn failovers<'a>(providers: &'a [Arc<Provider>], route: &Route<'a>) -> Vec<Route<'a>> {
    fn walk<'a>(
        providers: &'a [Arc<Provider>],
        from: &Provider,
        name: &'a str,
        out: &mut Vec<Route<'a>>,
        seen: &mut Vec<&'a str>,
    ) {
        for next in &from.failover {
            let Some(provider) = providers.iter().find(|p| &p.name == next) else {
                continue;
            };
            if seen.contains(&provider.name.as_str()) {
                continue;
            }
            seen.push(&provider.name);
            out.push(Route {
                provider,
                model: rewrite(provider, name),
                name,
            });
            walk(providers, provider, name, out, seen);
        }
    }
    let mut out = Vec::new();
    if !route.provider.failover.is_empty() {
        let mut seen = vec![route.provider.name.as_str()];
        walk(providers, route.provider, route.name, &mut out, &mut seen);
    }
    out
}

fn rewrite<'a>(provider: &'a Provider, model: &'a str) -> Cow<'a, str> {
    match provider.model_rewrite.get(model) {
        Some(upstream) => Cow::Borrowed(upstream.as_str()),
        None => Cow::Borrowed(model),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn providers() -> Vec<Arc<Provider>> {
        Config::from_toml(
            r#"
            [[providers]]
            name = "openai"
            base_url = "http://127.0.0.1:1/v1"
            models = ["gpt-*"]
            [[providers]]
            name = "local"
            base_url = "http://127.0.0.1:2/v1"
            models = ["meta-llama/*", "*"]
            model_rewrite = { "gpt-4o" = "llama3" }
            "#,
        )
        .unwrap()
        .providers
    }

    #[test]
    fn prefix_wins_and_is_stripped() {
        let p = providers();
        let r = route(&p, "local/gpt-4o-mini").unwrap();
        assert_eq!(r.provider.name, "local");
        assert_eq!(r.model, "gpt-4o-mini");
    }

    #[test]
    fn first_matching_pattern_wins_and_slashes_are_ordinary() {
        let p = providers();
        assert_eq!(route(&p, "gpt-4o").unwrap().provider.name, "openai");
        let r = route(&p, "meta-llama/Llama-3.1-8B").unwrap();
        assert_eq!(r.provider.name, "local");
        assert_eq!(r.model, "meta-llama/Llama-3.1-8B");
    }

    #[test]
    fn rewrite_applies_after_prefix_strip() {
        let p = providers();
        let r = route(&p, "local/gpt-4o").unwrap();
        assert_eq!(r.model, "llama3");
        assert!(r.changes_model("local/gpt-4o"));
    }

    #[test]
    fn no_match_is_none() {
        let p = vec![providers().remove(0)];
        assert!(route(&p, "claude-3").is_none());
        assert!(route(&p, "openai/").is_none());
    }

    #[test]
    fn failover_follows_each_list_in_order_with_each_provider_rewriting_the_name() {
        let p = Config::from_toml(
            r#"
            [[providers]]
            name = "a"
            base_url = "http://127.0.0.1:1/v1"
            models = ["llama-*"]
            failover = ["b", "c"]
            [[providers]]
            name = "b"
            base_url = "http://127.0.0.1:2/v1"
            failover = ["d", "c"]
            model_rewrite = { "llama-3" = "meta/llama-3-70b" }
            [[providers]]
            name = "c"
            base_url = "http://127.0.0.1:3/v1"
            [[providers]]
            name = "d"
            base_url = "http://127.0.0.1:4/v1"
            "#,
        )
        .unwrap()
        .providers;
        let primary = route(&p, "a/llama-3").unwrap();
        let chain = failovers(&p, &primary);
        let names: Vec<(&str, &str)> = chain
            .iter()
            .map(|r| (r.provider.name.as_str(), &*r.model))
            .collect();
        assert_eq!(
            names,
            [
                ("b", "meta/llama-3-70b"),
                ("d", "llama-3"),
                ("c", "llama-3")
            ]
        );
        assert!(failovers(&p, &route(&p, "c/x").unwrap()).is_empty());
    }
}
