//! What the store writes and reads: plain data, and the ids toolgate makes
//! (time-ordered, so replicas writing one database never conflict).

use std::sync::Arc;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::Value;

/// The kinds of the `messages` table's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Text,
    Reasoning,
    ToolsCall,
    ToolResult,
    ToolsAggregate,
    Usage,
    /// The answer failed after it began (the upstream's stream was cut, a
    /// round failed): what was recorded before it is all there is.
    Error,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Text => "text",
            Kind::Reasoning => "reasoning",
            Kind::ToolsCall => "tools_call",
            Kind::ToolResult => "tool_result",
            Kind::ToolsAggregate => "tools_aggregate",
            Kind::Usage => "usage",
            Kind::Error => "error",
        }
    }
}

/// One row of `messages`.
#[derive(Debug, Clone)]
pub struct Message {
    pub id: String,
    pub chat_id: Arc<str>,
    /// The tenant whose request made it: the row lands only in a chat of
    /// the same tenant's.
    pub tenant: Arc<str>,
    pub role: &'static str,
    pub kind: Kind,
    pub created_at: i64,
    pub sequence: i64,
    /// The seed's message DTO as JSON (the kind's own fields, then `id`,
    /// `chatId`, `role`, `kind`, `timestamp`, `sequenceNumber`), written
    /// once: the database and every live viewer take it as it is.
    pub json: Box<str>,
    /// What a search reads of it, lower-cased: its text, its calls' names
    /// and arguments, its result.
    pub search: Box<str>,
}

impl Message {
    /// A new row of `tenant`'s chat `chat_id`: the kind's own `fields` (an
    /// object) and the DTO's common ones (id, chat, role, kind, time,
    /// sequence).
    pub fn new(
        chat_id: Arc<str>,
        tenant: Arc<str>,
        role: &'static str,
        kind: Kind,
        fields: Value,
    ) -> Message {
        let (id, sequence) = next_id();
        let created_at = sequence / 1000;
        let dto = Dto {
            fields: fields.as_object(),
            id: &id,
            chat_id: &chat_id,
            role,
            kind: kind.as_str(),
            timestamp: created_at,
            sequence,
        };
        // Serialising maps of strings and numbers cannot fail.
        let json = serde_json::to_string(&dto)
            .unwrap_or_default()
            .into_boxed_str();
        let search = searchable(&fields);
        Message {
            id,
            chat_id,
            tenant,
            role,
            kind,
            created_at,
            sequence,
            json,
            search,
        }
    }
}

/// The words of a message's fields a search finds, lower-cased, one per line.
fn searchable(fields: &Value) -> Box<str> {
    let mut out = String::new();
    let mut add = |v: Option<&Value>| {
        if let Some(text) = v.and_then(Value::as_str).filter(|t| !t.is_empty()) {
            out.push_str(&text.to_lowercase());
            out.push('\n');
        }
    };
    add(fields.get("text"));
    add(fields.get("result"));
    add(fields.get("raw"));
    for key in ["toolCalls", "toolResults"] {
        for item in fields
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            add(item.get("name"));
            add(item.get("arguments"));
            add(item.get("result"));
        }
    }
    out.into_boxed_str()
}

/// A message DTO as it is serialised.
struct Dto<'a> {
    fields: Option<&'a serde_json::Map<String, Value>>,
    id: &'a str,
    chat_id: &'a str,
    role: &'a str,
    kind: &'a str,
    timestamp: i64,
    sequence: i64,
}

impl Serialize for Dto<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        let common = [
            "id",
            "chatId",
            "role",
            "kind",
            "timestamp",
            "sequenceNumber",
        ];
        for (key, value) in self.fields.into_iter().flatten() {
            if !common.contains(&key.as_str()) {
                map.serialize_entry(key, value)?;
            }
        }
        map.serialize_entry("id", self.id)?;
        map.serialize_entry("chatId", self.chat_id)?;
        map.serialize_entry("role", self.role)?;
        map.serialize_entry("kind", self.kind)?;
        map.serialize_entry("timestamp", &self.timestamp)?;
        map.serialize_entry("sequenceNumber", &self.sequence)?;
        map.end()
    }
}

/// A chat's row, upserted: counts are added to the stored ones.
#[derive(Debug, Clone)]
pub struct ChatUpdate {
    pub id: Arc<str>,
    /// The tenant whose request made it.
    pub tenant: Arc<str>,
    pub at: i64,
    pub provider: String,
    pub model: String,
    pub title: String,
    pub tool_calls: i64,
    pub messages: i64,
    /// Error rows among them, and the last one's code (empty: none).
    pub errors: i64,
    pub last_error: String,
}

