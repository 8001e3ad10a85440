//! Does the upstream follow an xgrammar structural tag in `response_format`
//! (what `constrain = "structural_tag"` sends to vLLM and SGLang)? One
//! request carries a tag in the shape toolgate's calls take
//! (`triggered_tags`, here with one tag that must come first and last), so
//! it admits a single answer no model writes unasked; a server that takes
//! only the older shape (`structures` and `triggers`) refuses it, as
//! toolgate's requests would be refused (pure: the request and the reading).

use serde_json::{Value, json};

use super::grammars::Grammars;

/// The tag's parts: the one answer it admits is `<toolgate>structural-tag-ok</toolgate>`.
const BEGIN: &str = "<toolgate>";
const CONTENT: &str = "structural-tag-ok";
const END: &str = "</toolgate>";

/// The request body (non-streaming, a few tokens).
pub fn request(model: &str) -> Value {
    json!({
        "model": model,
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 24,
        "temperature": 0,
        "stream": false,
        "response_format": {
            "type": "structural_tag",
            "format": {
                "type": "triggered_tags",
                "triggers": ["<toolgate"],
                "tags": [{
                    "type": "tag",
                    "begin": BEGIN,
                    "content": {"type": "const_string", "value": CONTENT},
                    "end": END,
                }],
                "at_least_one": true,
                "stop_after_first": true,
            },
        },
    })
}

/// Reads the answer to [`request`] as the probe reads any answer.
pub fn read(status: u16, body: &[u8]) -> Grammars {
    Grammars::read_admitting(status, body, &format!("{BEGIN}{CONTENT}{END}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::probe::grammars::tests::answer;

    #[test]
    fn the_three_things_a_server_does_with_a_structural_tag() {
        let request = request("m");
        assert_eq!(request["response_format"]["type"], "structural_tag");
        assert_eq!(
            read(200, &answer("<toolgate>structural-tag-ok</toolgate>")),
            Grammars::Followed
        );
        assert!(matches!(
            read(200, &answer("Hello!")),
            Grammars::Ignored(why) if why.contains("Hello!")
        ));
        let refused = br#"{"error": {"message": "response_format: Field required: structures"}}"#;
        assert_eq!(
            read(400, refused),
            Grammars::Refused("400: response_format: Field required: structures".into())
        );
    }
}
