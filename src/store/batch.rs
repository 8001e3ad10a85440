//! A batch of queued writes shaped for the database: rows grouped by table
//! so that each table takes multi-row inserts, a chat's updates within the
//! batch merged into one row, and a head written once per (state, chat).
//! Pure: the database code only runs it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::store::record::{Head, Message, StoredResponse, Used, Write};

/// The row counts an `INSERT` takes: a table's rows are cut greedily into
/// these, so its inserts come in four shapes, each prepared once per
/// connection and kept (a statement of a new length every batch was
/// parsed and planned anew each time).
pub const SHAPES: [usize; 4] = [64, 16, 4, 1];
/// Rows in one `INSERT` at most (7 parameters a message row: far inside
/// SQLite's 32,766 and PostgreSQL's 65,535 parameters a statement).
pub const ROWS_PER_INSERT: usize = SHAPES[0];

/// A chat's row as one batch leaves it: its updates in the batch merged
/// (counts added, the newest provider and model, the first title).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatRow {
    pub id: Arc<str>,
    pub tenant: Arc<str>,
    pub created_at: i64,
    pub updated_at: i64,
    pub provider: String,
    pub model: String,
    pub title: String,
    pub tool_calls: i64,
    pub messages: i64,
    pub errors: i64,
    pub last_error: String,
}

/// One steps row: a call id of the tenant's, and the steps kept under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepRow<'a> {
    pub tenant: &'a str,
    pub call_id: &'a str,
    pub at: i64,
    pub json: Arc<str>,
}

/// The batch by table, each cut into inserts of one of the [`SHAPES`].
#[derive(Debug, Default)]
pub struct Planned<'a> {
    pub messages: Vec<Vec<&'a Message>>,
    /// No chat id twice within one insert (PostgreSQL refuses an upsert
    /// that touches a row twice): updates of one id by two tenants, which
    /// stay apart, go to different inserts.
    pub chats: Vec<Vec<ChatRow>>,
    /// One row per (state, chat).
    pub heads: Vec<Vec<&'a Head>>,
    pub responses: Vec<Vec<&'a StoredResponse>>,
    pub steps: Vec<Vec<StepRow<'a>>>,
    /// One row per hour, tenant, key, provider and model (an upsert that
    /// touched one row twice would be refused).
    pub usage: Vec<Vec<Used>>,
}

#[cfg(test)]
impl Planned<'_> {
    /// Statements the batch takes.
    pub fn statements(&self) -> usize {
        self.messages.len()
            + self.chats.len()
            + self.heads.len()
            + self.responses.len()
            + self.steps.len()
            + self.usage.len()
    }
}