/// A conversation state that a later request may continue.
#[derive(Debug, Clone)]
pub struct Head {
    pub hash: String,
    pub tenant: Arc<str>,
    pub chat_id: Arc<str>,
    pub len: i64,
    pub at: i64,
}

/// Gateway steps kept for a client's follow-up, under each call id.
#[derive(Debug, Clone)]
pub struct StoredSteps {
    pub tenant: Arc<str>,
    pub ids: Vec<String>,
    pub at: i64,
    pub steps: Value,
}

/// A Responses API answer kept for `previous_response_id`.
#[derive(Debug, Clone)]
pub struct StoredResponse {
    pub id: String,
    pub tenant: Arc<str>,
    pub at: i64,
    /// The chat messages the answer ended (request and reply).
    pub conversation: Arc<Value>,
    pub response: Arc<Value>,
    /// The chat its exchange was recorded in (empty when not recorded).
    pub chat_id: Arc<str>,
}

/// A stored response as read back.
#[derive(Debug, Clone)]
pub struct Kept {
    /// The chat messages the answer ended (request and reply).
    pub conversation: Value,
    /// The response object.
    pub response: Value,
    /// The chat its exchange was recorded in, if it was.
    pub chat: Option<String>,
}

/// What one request used of one provider, added to its hour's row.
#[derive(Debug, Clone, PartialEq)]
pub struct Used {
    /// The hour it ended in (ms since the epoch, a multiple of an hour).
    pub hour: i64,
    pub tenant: Arc<str>,
    /// The key it presented (`key-` and 8 hex digits of its SHA-256).
    pub key_id: String,
    pub provider: String,
    /// The model the client asked for.
    pub model: String,
    pub requests: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// Micro-dollars.
    pub cost_micros: i64,
    /// 1 when an answer reported no usage and its tokens were estimated.
    pub estimated: i64,
}

/// A usage total as read back; the fields not grouped by are `None`.
#[derive(Debug, Clone, Serialize)]
pub struct UsageRow {
    /// The UTC day (`2026-11-29`) or hour (`2026-11-29T13:00:00Z`) it was
    /// used in, when grouped by time.
    pub day: Option<String>,
    pub hour: Option<String>,
    pub tenant: Option<String>,
    pub key: Option<String>,
    /// The managed key's name, when grouped by key (`None` for a key the
    /// config holds).
    pub key_name: Option<String>,
    pub provider: Option<String>,
    pub model: Option<String>,
    pub requests: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// Micro-dollars, shown as `cost_usd` in dollars.
    #[serde(rename = "cost_usd", serialize_with = "micros_as_dollars")]
    pub cost_micros: i64,
    /// Of `requests`, those whose tokens are estimates (their answers
    /// reported no usage).
    pub estimated_requests: i64,
}

/// A managed key as kept (never the key itself: its SHA-256).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRow {
    pub id: String,
    pub tenant: String,
    pub name: String,
    /// The key's first characters, to tell keys apart in a list.
    pub prefix: String,
    /// Hex SHA-256 of the key.
    pub sha256: String,
    /// What the key was made with, as JSON (models, gateway tools, limits,
    /// budget).
    pub policy: String,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub last_used_at: Option<i64>,
    /// When it was revoked; `None` while it is in force.
    pub revoked_at: Option<i64>,
}

/// What usage can be grouped by: a time bucket (UTC days or hours) and
/// who used it where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageColumn {
    Day,
    Hour,
    Tenant,
    Key,
    Provider,
    Model,
}

impl UsageColumn {
    /// `group_by`'s words.
    pub fn parse(word: &str) -> Option<UsageColumn> {
        Some(match word {
            "day" => UsageColumn::Day,
            "hour" => UsageColumn::Hour,
            "tenant" => UsageColumn::Tenant,
            "key" => UsageColumn::Key,
            "provider" => UsageColumn::Provider,
            "model" => UsageColumn::Model,
            _ => return None,
        })
    }

    /// Its name as a result column.
    pub fn column(self) -> &'static str {
        match self {
            UsageColumn::Day => "day",
            UsageColumn::Hour => "hour",
            UsageColumn::Tenant => "tenant",
            UsageColumn::Key => "key_id",
            UsageColumn::Provider => "provider",
            UsageColumn::Model => "model",
        }
    }

    /// What it is computed from in the `usage` table. `hour` is ms since
    /// the epoch, a multiple of an hour, so a UTC day is integer arithmetic
    /// both SQLite and PostgreSQL do alike.
    pub fn expression(self) -> &'static str {
        match self {
            UsageColumn::Day => "(hour - hour % 86400000)",
            other => other.column(),
        }
    }

    /// Whether it is a time bucket (read as ms, shown as a date).
    pub fn is_time(self) -> bool {
        matches!(self, UsageColumn::Day | UsageColumn::Hour)
    }
}

