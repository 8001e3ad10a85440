//! Which chat a request continues, without the client saying so: every
//! conversation state toolgate answered is kept as a hash of its messages,
//! normalised to what a client sends back (role, text, calls by id, name
//! and arguments, results by call id). A request whose history starts with
//! such a state continues that chat. Call ids are unique to an answer, so a
//! state with calls names one chat; two chats may reach the same state by
//! text alone (the same question, the same reply: two users asking a
//! deterministic model alike, or one user retrying). A request that names
//! one of them continues it; one that does not continues the chat that
//! reached the state last, never a new one ([`choose`]). Pure.
//!
//! The chain starts from the tenant's name, so one tenant's history never
//! matches another's state, however alike the two conversations are (the
//! anonymous tenant's chain starts from zero, as before tenants).

use serde_json::Value;
use sha2::{Digest, Sha256};

/// A chat that reached a conversation state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reached<C> {
    pub chat: C,
    /// How many of the history's messages the chat recorded there.
    pub len: i64,
    /// When the chat reached it (ms since the epoch: the answer's end).
    pub at: i64,
}

/// What the states a history starts with say of the chat it continues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice<C> {
    /// This chat, which recorded that many of the history's messages.
    Continue(C, i64),
    /// No chat reached any of them (here).
    Unknown,
}

/// What the states a history reached say of its chat, and which state
/// said it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision<C> {
    /// The chat, if any.
    pub choice: Choice<C>,
    /// The state that decided, newest first; `None` when none did.
    pub depth: Option<usize>,
}

impl<C> Decision<C> {
    /// Whether looking again may decide better. The newest state ends with
    /// the history's last answer: when it was not found, and either nothing
    /// was or only the state of the answer before it, the replica that gave
    /// the last answer may still be writing it. A history found further
    /// back was edited after that point: nothing newer will land.
    pub fn open(&self) -> bool {
        matches!(self.depth, None | Some(1))
    }
}

/// Picks the chat from the chats that reached each state (longest state
/// first). A named chat (`header`) continues from the longest state it
/// reached; otherwise the longest state any chat reached decides, and of
/// the chats that reached it, the one that reached it last (the same
/// moment: the greater chat id). A history several chats share never
/// starts a new one.
pub fn choose<C: AsRef<str>>(
    found: impl IntoIterator<Item = Vec<Reached<C>>>,
    header: Option<&str>,
) -> Decision<C> {
    for (depth, chats) in found.into_iter().enumerate() {
        let choice = match header {
            Some(h) => chats.into_iter().find(|r| r.chat.as_ref() == h),
            None => chats
                .into_iter()
                .max_by(|a, b| (a.at, a.chat.as_ref()).cmp(&(b.at, b.chat.as_ref()))),
        };
        if let Some(Reached { chat, len, .. }) = choice {
            return Decision {
                choice: Choice::Continue(chat, len),
                depth: Some(depth),
            };
        }
    }
    Decision {
        choice: Choice::Unknown,
        depth: None,
    }
}

/// A running hash over messages: `next = sha256(previous ‖ message)`.
#[derive(Debug, Clone, Default)]
pub struct Chain {
    state: [u8; 32],
}

impl Chain {
    /// A chain for `tenant`'s conversations.
    pub fn for_tenant(tenant: &str) -> Chain {
        if tenant == crate::config::auth::ANONYMOUS {
            return Chain::default();
        }
        let mut hasher = Sha256::new();
        hasher.update(b"toolgate tenant\0");
        hasher.update(tenant.as_bytes());
        Chain {
            state: hasher.finalize().into(),
        }
    }

    pub fn push(&mut self, message: &Value) {
        let mut hasher = Sha256::new();
        hasher.update(self.state);
        normal(message, &mut HashWriter(&mut hasher));
        self.state = hasher.finalize().into();
    }

    pub fn hex(&self) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = String::with_capacity(64);
        for b in self.state {
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xF)]));
        }
        out
    }
}

/// Feeds what is written into a hash.
struct HashWriter<'a>(&'a mut Sha256);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A message reduced to what survives a client's round trip, written as
/// the JSON array `[role, text, [[id, name, arguments], …], tool_call_id]`.
fn normal(message: &Value, out: &mut impl std::io::Write) {
    let role = message.get("role").and_then(Value::as_str).unwrap_or("");
    let text: std::borrow::Cow<'_, str> = match message.get("content") {
        Some(Value::String(s)) => s.as_str().into(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<String>()
            .into(),
        _ => "".into(),
    };
    let calls: Vec<(&str, &str, std::borrow::Cow<'_, str>)> = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            let id = c.get("id").and_then(Value::as_str).unwrap_or("");
            let name = c
                .pointer("/function/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            let args = c
                .pointer("/function/arguments")
                .and_then(Value::as_str)
                .unwrap_or("");
            // Spacing is the only change a client may make to arguments.
            let args = serde_json::from_str::<Value>(args)
                .map_or_else(|_| args.into(), |v| v.to_string().into());
            (id, name, args)
        })
        .collect();
    let id = message
        .get("tool_call_id")
        .and_then(Value::as_str)
        .unwrap_or("");
    // A tuple is written as an array, exactly as before this was typed.
    let _ = serde_json::to_writer(out, &(role, text.trim(), calls, id));
}