pub fn plan(writes: &[Write]) -> Planned<'_> {
    let mut messages = Vec::new();
    let mut heads: Vec<&Head> = Vec::new();
    let mut head_seen: HashSet<(&str, &str)> = HashSet::new();
    let mut responses = Vec::new();
    let mut steps = Vec::new();
    let mut chats: Vec<ChatRow> = Vec::new();
    let mut chat_at: HashMap<(&str, &str), usize> = HashMap::new();
    let mut usage: Vec<Used> = Vec::new();
    for write in writes {
        match write {
            Write::Usage(u) => {
                let same = |v: &&mut Used| {
                    (v.hour, &v.tenant, &v.key_id, &v.provider, &v.model)
                        == (u.hour, &u.tenant, &u.key_id, &u.provider, &u.model)
                };
                match usage.iter_mut().find(same) {
                    Some(row) => {
                        row.requests += u.requests;
                        row.input_tokens += u.input_tokens;
                        row.output_tokens += u.output_tokens;
                        row.cost_micros += u.cost_micros;
                        row.estimated += u.estimated;
                    }
                    None => usage.push(u.clone()),
                }
            }
            Write::Message(m) => messages.push(&**m),
            Write::Head(h) => {
                if head_seen.insert((&h.hash, &h.chat_id)) {
                    heads.push(h);
                }
            }
            Write::Response(r) => responses.push(r),
            Write::Steps(s) => {
                let json: Arc<str> = Arc::from(s.steps.to_string());
                steps.extend(s.ids.iter().map(|id| StepRow {
                    tenant: &s.tenant,
                    call_id: id,
                    at: s.at,
                    json: json.clone(),
                }));
            }
            Write::Chat(c) => match chat_at.get(&(&*c.id, &*c.tenant)) {
                Some(&i) => {
                    let row = &mut chats[i];
                    row.created_at = row.created_at.min(c.at);
                    if c.at >= row.updated_at {
                        row.updated_at = c.at;
                        row.provider.clone_from(&c.provider);
                        row.model.clone_from(&c.model);
                    }
                    if row.title.is_empty() {
                        row.title.clone_from(&c.title);
                    }
                    row.tool_calls += c.tool_calls;
                    row.messages += c.messages;
                    row.errors += c.errors;
                    if !c.last_error.is_empty() {
                        row.last_error.clone_from(&c.last_error);
                    }
                }
                None => {
                    chat_at.insert((&c.id, &c.tenant), chats.len());
                    chats.push(ChatRow {
                        id: c.id.clone(),
                        tenant: c.tenant.clone(),
                        created_at: c.at,
                        updated_at: c.at,
                        provider: c.provider.clone(),
                        model: c.model.clone(),
                        title: c.title.clone(),
                        tool_calls: c.tool_calls,
                        messages: c.messages,
                        errors: c.errors,
                        last_error: c.last_error.clone(),
                    });
                }
            },
        }
    }
    Planned {
        messages: chunks(messages),
        chats: chat_chunks(chats),
        heads: chunks(heads),
        responses: chunks(responses),
        steps: chunks(steps),
        usage: chunks(usage),
    }
}

/// `rows` cut into inserts of the [`SHAPES`], largest first.
fn chunks<T>(rows: Vec<T>) -> Vec<Vec<T>> {
    let mut out = Vec::new();
    let mut left = rows.len();
    let mut rows = rows.into_iter();
    while left > 0 {
        let size = SHAPES.into_iter().find(|s| *s <= left).unwrap_or(1);
        out.push(rows.by_ref().take(size).collect());
        left -= size;
    }
    out
}

