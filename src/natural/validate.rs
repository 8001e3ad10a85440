//! Checking a parsed call's arguments against its tool's JSON schema.
//!
//! Compiling a schema costs far more than checking an instance, so each
//! distinct schema is compiled once and cached for the life of the gateway
//! (bounded; keyed by the schema's canonical text), never per request or call.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use serde_json::{Map, Value};

use crate::natural::tools::Tool;

const MAX_SCHEMAS: usize = 1024;

/// The schema text the cache may hold in all; a compiled validator is of the
/// order of its schema's size, so this bounds the cache's memory too.
pub const MAX_SCHEMA_CACHE_BYTES: usize = 16 * 1024 * 1024;

#[derive(Default)]
pub struct SchemaCache {
    compiled: RwLock<Store>,
}

/// The compiled schemas by canonical text, and the total length of the texts.
#[derive(Default)]
struct Store {
    map: HashMap<String, Arc<Compiled>>,
    bytes: usize,
}

/// A compiled validator, or why the schema itself could not be compiled.
enum Compiled {
    Ready(jsonschema::Validator),
    /// A client sent a schema jsonschema cannot compile: its calls are only
    /// checked for being JSON objects, and the reason is reported once.
    Unusable,
}

impl SchemaCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// `Ok` when `arguments` satisfy `tool`'s parameters schema; otherwise the
    /// validator's complaint, with the path of the offending value.
    pub fn check(&self, tool: &Tool, arguments: &Map<String, Value>) -> Result<(), String> {
        let Some(schema) = &tool.parameters else {
            return Ok(());
        };
        let compiled = self.compiled(schema);
        match &*compiled {
            Compiled::Unusable => Ok(()),
            Compiled::Ready(validator) => {
                let instance = Value::Object(arguments.clone());
                let mut errors = validator.iter_errors(&instance).peekable();
                if errors.peek().is_none() {
                    return Ok(());
                }
                let messages: Vec<String> = errors
                    .take(3)
                    .map(|e| {
                        let at = e.instance_path().to_string();
                        if at.is_empty() {
                            e.to_string()
                        } else {
                            format!("{at}: {e}")
                        }
                    })
                    .collect();
                Err(messages.join("; "))
            }
        }
    }

    fn compiled(&self, schema: &Value) -> Arc<Compiled> {
        let key = schema.to_string();
        if let Some(c) = self
            .compiled
            .read()
            .ok()
            .and_then(|m| m.map.get(&key).cloned())
        {
            return c;
        }
        let compiled = Arc::new(match jsonschema::validator_for(schema) {
            Ok(v) => Compiled::Ready(v),
            Err(e) => {
                tracing::warn!(error = %e, "a tool's parameters schema does not compile; its calls are checked as plain objects");
                Compiled::Unusable
            }
        });
        if key.len() > MAX_SCHEMA_CACHE_BYTES {
            // Compiled for this call only.
            return compiled;
        }
        if let Ok(mut cache) = self.compiled.write() {
            if cache.map.len() >= MAX_SCHEMAS || cache.bytes + key.len() > MAX_SCHEMA_CACHE_BYTES {
                // Start over: recompiling the hot schemas is cheap next to
                // tracking recency on every check.
                cache.map.clear();
                cache.bytes = 0;
            }
            let len = key.len();
            if cache.map.insert(key, compiled.clone()).is_none() {
                // A concurrent miss may have inserted it already.
                cache.bytes += len;
            }
        }
        compiled
    }

    pub fn len(&self) -> usize {
        self.compiled.read().map_or(0, |m| m.map.len())
    }

    /// The total length of the cached schemas' texts.
    pub fn bytes(&self) -> usize {
        self.compiled.read().map_or(0, |m| m.bytes)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn weather() -> Tool {
        Tool {
            name: "GetWeather".into(),
            description: None,
            parameters: Some(json!({
                "type": "object",
                "properties": {
                    "location": {"type": "string"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}
                },
                "required": ["location"]
            })),
            strict: false,
            unlisted: false,
        }
    }

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn valid_and_invalid_arguments() {
        let cache = SchemaCache::new();
        let tool = weather();
        assert!(
            cache
                .check(&tool, &args(json!({"location": "Paris"})))
                .is_ok()
        );
        let err = cache
            .check(&tool, &args(json!({"city": "Paris"})))
            .unwrap_err();
        assert!(err.contains("location"), "{err}");
        let err = cache
            .check(&tool, &args(json!({"location": "Paris", "unit": "kelvin"})))
            .unwrap_err();
        assert!(err.contains("/unit"), "{err}");
    }

    #[test]
    fn compiled_once_per_distinct_schema() {
        let cache = SchemaCache::new();
        let tool = weather();
        for _ in 0..10 {
            let _ = cache.check(&tool, &args(json!({"location": "x"})));
        }
        assert_eq!(cache.len(), 1);
        assert_eq!(
            cache.bytes(),
            weather().parameters.unwrap().to_string().len()
        );
        let no_params = Tool {
            parameters: None,
            ..weather()
        };
        assert!(cache.check(&no_params, &Map::new()).is_ok());
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn cached_schema_text_is_bounded_in_bytes() {
        let cache = SchemaCache::new();
        let filler = "x".repeat(1024 * 1024);
        for i in 0..20 {
            let tool = Tool {
                name: "T".into(),
                description: None,
                parameters: Some(json!({"type": "object", "description": format!("{i}{filler}")})),
                strict: false,
                unlisted: false,
            };
            let _ = cache.check(&tool, &args(json!({})));
            assert!(cache.bytes() <= MAX_SCHEMA_CACHE_BYTES, "{}", cache.bytes());
        }
        assert!(cache.len() < 20);
    }
}
