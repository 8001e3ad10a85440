//! The gateway's own steps of an answer that ended with the client's calls,
//! kept until the client comes back with its results (issue: "the model
//! never loses sight of its own steps").
//!
//! The client saw one assistant message holding its calls; the model made
//! more: earlier rounds with the gateway's calls and their results, and the
//! gateway's calls beside the client's in the last round. When a request's
//! history holds an assistant message whose call ids are known here, that
//! message is replaced by what the model really said and was told. Kept in
//! bounded memory: by count, by bytes and by age, oldest first out.
//!
//! Steps belong to the tenant whose request made them: they are kept and
//! found under (tenant, call id), so a call id from another tenant's
//! history finds nothing.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::exchange::Call;
use crate::exchange::request::{Message, Role};
use serde::{Deserialize, Serialize};

/// How long steps wait for the client's follow-up (in memory, and in the
/// store when one is configured).
pub const KEPT_FOR: Duration = Duration::from_secs(3600);

/// What the model said and was told besides the calls the client saw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Steps {
    /// Messages of the rounds before the last (assistant turns and `tool` results).
    pub earlier: Vec<Message>,
    /// The last round's text.
    pub text: String,
    /// The last round's gateway calls (`tool_calls` entries).
    pub calls: Vec<Call>,
    /// Their `tool` result messages.
    pub results: Vec<Message>,
}

impl Steps {
    fn bytes(&self) -> usize {
        let messages = self.earlier.iter().chain(&self.results);
        self.text.len()
            + messages.map(json_len).sum::<usize>()
            + self.calls.iter().map(json_len).sum::<usize>()
    }
}

/// The bytes of `value` as JSON.
fn json_len<T: Serialize>(value: &T) -> usize {
    serde_json::to_vec(value).map_or(0, |b| b.len())
}

struct Entry {
    tenant: Arc<str>,
    ids: Vec<String>,
    at: Instant,
    bytes: usize,
}

/// (tenant, call id).
type Key = (Arc<str>, String);

struct Inner {
    by_id: HashMap<Key, Arc<Steps>>,
    order: VecDeque<Entry>,
    bytes: usize,
}

pub struct StepStore {
    inner: Mutex<Inner>,
    max_entries: usize,
    max_bytes: usize,
    ttl: Duration,
}

