//! Does the upstream follow a llama.cpp GBNF grammar (what
//! `constrain = "gbnf"` sends)? One request carries a grammar that admits a
//! single string no model writes unasked; the answer says which of three
//! things the server does with it (pure: the request and the reading). The
//! same three answers tell what it does with a structural tag
//! (`structural_tags`).

use serde_json::{Value, json};

use super::score::Outcome;
use crate::config::Constrain;

/// The one answer the test grammar admits.
const ONLY: &str = "tg-grammar-ok";

/// What the upstream did with a grammar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grammars {
    /// The answer was exactly what the grammar admits.
    Followed,
    /// The server answered, not as the grammar admits: it ignores the field,
    /// and a constrained request would run unconstrained.
    Ignored(String),
    /// The server refused the request (its status and message), or no answer came.
    Refused(String),
}

impl Grammars {
    /// The request body (non-streaming, a few tokens).
    pub fn request(model: &str) -> Value {
        json!({
            "model": model,
            "messages": [{"role": "user", "content": "Say hello."}],
            "max_tokens": 16,
            "temperature": 0,
            "stream": false,
            "grammar": format!("root ::= \"{ONLY}\""),
        })
    }

    /// Reads the answer to [`Grammars::request`] as the probe reads any answer.
    pub fn read(status: u16, body: &[u8]) -> Grammars {
        Grammars::read_admitting(status, body, ONLY)
    }

    /// Reads an answer to a request whose constraint admits `only`.
    pub(super) fn read_admitting(status: u16, body: &[u8], only: &str) -> Grammars {
        match Outcome::from_response(status, body) {
            Outcome::NoCall(text) if text.trim() == only => Grammars::Followed,
            Outcome::NoCall(text) => Grammars::Ignored(format!(
                "answered {:?}",
                text.chars().take(60).collect::<String>()
            )),
            Outcome::Calls(_) => Grammars::Ignored("answered with calls".into()),
            Outcome::Invalid(why) | Outcome::Failed(why) => Grammars::Refused(why),
        }
    }

    pub fn followed(&self) -> bool {
        *self == Grammars::Followed
    }

    /// One line for the table and the recommendation, on the
    /// constraint `constrain` would send.
    pub fn describe(&self, constrain: Constrain) -> String {
        let constrain = constrain.as_str();
        match self {
            Grammars::Followed => format!("followed: `constrain = \"{constrain}\"` works here"),
            Grammars::Ignored(why) => {
                format!("ignored ({why}): `constrain = \"{constrain}\"` would not hold here")
            }
            Grammars::Refused(why) => {
                format!("refused ({why}): `constrain = \"{constrain}\"` would fail here")
            }
        }
    }

    /// `followed`, `ignored` or `refused`, for JSON.
    pub fn as_str(&self) -> &'static str {
        match self {
            Grammars::Followed => "followed",
            Grammars::Ignored(_) => "ignored",
            Grammars::Refused(_) => "refused",
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A non-streaming answer whose message says `text`.
    pub(in crate::commands::probe) fn answer(text: &str) -> Vec<u8> {
        json!({"choices": [{"message": {"role": "assistant", "content": text}}]})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn the_three_things_a_server_does_with_a_grammar() {
        let request = Grammars::request("m");
        assert_eq!(request["grammar"], "root ::= \"tg-grammar-ok\"");
        assert_eq!(Grammars::read(200, &answer(ONLY)), Grammars::Followed);
        assert!(matches!(
            Grammars::read(200, &answer("Hello! How can I help?")),
            Grammars::Ignored(why) if why.contains("Hello!")
        ));
        let refused =
            br#"{"error": {"message": "Unrecognized request argument supplied: grammar"}}"#;
        assert_eq!(
            Grammars::read(400, refused),
            Grammars::Refused("400: Unrecognized request argument supplied: grammar".into())
        );
        assert!(!Grammars::read(500, b"boom").followed());
    }
}
