//! The two databases behind one set of queries (sqlx, runtime queries): the
//! SQL is the same for SQLite and PostgreSQL, so each query is written once
//! and run on whichever pool is configured.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde_json::Value;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqliteLockingMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};
use sqlx::{QueryBuilder, Row, SqlSafeStr};

mod options;

use crate::config::store::Backend;
use crate::store::batch;
use crate::store::record::{
    ChatFilter, ChatSummary, Kept, KeyRow, StoredMessage, UsageColumn, UsageRow, Write,
};

/// The PostgreSQL channel a change of the managed keys is announced on.
const KEYS_CHANNEL: &str = "toolgate_keys";

/// How long a query may wait for a connection: a database that is down
/// fails a batch quickly instead of stalling the writer.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(2);

/// The schema, one migration per version; the same SQL on both databases.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "transcripts", include_str!("schema_1.sql")),
    (2, "gateway steps", include_str!("schema_2.sql")),
    (3, "tenants", include_str!("schema_3.sql")),
    (
        4,
        "heads per chat, response chats",
        include_str!("schema_4.sql"),
    ),
    (5, "chat errors", include_str!("schema_5.sql")),
    (6, "usage", include_str!("schema_6.sql")),
    (7, "managed keys", include_str!("schema_7.sql")),
    (8, "usage in micro-dollars", include_str!("schema_8.sql")),
];

pub enum Db {
    /// The pool, and the file it holds (none in memory).
    Sqlite(SqlitePool, Option<PathBuf>),
    Postgres(PgPool),
}

/// Whose spend [`Db::spend`] sums: a key's rows or a tenant's.
#[derive(Clone, Copy)]
enum Spender {
    Key,
    Tenant,
}

/// Runs `$body` with `$pool` bound to whichever pool `$db` holds.
macro_rules! on_pool {
    ($db:expr, $pool:ident => $body:expr) => {
        match $db {
            Db::Sqlite($pool, _) => $body,
            Db::Postgres($pool) => $body,
        }
    };
}

impl Db {
    /// A pool that connects when first used (a database that is down at
    /// start does not stop toolgate).
    pub fn open(backend: &Backend) -> Result<Db, String> {
        match backend {
            Backend::Sqlite { url } => {
                let memory = url.contains(":memory:") || url.contains("mode=memory");
                let mut options = SqliteConnectOptions::from_str(url)
                    .map_err(|e| format!("invalid SQLite URL: {e}"))?
                    .create_if_missing(true)
                    .busy_timeout(Duration::from_secs(5));
                if !memory {
                    // One connection holds the file in exclusive locking
                    // mode, set before WAL: SQLite then keeps the WAL index
                    // in the heap and never maps a `-shm` file (an
                    // unwritable or truncated one ended the process with
                    // SIGBUS). One replica owns the file; a second one's
                    // store stays down ("database is locked").
                    options = options
                        .locking_mode(SqliteLockingMode::Exclusive)
                        .journal_mode(SqliteJournalMode::Wal)
                        .synchronous(SqliteSynchronous::Normal);
                }
                // The statement journal an upsert of many rows keeps (so a
                // failed statement can be undone) lives in memory, not in a
                // temporary file written with a syscall per page.
                options = options.pragma("temp_store", "memory");
                let file = (!memory).then(|| options.get_filename().to_owned());
                let pool = SqlitePoolOptions::new()
                    .max_connections(1)
                    .min_connections(1)
                    .idle_timeout(None)
                    .max_lifetime(None)
                    .acquire_timeout(ACQUIRE_TIMEOUT)
                    .connect_lazy_with(options);
                Ok(Db::Sqlite(pool, file))
            }
            Backend::Postgres { url } => Ok(Db::Postgres(
                PgPoolOptions::new()
                    .max_connections(4)
                    .acquire_timeout(ACQUIRE_TIMEOUT)
                    // Read apart: sqlx's parser logs the values it ignores.
                    .connect_lazy_with(options::postgres(url)?),
            )),
        }
    }

    /// Whether other replicas may write this database (PostgreSQL; a
    /// SQLite file is held by one).
    pub fn is_shared(&self) -> bool {
        matches!(self, Db::Postgres(_))
    }

    /// The SQLite file this store writes, if it is one.
    pub fn file(&self) -> Option<&Path> {
        match self {
            Db::Sqlite(_, file) => file.as_deref(),
            Db::Postgres(_) => None,
        }
    }

    pub async fn migrate(&self) -> Result<(), String> {
        self.migrate_to(i64::MAX).await
    }