fn chat_chunks(rows: Vec<ChatRow>) -> Vec<Vec<ChatRow>> {
    let mut out: Vec<Vec<ChatRow>> = Vec::new();
    let mut pending: Vec<ChatRow> = Vec::new();
    let mut later: Vec<ChatRow> = Vec::new();
    let mut rows = rows;
    while !rows.is_empty() {
        let mut ids: HashSet<Arc<str>> = HashSet::new();
        for row in rows.drain(..) {
            if ids.contains(&row.id) {
                later.push(row);
                continue;
            }
            if pending.len() == ROWS_PER_INSERT {
                out.push(std::mem::take(&mut pending));
                ids.clear();
            }
            ids.insert(row.id.clone());
            pending.push(row);
        }
        if !pending.is_empty() {
            out.push(std::mem::take(&mut pending));
        }
        rows = std::mem::take(&mut later);
    }
    // Cut again to the shapes: a part of an insert names no chat twice
    // either.
    out.into_iter().flat_map(chunks).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::record::{ChatUpdate, StoredSteps};
    use proptest::prelude::*;
    use serde_json::json;

    fn chat(id: &str, tenant: &str, at: i64, title: &str, messages: i64) -> Write {
        Write::Chat(ChatUpdate {
            id: Arc::from(id),
            tenant: Arc::from(tenant),
            at,
            provider: format!("p{at}"),
            model: format!("m{at}"),
            title: title.into(),
            tool_calls: 1,
            messages,
            errors: 0,
            last_error: String::new(),
        })
    }

    #[test]
    fn a_chats_updates_are_merged_and_tenants_kept_apart() {
        let writes = vec![
            chat("c1", "a", 10, "", 3),
            chat("c1", "b", 11, "theirs", 5),
            chat("c1", "a", 12, "first", 2),
            chat("c1", "a", 9, "second", 1),
        ];
        let planned = plan(&writes);
        assert_eq!(planned.chats.len(), 2, "one id twice in one insert");
        let a = &planned.chats[0][0];
        assert_eq!((&*a.tenant, a.created_at, a.updated_at), ("a", 9, 12));
        assert_eq!((a.messages, a.tool_calls), (6, 3));
        assert_eq!((a.provider.as_str(), a.title.as_str()), ("p12", "first"));
        let b = &planned.chats[1][0];
        assert_eq!(
            (&*b.tenant, b.messages, b.title.as_str()),
            ("b", 5, "theirs")
        );
    }

    #[test]
    fn a_head_is_written_once_per_state_and_chat() {
        let head = |hash: &str, chat: &str| {
            Write::Head(Head {
                hash: hash.into(),
                tenant: Arc::from("a"),
                chat_id: Arc::from(chat),
                len: 2,
                at: 1,
            })
        };
        let writes = vec![
            head("h1", "c1"),
            head("h2", "c1"),
            head("h1", "c2"),
            head("h2", "c1"),
        ];
        let planned = plan(&writes);
        let heads: Vec<(&str, &str)> = planned
            .heads
            .iter()
            .flatten()
            .map(|h| (&*h.hash, &*h.chat_id))
            .collect();
        assert_eq!(heads, [("h1", "c1"), ("h2", "c1"), ("h1", "c2")]);
    }

    #[test]
    fn steps_are_a_row_per_call_id_sharing_one_serialisation() {
        let writes = vec![Write::Steps(StoredSteps {
            tenant: Arc::from("a"),
            ids: vec!["x".into(), "y".into()],
            at: 1,
            steps: json!([{"role": "tool"}]),
        })];
        let planned = plan(&writes);
        let rows: Vec<&StepRow> = planned.steps.iter().flatten().collect();
        assert_eq!(rows.len(), 2);
        assert!(Arc::ptr_eq(&rows[0].json, &rows[1].json));
        // Two rows are two inserts of the one-row shape.
        assert_eq!(planned.statements(), 2);
    }

    proptest! {
        /// Whatever the batch: every message lands once, inserts stay
        /// within the bound, no insert names a chat twice, and each
        /// (chat, tenant) keeps the sum of its counts.
        #[test]
        fn planning_loses_nothing(
            updates in proptest::collection::vec((0u8..6, 0u8..3, 0i64..100, 0i64..50), 0..700),
            messages in 0usize..1200,
        ) {
            let mut writes: Vec<Write> = updates
                .iter()
                .map(|(id, tenant, at, n)| chat(&format!("c{id}"), &format!("t{tenant}"), *at, "", *n))
                .collect();
            for i in 0..messages {
                writes.push(Write::Message(Arc::new(Message {
                    id: format!("m{i}"),
                    chat_id: Arc::from("c0"),
                    tenant: Arc::from("t0"),
                    role: "user",
                    kind: crate::store::record::Kind::Text,
                    created_at: 0,
                    sequence: i as i64,
                    json: "{}".into(),
                    search: "".into(),
                })));
            }
            let planned = plan(&writes);
            let seen: Vec<&str> = planned.messages.iter().flatten().map(|m| m.id.as_str()).collect();
            prop_assert_eq!(seen.len(), messages);
            prop_assert!(planned.messages.iter().all(|c| SHAPES.contains(&c.len())));
            prop_assert!(planned.chats.iter().all(|c| SHAPES.contains(&c.len())));
            let mut sums: HashMap<(String, String), i64> = HashMap::new();
            for (id, tenant, _, n) in &updates {
                *sums.entry((format!("c{id}"), format!("t{tenant}"))).or_default() += n;
            }
            let mut planned_sums: HashMap<(String, String), i64> = HashMap::new();
            for insert in &planned.chats {
                prop_assert!(insert.len() <= ROWS_PER_INSERT);
                let ids: HashSet<&str> = insert.iter().map(|r| &*r.id).collect();
                prop_assert_eq!(ids.len(), insert.len());
                for r in insert {
                    let key = (r.id.to_string(), r.tenant.to_string());
                    prop_assert!(planned_sums.insert(key, r.messages).is_none());
                }
            }
            prop_assert_eq!(planned_sums, sums);
        }
    }
}