impl StepStore {
    pub fn new(max_entries: usize, max_bytes: usize, ttl: Duration) -> Self {
        StepStore {
            inner: Mutex::new(Inner {
                by_id: HashMap::new(),
                order: VecDeque::new(),
                bytes: 0,
            }),
            max_entries,
            max_bytes,
            ttl,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps `steps` under each of the client's call ids, for `tenant`.
    pub fn keep(&self, tenant: &Arc<str>, client_ids: Vec<String>, steps: Steps) {
        let bytes = steps.bytes();
        if bytes > self.max_bytes {
            tracing::warn!(bytes, "gateway steps too large to keep for the follow-up");
            return;
        }
        let steps = Arc::new(steps);
        let mut inner = self.lock();
        for id in &client_ids {
            inner
                .by_id
                .insert((tenant.clone(), id.clone()), steps.clone());
        }
        inner.bytes += bytes;
        inner.order.push_back(Entry {
            tenant: tenant.clone(),
            ids: client_ids,
            at: Instant::now(),
            bytes,
        });
        let now = Instant::now();
        while let Some(front) = inner.order.front() {
            let expired = now.duration_since(front.at) > self.ttl;
            if !(expired || inner.order.len() > self.max_entries || inner.bytes > self.max_bytes) {
                break;
            }
            let entry = inner.order.pop_front().expect("front exists");
            inner.bytes -= entry.bytes;
            for id in entry.ids {
                inner.by_id.remove(&(entry.tenant.clone(), id));
            }
        }
    }

    /// The call ids of the history's assistant messages with no steps kept
    /// here for `tenant` (the newest `max`): a store may hold steps another
    /// replica kept.
    pub fn unknown_ids(&self, tenant: &Arc<str>, messages: &[Message], max: usize) -> Vec<String> {
        let inner = self.lock();
        let mut ids: Vec<String> = messages
            .iter()
            .rev()
            .filter(|m| m.role == Role::Assistant)
            .flat_map(|m| &m.tool_calls)
            .map(|c| c.id.as_str())
            .filter(|id| {
                !inner
                    .by_id
                    .contains_key(&(tenant.clone(), (*id).to_owned()))
            })
            .take(max)
            .map(str::to_owned)
            .collect();
        ids.reverse();
        ids
    }

    /// How many steps are kept now.
    pub fn len(&self) -> usize {
        self.lock().order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Puts `tenant`'s gateway steps back into `messages`; returns how many
    /// assistant messages were expanded.
    pub fn splice(&self, tenant: &Arc<str>, messages: &mut Vec<Message>) -> usize {
        let inner = self.lock();
        if inner.by_id.is_empty() {
            return 0;
        }
        let found = |m: &Message| -> Option<Arc<Steps>> {
            if m.role != Role::Assistant {
                return None;
            }
            m.tool_calls
                .iter()
                .find_map(|c| inner.by_id.get(&(tenant.clone(), c.id.clone())).cloned())
        };
        if !messages.iter().any(|m| found(m).is_some()) {
            return 0;
        }
        let mut expanded = 0;
        let mut out = Vec::with_capacity(messages.len() + 8);
        for message in messages.drain(..) {
            let Some(steps) = found(&message) else {
                out.push(message);
                continue;
            };
            expanded += 1;
            out.extend(steps.earlier.iter().cloned());
            let mut calls = steps.calls.clone();
            calls.extend(message.tool_calls);
            out.push(Message::assistant(&steps.text, calls));
            out.extend(steps.results.iter().cloned());
        }
        *messages = out;
        expanded
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn read<T: serde::de::DeserializeOwned>(v: Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    fn steps(tag: &str) -> Steps {
        Steps {
            earlier: read(json!([
                {"role": "assistant", "content": null, "tool_calls": [{"id": format!("g0{tag}"), "type": "function", "function": {"name": "clock", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": format!("g0{tag}"), "content": "12:00"},
            ])),
            text: "Now the weather.".into(),
            calls: read(json!([
                {"id": format!("g1{tag}"), "type": "function", "function": {"name": "GetWeather", "arguments": "{}"}},
            ])),
            results: read(json!([
                {"role": "tool", "tool_call_id": format!("g1{tag}"), "content": "sunny"},
            ])),
        }
    }

    #[test]
    fn the_clients_turn_is_expanded_in_order() {
        let store = StepStore::new(10, 1 << 20, Duration::from_secs(60));
        let a: Arc<str> = "a".into();
        store.keep(&a, vec!["c1".into()], steps(""));
        let mut messages: Vec<Message> = read(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "It is noon. Now the weather.", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "Notify", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sent"},
        ]));
        let b: Arc<str> = "b".into();
        let mut theirs = messages.clone();
        assert_eq!(
            store.splice(&b, &mut theirs),
            0,
            "another tenant's history finds nothing"
        );
        assert_eq!(store.unknown_ids(&b, &theirs, 8), ["c1"]);
        assert_eq!(store.splice(&a, &mut messages), 1);
        let messages: Vec<Value> = messages.iter().map(Message::to_value).collect();
        let roles: Vec<&str> = messages
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(
            roles,
            ["user", "assistant", "tool", "assistant", "tool", "tool"]
        );
        let ids: Vec<&str> = messages[3]["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["g1", "c1"]);
        assert_eq!(messages[3]["content"], "Now the weather.");
        assert_eq!(messages[4]["tool_call_id"], "g1");
        assert_eq!(messages[5]["tool_call_id"], "c1");
    }

    #[test]
    fn bounded_by_count_and_bytes() {
        let store = StepStore::new(3, 1 << 20, Duration::from_secs(60));
        let t: Arc<str> = "t".into();
        for i in 0..10 {
            store.keep(&t, vec![format!("c{i}")], steps(&i.to_string()));
        }
        assert_eq!(store.len(), 3);
        let call = |id: &str| json!([{"role": "assistant", "tool_calls": [{"id": id, "function": {"name": "F"}}]}]);
        let mut old: Vec<Message> = read(call("c0"));
        assert_eq!(store.splice(&t, &mut old), 0, "the oldest were evicted");
        let mut new: Vec<Message> = read(call("c9"));
        assert_eq!(store.splice(&t, &mut new), 1);
        let one = steps("x").bytes();
        let store = StepStore::new(100, one * 2, Duration::from_secs(60));
        for i in 0..5 {
            store.keep(&t, vec![format!("c{i}")], steps("x"));
        }
        assert_eq!(store.len(), 2);
    }
}
