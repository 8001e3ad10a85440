//! `[store] redact`: values at the configured paths are stored as
//! `"[redacted]"`. Paths address the conversation as a chat request, so a
//! recorded message is redacted by its position in it. Pure.

use serde_json::Value;

use crate::config::store::{RedactPath, Step};

pub const REDACTED: &str = "[redacted]";

/// Whether any path reaches the conversation's message number `index`.
pub fn reaches(paths: &[RedactPath], index: usize) -> bool {
    paths.iter().any(|p| p.message.is_none_or(|i| i == index))
}

/// Redacts `message`, the conversation's message number `index`.
pub fn apply(paths: &[RedactPath], index: usize, message: &mut Value) {
    for path in paths {
        if path.message.is_none_or(|i| i == index) {
            walk(message, &path.steps);
        }
    }
}

fn walk(value: &mut Value, steps: &[Step]) {
    let Some((step, rest)) = steps.split_first() else {
        if !value.is_null() {
            *value = Value::String(REDACTED.into());
        }
        return;
    };
    match (step, value) {
        (Step::Key(key), Value::Object(map)) => {
            if let Some(v) = map.get_mut(key) {
                walk(v, rest);
            }
        }
        (Step::Every, Value::Array(items)) => items.iter_mut().for_each(|v| walk(v, rest)),
        (Step::Index(i), Value::Array(items)) => {
            if let Some(v) = items.get_mut(*i) {
                walk(v, rest);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn redacts_where_the_path_leads_only() {
        let every = RedactPath {
            message: None,
            steps: vec![Step::Key("content".into())],
        };
        let args = RedactPath {
            message: Some(1),
            steps: vec![
                Step::Key("tool_calls".into()),
                Step::Every,
                Step::Key("function".into()),
                Step::Key("arguments".into()),
            ],
        };
        let mut m = json!({"role": "assistant", "content": "secret", "tool_calls": [{"function": {"name": "F", "arguments": "{}"}}]});
        apply(&[every.clone(), args.clone()], 1, &mut m);
        assert_eq!(
            m,
            json!({"role": "assistant", "content": "[redacted]", "tool_calls": [{"function": {"name": "F", "arguments": "[redacted]"}}]})
        );
        let mut other = json!({"role": "assistant", "content": null, "tool_calls": [{"function": {"arguments": "{}"}}]});
        apply(&[every, args], 2, &mut other);
        assert_eq!(other["tool_calls"][0]["function"]["arguments"], "{}");
        assert!(other["content"].is_null());
    }
}