/// The hash of every prefix of `messages` that ends with an assistant
/// message, longest first, with its length; at most `max`. `chain` starts
/// as the tenant's and ends over all of `messages` (the recorder goes on
/// from there).
pub fn prefixes(chain: &mut Chain, messages: &[Value], max: usize) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        chain.push(message);
        if message.get("role").and_then(Value::as_str) == Some("assistant") {
            out.push((chain.hex(), i + 1));
        }
    }
    out.reverse();
    out.truncate(max);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn prefixes(tenant: &str, messages: &[Value], max: usize) -> Vec<(String, usize)> {
        super::prefixes(&mut Chain::for_tenant(tenant), messages, max)
    }

    /// Heads stored by earlier releases are found: the normal form, and so
    /// every hash, is byte for byte what it was.
    #[test]
    fn the_normal_form_is_stable() {
        let message = json!({"role": "assistant", "content": [{"type": "text", "text": " hi "}, {"text": "\u{e9}\""}],
            "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{\"a\":  1}"}},
                           {"id": "c2", "function": {"name": "g", "arguments": "not json"}}]});
        let mut out = Vec::new();
        normal(&message, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"["assistant","hi é\"",[["c1","f","{\"a\":1}"],["c2","g","not json"]],""]"#
        );
        let mut out = Vec::new();
        normal(
            &json!({"role": "tool", "tool_call_id": "c1", "content": "r"}),
            &mut out,
        );
        assert_eq!(String::from_utf8(out).unwrap(), r#"["tool","r",[],"c1"]"#);
        let mut chain = Chain::default();
        chain.push(&json!({"role": "user", "content": "x"}));
        let mut expected = Sha256::new();
        expected.update([0u8; 32]);
        expected.update(br#"["user","x",[],""]"#);
        let expected: [u8; 32] = expected.finalize().into();
        assert_eq!(chain.state, expected);
        assert_eq!(chain.hex().len(), 64);
        assert!(chain.hex().starts_with(&format!("{:02x}", expected[0])));
    }

    fn at(chat: &str, len: i64, at: i64) -> Reached<&str> {
        Reached { chat, len, at }
    }

    #[test]
    fn a_state_several_chats_reached_continues_the_named_one_or_the_latest() {
        let found = || {
            vec![
                vec![at("a", 4, 30), at("b", 4, 20), at("z", 4, 10)],
                vec![at("c", 2, 5)],
            ]
        };
        let chose = |found, header| choose(found, header).choice;
        assert_eq!(chose(found(), None), Choice::Continue("a", 4), "the latest");
        assert_eq!(chose(found(), Some("b")), Choice::Continue("b", 4));
        assert_eq!(chose(found(), Some("c")), Choice::Continue("c", 2));
        assert_eq!(chose(found(), Some("d")), Choice::Unknown);
        // Reached at the same moment: the greater id, whatever the order.
        let tie = vec![vec![at("x", 2, 7), at("y", 2, 7)]];
        assert_eq!(chose(tie.clone(), None), Choice::Continue("y", 2));
        let mut tie = tie;
        tie[0].reverse();
        assert_eq!(chose(tie, None), Choice::Continue("y", 2));
        assert_eq!(
            chose(vec![vec![], vec![at("c", 2, 1)]], None),
            Choice::Continue("c", 2)
        );
        assert_eq!(chose(Vec::new(), None), Choice::Unknown);
    }

    /// Linking looks again while the history's last answer may be landing:
    /// nothing found, or only the state just before that answer.
    #[test]
    fn only_a_history_missing_its_last_answer_is_looked_up_again() {
        let at_depth = |depth: usize| {
            let mut found = vec![vec![]; 4];
            found[depth].push(at("c", 2, 1));
            choose(found, None)
        };
        assert_eq!(at_depth(0).depth, Some(0));
        assert!(!at_depth(0).open(), "the last answer found");
        assert!(at_depth(1).open(), "the answer before it found");
        assert_eq!(at_depth(1).choice, Choice::Continue("c", 2));
        assert!(
            !at_depth(2).open() && !at_depth(3).open(),
            "edited further back"
        );
        let none = choose(vec![Vec::<Reached<&str>>::new(); 3], None);
        assert!(none.open() && none.depth.is_none());
        let twice = choose(vec![vec![], vec![at("a", 2, 1), at("b", 2, 2)]], None);
        assert_eq!(
            (twice.choice.clone(), twice.open()),
            (Choice::Continue("b", 2), true)
        );
        let named = choose(vec![vec![at("a", 4, 9)], vec![at("b", 2, 1)]], Some("b"));
        assert_eq!(
            (named.choice, named.depth),
            (Choice::Continue("b", 2), Some(1))
        );
    }

    #[test]
    fn a_history_sent_back_matches_the_state_it_continues() {
        let answered = [
            json!({"role": "user", "content": "Weather?"}),
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "W", "arguments": "{\"city\": \"Rome\"}"}}]}),
        ];
        let mut chain = Chain::default();
        for m in &answered {
            chain.push(m);
        }
        let head = chain.hex();
        // As an SDK sends it back: parts, other spacing, extra fields.
        let next = [
            json!({"role": "user", "content": [{"type": "text", "text": "Weather?"}]}),
            json!({"role": "assistant", "content": "", "refusal": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "W", "arguments": "{\"city\":\"Rome\"}"}}]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "hot"}),
        ];
        assert_eq!(prefixes("anonymous", &next, 8), vec![(head.clone(), 2)]);
        let other = [
            json!({"role": "user", "content": "Weather!"}),
            next[1].clone(),
        ];
        assert_ne!(prefixes("anonymous", &other, 8)[0].0, head);
        // The same history from another tenant continues nothing of this one's.
        assert_ne!(prefixes("team-b", &next, 8)[0].0, head);
        assert_ne!(prefixes("team-b", &next, 8), prefixes("team-c", &next, 8));
        // The same call with another id is another answer's.
        let mut again = next.clone();
        again[1]["tool_calls"][0]["id"] = json!("c2");
        assert_ne!(prefixes("anonymous", &again, 8)[0].0, head);
    }
}
