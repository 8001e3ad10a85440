//! Message `content` in its several shapes, reduced to what the rewrite needs.
//!
//! Clients send `null`, `""`, nothing, a string, or an array of parts
//! (conformance rule 17-18). Text is what natural mode writes into, so text
//! parts are flattened to a string whenever that loses nothing; only non-text
//! parts (images, audio, files) force the array form, and they are kept.

use serde_json::{Value, json};

/// A message's content, normalized.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    /// Plain text; absent, `null` and text-only part arrays end up here.
    Text(String),
    /// Parts, because at least one of them is not text.
    Parts(Vec<Value>),
}

impl Content {
    /// Normalizes a `content` value. `refusal` parts count as text: the model
    /// should see what it said. A value of any other type (a client bug) is
    /// shown as JSON rather than dropped.
    pub fn from_value(value: Option<&Value>) -> Content {
        match value {
            None | Some(Value::Null) => Content::Text(String::new()),
            Some(Value::String(text)) => Content::Text(text.clone()),
            Some(Value::Array(parts)) => match parts_text(parts) {
                Some(text) => Content::Text(text),
                None => Content::Parts(parts.clone()),
            },
            Some(other) => Content::Text(pretty(other)),
        }
    }

    /// Like [`Content::from_value`], taking the value: text is moved, not
    /// copied, so appending to a merged message stays linear.
    pub fn from_owned(value: Option<Value>) -> Content {
        match value {
            Some(Value::String(text)) => Content::Text(text),
            Some(Value::Array(parts)) => match parts_text(&parts) {
                Some(text) => Content::Text(text),
                None => Content::Parts(parts),
            },
            other => Content::from_value(other.as_ref()),
        }
    }

    /// Whether there is nothing in it.
    pub fn is_empty(&self) -> bool {
        match self {
            Content::Text(text) => text.is_empty(),
            Content::Parts(parts) => parts.is_empty(),
        }
    }

    /// Appends `other`, separating text by a blank line. Merging into parts
    /// keeps every part in order.
    pub fn append(self, other: Content) -> Content {
        match (self, other) {
            (left, right) if right.is_empty() => left,
            (left, right) if left.is_empty() => right,
            (Content::Text(mut left), Content::Text(right)) => {
                left.push_str("\n\n");
                left.push_str(&right);
                Content::Text(left)
            }
            (left, right) => {
                let mut parts = left.into_parts();
                let right = right.into_parts();
                let joins_text = is_text_part(parts.last()) && is_text_part(right.first());
                if joins_text {
                    // Keep the blank line between the two texts.
                    parts.push(json!({"type": "text", "text": "\n\n"}));
                }
                parts.extend(right);
                Content::Parts(parts)
            }
        }
    }

    /// The content as parts: text becomes one text part (none when empty).
    pub fn into_parts(self) -> Vec<Value> {
        match self {
            Content::Parts(parts) => parts,
            Content::Text(text) if text.is_empty() => Vec::new(),
            Content::Text(text) => vec![json!({"type": "text", "text": text})],
        }
    }

    /// The JSON value to put into a message.
    pub fn into_value(self) -> Value {
        match self {
            Content::Text(text) => Value::String(text),
            Content::Parts(parts) => Value::Array(parts),
        }
    }
}

/// The text of a part array joined by newlines, or `None` when some part is
/// not text. Parts without a known text field are taken to be non-text.
pub fn parts_text(parts: &[Value]) -> Option<String> {
    let mut texts = Vec::with_capacity(parts.len());
    for part in parts {
        texts.push(part_text(part)?);
    }
    Some(texts.join("\n"))
}

/// The text of a `text` or `refusal` part, or of a bare string part.
pub fn part_text(part: &Value) -> Option<&str> {
    match part {
        Value::String(text) => Some(text),
        Value::Object(fields) => match fields.get("type").and_then(Value::as_str) {
            Some("text") => fields.get("text").and_then(Value::as_str),
            Some("refusal") => fields.get("refusal").and_then(Value::as_str),
            _ => None,
        },
        _ => None,
    }
}

fn is_text_part(part: Option<&Value>) -> bool {
    part.is_some_and(|part| part_text(part).is_some())
}

/// Pretty JSON; a `Value` always serializes, the fallback is only for form.
pub fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_empty_shape_is_empty_text() {
        for value in [None, Some(json!(null)), Some(json!("")), Some(json!([]))] {
            assert_eq!(
                Content::from_value(value.as_ref()),
                Content::Text(String::new())
            );
        }
    }

    #[test]
    fn text_and_refusal_parts_flatten() {
        let parts = json!([{"type": "text", "text": "a"}, {"type": "refusal", "refusal": "b"}]);
        assert_eq!(
            Content::from_value(Some(&parts)),
            Content::Text("a\nb".into())
        );
    }

    #[test]
    fn image_parts_keep_the_array_and_merge_as_parts() {
        let image = json!({"type": "image_url", "image_url": {"url": "data:x"}});
        let parts = json!([{"type": "text", "text": "look"}, image.clone()]);
        let content = Content::from_value(Some(&parts));
        assert!(matches!(content, Content::Parts(_)));
        let merged = Content::Text("before".into()).append(content);
        assert_eq!(
            merged.into_value(),
            json!([
                {"type": "text", "text": "before"},
                {"type": "text", "text": "\n\n"},
                {"type": "text", "text": "look"},
                image
            ])
        );
    }

    #[test]
    fn text_merges_with_a_blank_line_and_skips_empty_sides() {
        let merged = Content::Text("a".into()).append(Content::Text("b".into()));
        assert_eq!(merged, Content::Text("a\n\nb".into()));
        let merged = Content::Text(String::new()).append(Content::Text("b".into()));
        assert_eq!(merged, Content::Text("b".into()));
    }
}
