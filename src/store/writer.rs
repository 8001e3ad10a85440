//! The writer: the only task that writes to the database. It connects and
//! migrates (retrying while the database is down), then writes the queue in
//! batches of whole exchanges, one transaction each. A batch that fails is
//! dropped, counted and logged (at most once per [`LOG_EVERY`]); traffic
//! never waits for it. Chats that lost exchanges get an `error` row
//! (`not_recorded`) once writes succeed again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::metrics as m;
use crate::store::Shared;
use crate::store::db::Db;
use crate::store::file_watch::FileWatch;
use crate::store::record::{ChatUpdate, Kind, Message, Write, now_ms};

/// Exchanges written in one transaction at most.
const BATCH: usize = 256;
/// How often a failing store is logged.
const LOG_EVERY: Duration = Duration::from_secs(10);
/// How often the SQLite file is looked at.
const WATCH_EVERY: Duration = Duration::from_secs(1);
/// How often old transcripts are purged.
const PURGE_EVERY: Duration = Duration::from_secs(3600);

pub async fn run(shared: Arc<Shared>, mut rx: mpsc::Receiver<Vec<Write>>, stop: CancellationToken) {
    let Some(db) = connect(&shared, &stop).await else {
        shared.first_open_ended();
        return;
    };
    let db = shared.db.get_or_init(|| db);
    shared.first_open_ended();
    shared.set_health(None);
    let mut file = db.file().and_then(FileWatch::start);
    let mut lost = || file.as_mut().and_then(|f| f.check().map(str::to_owned));
    let mut units = Vec::with_capacity(BATCH);
    let mut buffer = Vec::new();
    let mut last_log: Option<Instant> = None;
    let mut next_purge = Instant::now();
    let mut stopping = false;
    loop {
        if Instant::now() >= next_purge {
            next_purge = Instant::now() + PURGE_EVERY;
            let cutoff = now_ms() - shared.config.retention.as_millis() as i64;
            let steps_cutoff = now_ms() - crate::tools::steps::KEPT_FOR.as_millis() as i64;
            let usage_cutoff = now_ms() - shared.config.usage_retention.as_millis() as i64;
            match db.purge(cutoff, steps_cutoff, usage_cutoff).await {
                Ok(0) => {}
                Ok(rows) => tracing::info!(rows, "store: purged rows past retention"),
                Err(e) => tracing::warn!(error = %e, "store: purge failed"),
            }
        }
        let received = if stopping {
            rx.recv_many(&mut units, BATCH).await
        } else {
            tokio::select! {
                n = rx.recv_many(&mut units, BATCH) => n,
                () = stop.cancelled() => {
                    // No new rows; what is queued is still written.
                    rx.close();
                    stopping = true;
                    continue;
                }
                () = tokio::time::sleep(WATCH_EVERY) => {
                    if let Some(reason) = lost() {
                        shared.set_health(Some(reason));
                    }
                    continue;
                }
            }
        };
        if received == 0 {
            break;
        }
        metrics::gauge!(m::STORE_QUEUE_DEPTH).set(rx.len() as f64);
        buffer.extend(units.drain(..).flatten());
        let started = Instant::now();
        match db.write(&buffer).await {
            Ok(()) => {
                metrics::histogram!(m::STORE_WRITE_SECONDS).record(started.elapsed().as_secs_f64());
                shared.set_health(lost());
                for write in &buffer {
                    if let Write::Response(r) = write {
                        shared.settled(&r.id);
                    }
                }
                mark_missed(&shared, db).await;
            }
            Err(e) => {
                shared.dropped(&buffer);
                let error = e.to_string();
                if last_log.is_none_or(|t| t.elapsed() >= LOG_EVERY) {
                    last_log = Some(Instant::now());
                    tracing::warn!(rows = buffer.len(), error = %error, "store: a batch could not be written and was dropped");
                }
                shared.set_health(Some(error));
            }
        }
        shared.written.notify_waiters();
        buffer.clear();
    }
    db.close().await;
}

/// Opens and migrates, retrying with backoff; `None` when stopped first.
async fn connect(shared: &Shared, stop: &CancellationToken) -> Option<Db> {
    let mut backoff = Duration::from_millis(250);
    loop {
        let opened = Db::open(&shared.config.backend);
        let result = match opened {
            Ok(db) => match db.migrate().await {
                // Up once its migrations ran, not at its first write.
                Ok(()) => return Some(db),
                Err(e) => e,
            },
            Err(e) => e,
        };
        tracing::warn!(error = %result, retry_in_ms = backoff.as_millis() as u64, "store: cannot open the database");
        shared.set_health(Some(result));
        shared.first_open_ended();
        tokio::select! {
            () = stop.cancelled() => return None,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}

/// Gives each chat that lost exchanges an `error` row saying so (and the
/// chat's row, which the lost exchange may have been the first to write).
async fn mark_missed(shared: &Shared, db: &Db) {
    let missed = shared.take_missed();
    if missed.is_empty() {
        return;
    }
    let mut rows = Vec::with_capacity(missed.len() * 2);
    for (chat, lost) in &missed {
        let text = format!(
            "{lost} exchange(s) of this chat were not recorded: the store's queue was full or its database failed."
        );
        rows.push(Write::Message(Arc::new(Message::new(
            chat.id.clone(),
            chat.tenant.clone(),
            "assistant",
            Kind::Error,
            serde_json::json!({"text": text, "code": "not_recorded"}),
        ))));
        rows.push(Write::Chat(ChatUpdate {
            at: now_ms(),
            messages: 1,
            errors: 1,
            last_error: "not_recorded".into(),
            ..chat.clone()
        }));
    }
    if db.write(&rows).await.is_err() {
        shared.missed_again(missed);
    }
}