#[derive(Debug, Clone)]
pub enum Write {
    /// Shared with live viewers of the chat.
    Message(Arc<Message>),
    Chat(ChatUpdate),
    Head(Head),
    Response(StoredResponse),
    Steps(StoredSteps),
    Usage(Used),
}

/// A chat as listed.
#[derive(Debug, Clone, Serialize)]
pub struct ChatSummary {
    pub id: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub provider: String,
    pub model: String,
    pub title: String,
    pub tool_calls: i64,
    pub messages: i64,
    /// The tenant that owns it.
    pub tenant: String,
    /// Rows saying an answer failed or was cut, and the last one's code
    /// (`cut`, `invalid_tool_call`, …; empty when none).
    pub errors: i64,
    pub last_error: String,
}

/// Which chats a list shows: at most `limit`, newest activity first,
/// older than `before` (activity in ms, then id, from the last page).
#[derive(Debug, Clone, Default)]
pub struct ChatFilter {
    /// `None`: every tenant's (an admin's list).
    pub tenant: Option<String>,
    pub provider: Option<String>,
    pub model: Option<String>,
    /// Only chats with an answer that failed or was cut.
    pub errors_only: bool,
    /// Words (or quoted phrases) each found in the title or a message
    /// (prompts, calls, results), in any order; none: every chat.
    pub words: Vec<String>,
    pub before: Option<(i64, String)>,
    pub limit: i64,
}

/// A message as read back.
#[derive(Debug, Clone, Serialize)]
pub struct StoredMessage {
    pub id: String,
    pub role: String,
    pub kind: String,
    pub created_at: i64,
    pub sequence: i64,
    pub message: Value,
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The last (microsecond, random) pair handed out, so ids and sequence
/// numbers from one process strictly increase.
static LAST: Mutex<(i64, u64)> = Mutex::new((0, 0));

/// A new id and sequence number: 48 bits of milliseconds then 80 random
/// bits (as 32 hex digits), sorting by creation time; the sequence is the
/// creation time in microseconds, strictly increasing in this process.
pub fn next_id() -> (String, i64) {
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64);
    let mut last = LAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let sequence = micros.max(last.0 + 1);
    let random: u64 = rand::random();
    *last = (sequence, random);
    drop(last);
    let millis = (sequence / 1000) as u64 & 0xFFFF_FFFF_FFFF;
    let extra: u16 = rand::random();
    // 12 + 16 + 4 hex digits, written without the formatting machinery.
    let mut id = String::with_capacity(32);
    push_hex(&mut id, millis, 12);
    push_hex(&mut id, random, 16);
    push_hex(&mut id, u64::from(extra), 4);
    (id, sequence)
}

/// Appends the low `digits` hex digits of `value`, zero-padded.
fn push_hex(out: &mut String, value: u64, digits: u32) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for i in (0..digits).rev() {
        out.push(char::from(HEX[(value >> (4 * i)) as usize & 0xF]));
    }
}

/// Micro-dollars written as a dollar amount, exactly (the double nearest
/// it, which prints as the decimal).
fn micros_as_dollars<S: serde::Serializer>(micros: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(*micros as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_sort_by_creation_and_sequences_increase() {
        let made: Vec<(String, i64)> = (0..1000).map(|_| next_id()).collect();
        for pair in made.windows(2) {
            assert!(pair[0].1 < pair[1].1);
            assert!(pair[0].0[..12] <= pair[1].0[..12]);
            assert_ne!(pair[0].0, pair[1].0);
        }
        assert_eq!(made[0].0.len(), 32);
        let mut hex = String::new();
        push_hex(&mut hex, 0xab_cdef, 8);
        assert_eq!(hex, "00abcdef");
    }

    #[test]
    fn a_message_is_its_fields_then_the_common_ones() {
        let m = Message::new(
            Arc::from("c1"),
            Arc::from("t"),
            "user",
            Kind::Text,
            serde_json::json!({"text": "hi \"there\"", "id": "not kept"}),
        );
        let dto: Value = serde_json::from_str(&m.json).unwrap();
        assert_eq!(dto["text"], "hi \"there\"");
        assert_eq!(dto["id"], m.id.as_str());
        assert_eq!(dto["chatId"], "c1");
        assert_eq!(
            (&dto["role"], &dto["kind"]),
            (&"user".into(), &"text".into())
        );
        assert_eq!(dto["timestamp"], m.created_at);
        assert_eq!(dto["sequenceNumber"], m.sequence);
        assert!(m.json.starts_with(r#"{"text":"#), "{}", m.json);
        assert_eq!(m.json.matches(r#""id":"#).count(), 1);
    }
}