    /// Applies the migrations up to `last` (a test starts from an older
    /// schema this way).
    async fn migrate_to(&self, last: i64) -> Result<(), String> {
        let migrations = MIGRATIONS
            .iter()
            .filter(|(version, _, _)| *version <= last)
            .map(|(version, name, sql)| {
                Migration::new(
                    *version,
                    (*name).into(),
                    MigrationType::Simple,
                    sql.into_sql_str(),
                    false,
                )
            })
            .collect();
        let migrator = Migrator::with_migrations(migrations);
        on_pool!(self, pool => migrator.run(pool).await)
            .map_err(|e| format!("migration failed: {e}"))
    }

    /// Writes `batch` in one transaction, multi-row inserts of a few shapes
    /// per table, prepared once and kept (see [`batch::plan`]). Chats come
    /// first, each taking only its owner's updates; then messages and
    /// heads, each landing only in a chat its own tenant owns. A connection whose batch failed (a full disk fails
    /// the commit itself) is closed, never returned to the pool: it may
    /// still sit inside the transaction, seeing its own uncommitted rows and
    /// locking out the others.
    pub async fn write(&self, batch: &[Write]) -> Result<(), sqlx::Error> {
        let planned = batch::plan(batch);
        on_pool!(self, pool => {
            let mut conn = pool.acquire().await?;
            let written: Result<(), sqlx::Error> = async {
                let mut tx = sqlx::Connection::begin(&mut *conn).await?;
                for rows in &planned.chats {
                    // A chat only ever takes its own tenant's updates.
                    let mut insert = QueryBuilder::new(
                        "INSERT INTO chats (id, created_at, updated_at, provider, model, title, tool_calls, messages, tenant, errors, last_error) ",
                    );
                    insert.push_values(rows, |mut row, c| {
                        row.push_bind(&*c.id)
                            .push_bind(c.created_at)
                            .push_bind(c.updated_at)
                            .push_bind(c.provider.as_str())
                            .push_bind(c.model.as_str())
                            .push_bind(c.title.as_str())
                            .push_bind(c.tool_calls)
                            .push_bind(c.messages)
                            .push_bind(&*c.tenant)
                            .push_bind(c.errors)
                            .push_bind(c.last_error.as_str());
                    });
                    insert.push(
                        " ON CONFLICT (id) DO UPDATE SET updated_at = excluded.updated_at, \
                         provider = excluded.provider, model = excluded.model, \
                         title = CASE WHEN chats.title = '' THEN excluded.title ELSE chats.title END, \
                         tool_calls = chats.tool_calls + excluded.tool_calls, \
                         messages = chats.messages + excluded.messages, \
                         errors = chats.errors + excluded.errors, \
                         last_error = CASE WHEN excluded.last_error = '' THEN chats.last_error ELSE excluded.last_error END \
                         WHERE chats.tenant = excluded.tenant",
                    );
                    insert.build().execute(&mut *tx).await?;
                }
                // A message lands only in a chat of its own tenant's (the
                // chats above come first, so a new chat's row is there).
                for rows in &planned.messages {
                    let mut insert = QueryBuilder::new(
                        "INSERT INTO messages (id, chat_id, role, kind, created_at, sequence, message_json, search) \
                         SELECT v.column1, v.column2, v.column3, v.column4, v.column5, v.column6, v.column7, v.column9 FROM (",
                    );
                    insert.push_values(rows, |mut row, m| {
                        row.push_bind(m.id.as_str())
                            .push_bind(&*m.chat_id)
                            .push_bind(m.role)
                            .push_bind(m.kind.as_str())
                            .push_bind(m.created_at)
                            .push_bind(m.sequence)
                            .push_bind(&*m.json)
                            .push_bind(&*m.tenant)
                            .push_bind(&*m.search);
                    });
                    insert.push(
                        ") AS v WHERE EXISTS (SELECT 1 FROM chats WHERE chats.id = v.column2 AND chats.tenant = v.column8) \
                         ON CONFLICT (id) DO NOTHING",
                    );
                    insert.build().execute(&mut *tx).await?;
                }
                // A head leads only to a chat of its own tenant's.
                for rows in &planned.heads {
                    let mut insert = QueryBuilder::new(
                        "INSERT INTO heads (hash, chat_id, len, created_at, tenant) \
                         SELECT v.column1, v.column2, v.column3, v.column4, v.column5 FROM (",
                    );
                    insert.push_values(rows, |mut row, h| {
                        row.push_bind(h.hash.as_str())
                            .push_bind(&*h.chat_id)
                            .push_bind(h.len)
                            .push_bind(h.at)
                            .push_bind(&*h.tenant);
                    });
                    insert.push(
                        ") AS v WHERE EXISTS (SELECT 1 FROM chats WHERE chats.id = v.column2 AND chats.tenant = v.column5) \
                         ON CONFLICT (hash, chat_id) DO NOTHING",
                    );
                    insert.build().execute(&mut *tx).await?;
                }
                for rows in &planned.responses {
                    let mut insert = QueryBuilder::new(
                        "INSERT INTO responses (id, created_at, conversation_json, response_json, tenant, chat_id) ",
                    );
                    insert.push_values(rows, |mut row, r| {
                        row.push_bind(r.id.as_str())
                            .push_bind(r.at)
                            .push_bind(r.conversation.to_string())
                            .push_bind(r.response.to_string())
                            .push_bind(&*r.tenant)
                            .push_bind(&*r.chat_id);
                    });
                    insert.push(" ON CONFLICT (id) DO NOTHING");
                    insert.build().execute(&mut *tx).await?;
                }
                // Usage adds up: one row per hour, tenant, key, provider and model.
                for rows in &planned.usage {
                    let mut insert = QueryBuilder::new(
                        "INSERT INTO usage (hour, tenant, key_id, provider, model, requests, input_tokens, output_tokens, cost_micros, estimated) ",
                    );
                    insert.push_values(rows, |mut row, u| {
                        row.push_bind(u.hour)
                            .push_bind(&*u.tenant)
                            .push_bind(u.key_id.as_str())
                            .push_bind(u.provider.as_str())
                            .push_bind(u.model.as_str())
                            .push_bind(u.requests)
                            .push_bind(u.input_tokens)
                            .push_bind(u.output_tokens)
                            .push_bind(u.cost_micros)
                            .push_bind(u.estimated);
                    });
                    insert.push(
                        " ON CONFLICT (tenant, hour, key_id, provider, model) DO UPDATE SET \
                         requests = usage.requests + excluded.requests, \
                         input_tokens = usage.input_tokens + excluded.input_tokens, \
                         output_tokens = usage.output_tokens + excluded.output_tokens, \
                         cost_micros = usage.cost_micros + excluded.cost_micros, \
                         estimated = usage.estimated + excluded.estimated",
                    );
                    insert.build().execute(&mut *tx).await?;
                }
                for rows in &planned.steps {
                    let mut insert = QueryBuilder::new(
                        "INSERT INTO steps (tenant, call_id, created_at, steps_json) ",
                    );
                    insert.push_values(rows, |mut row, s| {
                        row.push_bind(s.tenant)
                            .push_bind(s.call_id)
                            .push_bind(s.at)
                            .push_bind(&*s.json);
                    });
                    insert.push(" ON CONFLICT (tenant, call_id) DO NOTHING");
                    insert.build().execute(&mut *tx).await?;
                }
                tx.commit().await
            }
            .await;
            if written.is_err() {
                let _ = sqlx::Connection::close(conn.detach()).await;
            }
            written
        })
    }

    /// Claims chat `id` for `tenant` if no one has it yet (one conditional
    /// insert: of two tenants claiming one id at once, exactly one makes
    /// the row), and answers who owns it now.
    pub async fn claim(
        &self,
        id: &str,
        tenant: &str,
        provider: &str,
        model: &str,
        at: i64,
    ) -> Result<Option<String>, sqlx::Error> {
        on_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO chats (id, created_at, updated_at, provider, model, title, tool_calls, messages, tenant) \
                 VALUES ($1, $2, $2, $3, $4, '', 0, 0, $5) ON CONFLICT (id) DO NOTHING",
            )
            .bind(id)
            .bind(at)
            .bind(provider)
            .bind(model)
            .bind(tenant)
            .execute(pool)
            .await?;
            sqlx::query_scalar("SELECT tenant FROM chats WHERE id = $1")
                .bind(id)
                .fetch_optional(pool)
                .await
        })
    }

    /// Chats, newest activity first, as `filter` narrows them.
    pub async fn chats(&self, filter: &ChatFilter) -> Result<Vec<ChatSummary>, sqlx::Error> {
        let (before, before_id) = filter.before.clone().unwrap_or((i64::MAX, String::new()));
        // Each word is searched in the title and in each message's
        // searchable words, lower-cased: `%`, `_` and `\` are escaped for
        // LIKE. A chat matches when every word is found somewhere in it.
        let patterns: Vec<String> = filter
            .words
            .iter()
            .map(|word| {
                let escaped = word
                    .to_lowercase()
                    .replace('\\', "\\\\")
                    .replace('%', "\\%")
                    .replace('_', "\\_");
                format!("%{escaped}%")
            })
            .collect();
        let mut sql = String::from(
            "SELECT id, created_at, updated_at, provider, model, title, tool_calls, messages, tenant, errors, last_error FROM chats \
             WHERE (updated_at < $1 OR (updated_at = $1 AND id < $2)) \
             AND ($3 IS NULL OR tenant = $3) AND ($4 IS NULL OR provider = $4) AND ($5 IS NULL OR model = $5) \
             AND ($6 = 0 OR errors > 0)",
        );
        for n in 7..7 + patterns.len() {
            sql.push_str(&format!(
                " AND (lower(title) LIKE ${n} ESCAPE '\\' OR EXISTS (SELECT 1 FROM messages \
                 WHERE messages.chat_id = chats.id AND messages.search LIKE ${n} ESCAPE '\\'))"
            ));
        }
        sql.push_str(&format!(
            " ORDER BY updated_at DESC, id DESC LIMIT ${}",
            7 + patterns.len()
        ));
        let rows = on_pool!(self, pool => {
            // Audited: only numbered placeholders are formatted into it.
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.as_str()))
            .bind(before)
            .bind(before_id.as_str())
            .bind(filter.tenant.as_deref())
            .bind(filter.provider.as_deref())
            .bind(filter.model.as_deref())
            .bind(i64::from(filter.errors_only));
            for pattern in &patterns {
                query = query.bind(pattern.as_str());
            }
            query
            .bind(filter.limit)
            .fetch_all(pool)
            .await?
            .iter()
            .map(summary)
            .collect::<Result<Vec<_>, sqlx::Error>>()?
        });
        Ok(rows)
    }

    /// A chat (any tenant's: callers check its `tenant`).
    pub async fn chat(&self, id: &str) -> Result<Option<ChatSummary>, sqlx::Error> {
        on_pool!(self, pool => {
            let row = sqlx::query(
                "SELECT id, created_at, updated_at, provider, model, title, tool_calls, messages, tenant, errors, last_error FROM chats WHERE id = $1",
            )
            .bind(id)
            .fetch_optional(pool)
            .await?;
            row.as_ref().map(summary).transpose()
        })
    }

    /// A chat's messages in order.
    pub async fn messages(&self, chat: &str) -> Result<Vec<StoredMessage>, sqlx::Error> {
        on_pool!(self, pool => {
            sqlx::query(
                "SELECT id, role, kind, created_at, sequence, message_json FROM messages \
                 WHERE chat_id = $1 ORDER BY sequence, id",
            )
            .bind(chat)
            .fetch_all(pool)
            .await?
            .iter()
            .map(|row| {
                let json: String = row.try_get("message_json")?;
                Ok(StoredMessage {
                    id: row.try_get("id")?,
                    role: row.try_get("role")?,
                    kind: row.try_get("kind")?,
                    created_at: row.try_get("created_at")?,
                    sequence: row.try_get("sequence")?,
                    message: serde_json::from_str(&json).unwrap_or(Value::String(json)),
                })
            })
            .collect()
        })
    }

    /// Every chat of `tenant`'s that reached one of the states `hashes`,
    /// with how many messages it covers and when it reached it: (hash,
    /// chat, len, at), in one query.
    pub async fn find_heads(
        &self,
        tenant: &str,
        hashes: &[String],
    ) -> Result<Vec<(String, String, i64, i64)>, sqlx::Error> {
        if hashes.is_empty() {
            return Ok(Vec::new());
        }
        let placeholders: Vec<String> = (2..=hashes.len() + 1).map(|i| format!("${i}")).collect();
        let sql = format!(
            "SELECT hash, chat_id, len, created_at FROM heads WHERE tenant = $1 AND hash IN ({})",
            placeholders.join(", ")
        );
        on_pool!(self, pool => {
            // Audited: only numbered placeholders are formatted into it.
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.as_str())).bind(tenant);
            for hash in hashes {
                query = query.bind(hash);
            }
            query
                .fetch_all(pool)
                .await?
                .iter()
                .map(|row| {
                    Ok((
                        row.try_get("hash")?,
                        row.try_get("chat_id")?,
                        row.try_get("len")?,
                        row.try_get("created_at")?,
                    ))
                })
                .collect()
        })
    }

    /// One of `tenant`'s stored responses.
    pub async fn response(&self, tenant: &str, id: &str) -> Result<Option<Kept>, sqlx::Error> {
        on_pool!(self, pool => {
            sqlx::query("SELECT conversation_json, response_json, chat_id FROM responses WHERE id = $1 AND tenant = $2")
                .bind(id)
                .bind(tenant)
                .fetch_optional(pool)
                .await?
                .map(|row| {
                    let conversation: String = row.try_get("conversation_json")?;
                    let response: String = row.try_get("response_json")?;
                    let chat: String = row.try_get("chat_id")?;
                    Ok(Kept {
                        conversation: serde_json::from_str(&conversation).unwrap_or(Value::Null),
                        response: serde_json::from_str(&response).unwrap_or(Value::Null),
                        chat: (!chat.is_empty()).then_some(chat),
                    })
                })
                .transpose()
        })
    }

    /// The steps `tenant` kept under any of `ids`, in one query: each
    /// distinct steps value with the ids it was found under.
    pub async fn steps(
        &self,
        tenant: &str,
        ids: &[String],
    ) -> Result<Vec<(Vec<String>, String)>, sqlx::Error> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let placeholders: Vec<String> = (2..=ids.len() + 1).map(|i| format!("${i}")).collect();
        let sql = format!(
            "SELECT call_id, steps_json FROM steps WHERE tenant = $1 AND call_id IN ({})",
            placeholders.join(", ")
        );
        let rows: Vec<(String, String)> = on_pool!(self, pool => {
            // Audited: only numbered placeholders are formatted into it.
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.as_str())).bind(tenant);
            for id in ids {
                query = query.bind(id);
            }
            query
                .fetch_all(pool)
                .await?
                .iter()
                .map(|row| Ok::<_, sqlx::Error>((row.try_get("call_id")?, row.try_get("steps_json")?)))
                .collect::<Result<_, _>>()?
        });
        let mut found: Vec<(Vec<String>, String)> = Vec::new();
        for (id, json) in rows {
            match found.iter_mut().find(|(_, j)| *j == json) {
                Some((ids, _)) => ids.push(id),
                None => found.push((vec![id], json)),
            }
        }
        Ok(found)
    }

    /// Usage from `from` to `to` (hours, ms since the epoch, `to`
    /// excluded), of `tenant` or of every tenant, summed over what
    /// `group_by` leaves out.
    pub async fn usage(
        &self,
        tenant: Option<&str>,
        from: i64,
        to: i64,
        group_by: &[UsageColumn],
    ) -> Result<Vec<UsageRow>, sqlx::Error> {
        let mut select: String = group_by
            .iter()
            .map(|c| format!("{} AS {}, ", c.expression(), c.column()))
            .collect();
        if group_by.contains(&UsageColumn::Key) {
            // A managed key's name (kept after it is revoked); a key the
            // config holds has none.
            select.push_str(
                "(SELECT name FROM api_keys WHERE api_keys.id = usage.key_id) AS key_name, ",
            );
        }
        // Time first, so a series reads in order.
        let ordered: Vec<&str> = group_by
            .iter()
            .filter(|c| c.is_time())
            .chain(group_by.iter().filter(|c| !c.is_time()))
            .map(|c| c.expression())
            .collect();
        let group = if ordered.is_empty() {
            String::new()
        } else {
            format!(" GROUP BY {0} ORDER BY {0}", ordered.join(", "))
        };
        let filter = if tenant.is_some() {
            " AND tenant = $3"
        } else {
            ""
        };
        let sql = format!(
            "SELECT {select}CAST(SUM(requests) AS BIGINT) AS requests, \
             CAST(SUM(input_tokens) AS BIGINT) AS input_tokens, \
             CAST(SUM(output_tokens) AS BIGINT) AS output_tokens, \
             CAST(SUM(cost_micros) AS BIGINT) AS cost_micros, \
             CAST(SUM(estimated) AS BIGINT) AS estimated \
             FROM usage WHERE hour >= $1 AND hour < $2{filter}{group}"
        );
        let rows = on_pool!(self, pool => {
            // Audited: only fixed column names are formatted into it.
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.as_str())).bind(from).bind(to);
            if let Some(tenant) = tenant {
                query = query.bind(tenant);
            }
            let mut out = Vec::new();
            for row in query.fetch_all(pool).await? {
                let text = |c: UsageColumn| -> Result<Option<String>, sqlx::Error> {
                    if group_by.contains(&c) { row.try_get(c.column()).map(Some) } else { Ok(None) }
                };
                let time = |c: UsageColumn, format: &str| -> Result<Option<String>, sqlx::Error> {
                    if !group_by.contains(&c) {
                        return Ok(None);
                    }
                    let ms: i64 = row.try_get(c.column())?;
                    Ok(chrono::DateTime::from_timestamp_millis(ms).map(|t| t.format(format).to_string()))
                };
                let requests: Option<i64> = row.try_get("requests")?;
                if requests.is_none() {
                    // No row at all: SUM over nothing.
                    continue;
                }
                out.push(UsageRow {
                    day: time(UsageColumn::Day, "%Y-%m-%d")?,
                    hour: time(UsageColumn::Hour, "%Y-%m-%dT%H:00:00Z")?,
                    tenant: text(UsageColumn::Tenant)?,
                    key: text(UsageColumn::Key)?,
                    key_name: if group_by.contains(&UsageColumn::Key) {
                        row.try_get("key_name")?
                    } else {
                        None
                    },
                    provider: text(UsageColumn::Provider)?,
                    model: text(UsageColumn::Model)?,
                    requests: requests.unwrap_or(0),
                    input_tokens: row.try_get::<Option<i64>, _>("input_tokens")?.unwrap_or(0),
                    output_tokens: row.try_get::<Option<i64>, _>("output_tokens")?.unwrap_or(0),
                    cost_micros: row.try_get::<Option<i64>, _>("cost_micros")?.unwrap_or(0),
                    estimated_requests: row.try_get::<Option<i64>, _>("estimated")?.unwrap_or(0),
                });
            }
            out
        });
        Ok(rows)
    }

    /// Keeps a new managed key.
    pub async fn insert_key(&self, key: &KeyRow) -> Result<(), sqlx::Error> {
        on_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO api_keys (id, tenant, name, prefix, key_sha256, policy_json, created_at, updated_at, expires_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8)",
            )
            .bind(&key.id)
            .bind(&key.tenant)
            .bind(&key.name)
            .bind(&key.prefix)
            .bind(&key.sha256)
            .bind(&key.policy)
            .bind(key.created_at)
            .bind(key.expires_at)
            .execute(pool)
            .await?;
        });
        self.notify_keys(&key.id).await
    }

    /// Every managed key, the revoked ones too (a revoked key's refusal
    /// says so), oldest first.
    pub async fn keys(&self) -> Result<Vec<KeyRow>, sqlx::Error> {
        let rows = on_pool!(self, pool => {
            sqlx::query(
                "SELECT id, tenant, name, prefix, key_sha256, policy_json, created_at, expires_at, last_used_at, revoked_at \
                 FROM api_keys ORDER BY created_at, id",
            )
            .fetch_all(pool)
            .await?
            .iter()
            .map(|row| {
                Ok::<_, sqlx::Error>(KeyRow {
                    id: row.try_get("id")?,
                    tenant: row.try_get("tenant")?,
                    name: row.try_get("name")?,
                    prefix: row.try_get("prefix")?,
                    sha256: row.try_get("key_sha256")?,
                    policy: row.try_get("policy_json")?,
                    created_at: row.try_get("created_at")?,
                    expires_at: row.try_get("expires_at")?,
                    last_used_at: row.try_get("last_used_at")?,
                    revoked_at: row.try_get("revoked_at")?,
                })
            })
            .collect::<Result<Vec<_>, _>>()?
        });
        Ok(rows)
    }

    /// Changes a managed key's name, policy and expiry; whether it exists.
    pub async fn update_key(&self, key: &KeyRow, at: i64) -> Result<bool, sqlx::Error> {
        let done = on_pool!(self, pool => {
            sqlx::query(
                "UPDATE api_keys SET name = $2, policy_json = $3, expires_at = $4, updated_at = $5 \
                 WHERE id = $1 AND revoked_at IS NULL",
            )
            .bind(&key.id)
            .bind(&key.name)
            .bind(&key.policy)
            .bind(key.expires_at)
            .bind(at)
            .execute(pool)
            .await?
            .rows_affected()
        });
        if done > 0 {
            self.notify_keys(&key.id).await?;
        }
        Ok(done > 0)
    }

    /// Revokes a managed key; whether it was live.
    pub async fn revoke_key(&self, id: &str, at: i64) -> Result<bool, sqlx::Error> {
        let done = on_pool!(self, pool => {
            sqlx::query("UPDATE api_keys SET revoked_at = $2, updated_at = $2 WHERE id = $1 AND revoked_at IS NULL")
                .bind(id)
                .bind(at)
                .execute(pool)
                .await?
                .rows_affected()
        });
        if done > 0 {
            self.notify_keys(id).await?;
        }
        Ok(done > 0)
    }

    /// Notes when keys were last used (a later time only).
    pub async fn touch_keys(&self, used: &[(String, i64)]) -> Result<(), sqlx::Error> {
        for (id, at) in used {
            on_pool!(self, pool => {
                sqlx::query("UPDATE api_keys SET last_used_at = $2 WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < $2)")
                    .bind(id)
                    .bind(at)
                    .execute(pool)
                    .await?;
            });
        }
        Ok(())
    }

    /// What key `key_id` spent since `since` (ms, an hour's start): micro-dollars and
    /// tokens, from the usage rows.
    pub async fn key_spend(&self, key_id: &str, since: i64) -> Result<(i64, i64), sqlx::Error> {
        self.spend(Spender::Key, key_id, since).await
    }

    /// What tenant `tenant` spent since `since` (ms, an hour's start): micro-dollars
    /// and tokens, from the usage rows.
    pub async fn tenant_spend(&self, tenant: &str, since: i64) -> Result<(i64, i64), sqlx::Error> {
        self.spend(Spender::Tenant, tenant, since).await
    }

    async fn spend(&self, who: Spender, name: &str, since: i64) -> Result<(i64, i64), sqlx::Error> {
        let sql = match who {
            Spender::Key => {
                "SELECT CAST(SUM(cost_micros) AS BIGINT) AS micros, \
                 CAST(SUM(input_tokens + output_tokens) AS BIGINT) AS tokens \
                 FROM usage WHERE key_id = $1 AND hour >= $2"
            }
            Spender::Tenant => {
                "SELECT CAST(SUM(cost_micros) AS BIGINT) AS micros, \
                 CAST(SUM(input_tokens + output_tokens) AS BIGINT) AS tokens \
                 FROM usage WHERE tenant = $1 AND hour >= $2"
            }
        };
        let spent = on_pool!(self, pool => {
            let row = sqlx::query(sql).bind(name).bind(since).fetch_one(pool).await?;
            (
                row.try_get::<Option<i64>, _>("micros")?.unwrap_or(0),
                row.try_get::<Option<i64>, _>("tokens")?.unwrap_or(0),
            )
        });
        Ok(spent)
    }

    /// Tells every replica listening that the keys changed (PostgreSQL;
    /// SQLite has one replica).
    async fn notify_keys(&self, id: &str) -> Result<(), sqlx::Error> {
        if let Db::Postgres(pool) = self {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(KEYS_CHANNEL)
                .bind(id)
                .execute(pool)
                .await?;
        }
        Ok(())
    }

    /// A listener told of every change of the keys (PostgreSQL only).
    pub async fn listen_keys(&self) -> Result<Option<sqlx::postgres::PgListener>, sqlx::Error> {
        match self {
            Db::Postgres(pool) => {
                let mut listener = sqlx::postgres::PgListener::connect_with(pool).await?;
                listener.listen(KEYS_CHANNEL).await?;
                Ok(Some(listener))
            }
            Db::Sqlite(..) => Ok(None),
        }
    }

    pub async fn delete_response(&self, tenant: &str, id: &str) -> Result<bool, sqlx::Error> {
        let done = on_pool!(self, pool => {
            sqlx::query("DELETE FROM responses WHERE id = $1 AND tenant = $2")
                .bind(id)
                .bind(tenant)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(done > 0)
    }

    /// Deletes everything last touched before `cutoff` (ms); rows removed.
    pub async fn purge(
        &self,
        cutoff: i64,
        steps_cutoff: i64,
        usage_cutoff: i64,
    ) -> Result<u64, sqlx::Error> {
        let mut removed = 0;
        for (sql, before) in [
            ("DELETE FROM steps WHERE created_at < $1", steps_cutoff),
            // An hour's row goes once the whole hour is past the cutoff.
            (
                "DELETE FROM usage WHERE hour < $1",
                crate::store::hour_of(usage_cutoff),
            ),
        ] {
            removed += on_pool!(self, pool => {
                sqlx::query(sql).bind(before).execute(pool).await?.rows_affected()
            });
        }
        for sql in [
            "DELETE FROM messages WHERE chat_id IN (SELECT id FROM chats WHERE updated_at < $1)",
            "DELETE FROM heads WHERE chat_id IN (SELECT id FROM chats WHERE updated_at < $1)",
            "DELETE FROM chats WHERE updated_at < $1",
            "DELETE FROM responses WHERE created_at < $1",
        ] {
            removed += on_pool!(self, pool => {
                sqlx::query(sql).bind(cutoff).execute(pool).await?.rows_affected()
            });
        }
        Ok(removed)
    }

    /// Writes a consistent copy of a SQLite store to `path` (`VACUUM INTO`:
    /// the copy is a database of its own, compacted, that `sqlite3` opens);
    /// `Ok(false)` for PostgreSQL, which `pg_dump` copies.
    pub async fn snapshot(&self, path: &str) -> Result<bool, sqlx::Error> {
        match self {
            Db::Sqlite(pool, _) => {
                sqlx::query("VACUUM INTO $1")
                    .bind(path)
                    .execute(pool)
                    .await?;
                Ok(true)
            }
            Db::Postgres(_) => Ok(false),
        }
    }

    pub async fn close(&self) {
        on_pool!(self, pool => pool.close().await);
    }
}

fn summary<R: Row>(row: &R) -> Result<ChatSummary, sqlx::Error>
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    String: for<'a> sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    i64: for<'a> sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    Ok(ChatSummary {
        id: row.try_get("id")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        provider: row.try_get("provider")?,
        model: row.try_get("model")?,
        title: row.try_get("title")?,
        tool_calls: row.try_get("tool_calls")?,
        messages: row.try_get("messages")?,
        tenant: row.try_get("tenant")?,
        errors: row.try_get("errors")?,
        last_error: row.try_get("last_error")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::record::Used;

    const HOUR: i64 = 3_600_000;

    fn used(hour: i64) -> Write {
        Write::Usage(Used {
            hour: hour * HOUR,
            tenant: "team".into(),
            key_id: "key-1".into(),
            provider: "p".into(),
            model: "m".into(),
            requests: 1,
            input_tokens: 10,
            output_tokens: 1,
            cost_micros: 500_000,
            estimated: 0,
        })
    }

    async fn requests(db: &Db) -> i64 {
        let rows = db.usage(None, 0, 100 * HOUR, &[]).await.unwrap();
        rows.iter().map(|r| r.requests).sum()
    }

    #[tokio::test]
    async fn usage_is_summed_per_utc_day_or_hour_with_the_keys_names() {
        let db = Db::open(&Backend::Sqlite {
            url: "sqlite::memory:".into(),
        })
        .unwrap();
        db.migrate().await.unwrap();
        // Day 0 holds hours 10, 11 and 11 again; day 1 hour 30; day 2 hour 50.
        db.write(&[used(10), used(11), used(30), used(50)])
            .await
            .unwrap();
        db.write(&[used(11)]).await.unwrap();
        db.insert_key(&KeyRow {
            id: "key-1".into(),
            tenant: "team".into(),
            name: "ci-bot".into(),
            prefix: "tg-1".into(),
            sha256: "00".into(),
            policy: "{}".into(),
            created_at: 0,
            expires_at: None,
            last_used_at: None,
            revoked_at: None,
        })
        .await
        .unwrap();
        let days = db
            .usage(None, 0, 100 * HOUR, &[UsageColumn::Day, UsageColumn::Key])
            .await
            .unwrap();
        let read: Vec<_> = days
            .iter()
            .map(|r| (r.day.as_deref(), r.requests, r.key_name.as_deref()))
            .collect();
        assert_eq!(
            read,
            [
                (Some("1970-01-01"), 3, Some("ci-bot")),
                (Some("1970-01-02"), 1, Some("ci-bot")),
                (Some("1970-01-03"), 1, Some("ci-bot")),
            ]
        );
        assert!(days.iter().all(|r| r.hour.is_none() && r.tenant.is_none()));
        let hours = db
            .usage(None, 0, 24 * HOUR, &[UsageColumn::Hour])
            .await
            .unwrap();
        let read: Vec<_> = hours
            .iter()
            .map(|r| (r.hour.as_deref(), r.requests, r.key_name.is_none()))
            .collect();
        assert_eq!(
            read,
            [
                (Some("1970-01-01T10:00:00Z"), 1, true),
                (Some("1970-01-01T11:00:00Z"), 2, true),
            ]
        );
    }

    #[tokio::test]
    async fn purge_drops_usage_hours_wholly_past_the_usage_cutoff_and_no_other() {
        let db = Db::open(&Backend::Sqlite {
            url: "sqlite::memory:".into(),
        })
        .unwrap();
        db.migrate().await.unwrap();
        db.write(&[used(10), used(11), used(12)]).await.unwrap();
        assert_eq!(requests(&db).await, 3);
        // The transcript cutoffs far ahead leave usage alone.
        db.purge(1_000 * HOUR, 1_000 * HOUR, 0).await.unwrap();
        assert_eq!(requests(&db).await, 3);
        // A cutoff inside hour 12: hours 10 and 11 are wholly before it.
        db.purge(0, 0, 12 * HOUR + 5).await.unwrap();
        assert_eq!(requests(&db).await, 1);
        db.purge(0, 0, 13 * HOUR).await.unwrap();
        assert_eq!(requests(&db).await, 0);
    }

    /// Schema 8 keeps costs in micro-dollars: the dollars of rows kept
    /// before are rounded to the nearest, and sums are exact.
    #[tokio::test]
    async fn usage_kept_in_dollars_is_migrated_to_micro_dollars() {
        let db = Db::open(&Backend::Sqlite {
            url: "sqlite::memory:".into(),
        })
        .unwrap();
        db.migrate_to(7).await.unwrap();
        let Db::Sqlite(pool, _) = &db else {
            unreachable!()
        };
        for (model, usd) in [("a", 0.001), ("b", 0.005995), ("c", 0.000_000_6)] {
            sqlx::query(
                "INSERT INTO usage (hour, tenant, key_id, provider, model, requests, input_tokens, output_tokens, cost_usd, estimated) \
                 VALUES (0, 'team', 'key-1', 'p', $1, 1, 10, 20, $2, 0)",
            )
            .bind(model)
            .bind(usd)
            .execute(pool)
            .await
            .unwrap();
        }
        db.migrate().await.unwrap();
        let rows = db
            .usage(None, 0, HOUR, &[UsageColumn::Model])
            .await
            .unwrap();
        let micros: Vec<i64> = rows.iter().map(|r| r.cost_micros).collect();
        assert_eq!(micros, [1_000, 5_995, 1]);
        let total = db.usage(None, 0, HOUR, &[]).await.unwrap();
        assert_eq!(total[0].cost_micros, 6_996);
        assert_eq!(
            serde_json::to_value(&total[0]).unwrap()["cost_usd"].to_string(),
            "0.006996"
        );
        // New rows add up in micro-dollars.
        db.write(&[used(0)]).await.unwrap();
        assert_eq!(db.key_spend("key-1", 0).await.unwrap(), (506_996, 101));
    }
}
