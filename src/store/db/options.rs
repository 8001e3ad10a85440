//! A PostgreSQL store URL read into sqlx's options without its query values
//! reaching a log line.
//!
//! sqlx's parser logs a parameter it does not know, value and all, at
//! `WARN` (`ignoring unrecognized connect parameter key=sslpassword
//! value=…`), and reading `~/.pgpass` logs a malformed line whole. The URL
//! is read here under a subscriber of its own that keeps only each event's
//! message and parameter name, and those are logged again as toolgate's
//! own warnings: the parameter's name stays visible, its value never does,
//! whatever sqlx version logs what.

use std::str::FromStr;
use std::sync::{Arc, Mutex};

use sqlx::postgres::PgConnectOptions;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};

/// `url` as sqlx's options; what sqlx logged while reading it is logged
/// again without values.
pub fn postgres(url: &str) -> Result<PgConnectOptions, String> {
    let heard = Heard::default();
    let parsed =
        tracing::subscriber::with_default(heard.clone(), || PgConnectOptions::from_str(url));
    let heard = std::mem::take(&mut *heard.lock());
    for said in heard {
        match said.parameter {
            Some(parameter) => tracing::warn!(
                %parameter,
                "store URL: {} (its value is not logged)",
                said.message
            ),
            None => tracing::warn!("store URL: {}", said.message),
        }
    }
    parsed.map_err(|e| format!("invalid PostgreSQL URL: {e}"))
}

/// One event sqlx logged: its message and the name of the parameter it
/// was about. Every other field (the value, a pgpass line) is dropped.
#[derive(Default)]
struct Said {
    message: String,
    parameter: Option<String>,
}

impl Visit for Said {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "key" => self.parameter = Some(format!("{value:?}")),
            _ => {}
        }
    }
}

/// The subscriber the URL is read under: it keeps warnings and errors and
/// asks for nothing else, so callsites of lower levels stay disabled for
/// the process's own subscriber.
#[derive(Clone, Default)]
struct Heard(Arc<Mutex<Vec<Said>>>);

impl Heard {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Said>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Subscriber for Heard {
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        if self.enabled(meta) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, meta: &Metadata<'_>) -> bool {
        meta.is_event() && *meta.level() <= Level::WARN
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::WARN)
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut said = Said::default();
        event.record(&mut said);
        self.lock().push(said);
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What reaches the process's subscriber while the URL is read.
    #[derive(Clone, Default)]
    struct Log(Arc<Mutex<String>>);

    impl Subscriber for Log {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            struct All<'a>(&'a mut String);
            impl Visit for All<'_> {
                fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
                    self.0.push_str(&format!(" {}={value:?}", field.name()));
                }
            }
            let mut line = String::new();
            event.record(&mut All(&mut line));
            let mut log = self.0.lock().unwrap();
            log.push_str(&line);
            log.push('\n');
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    #[test]
    fn an_unknown_parameter_is_named_and_its_value_never_logged() {
        let log = Log::default();
        let url = "postgres://tg@127.0.0.1:1/db?sslpassword=SSL-SECRET-1&sslmode=disable";
        let options = tracing::subscriber::with_default(log.clone(), || postgres(url)).unwrap();
        assert_eq!(options.get_database(), Some("db"));
        let logged = log.0.lock().unwrap().clone();
        assert!(!logged.contains("SSL-SECRET-1"), "{logged}");
        assert!(
            logged.contains("sslpassword"),
            "the parameter is named: {logged}"
        );
    }

    #[test]
    fn a_bad_url_is_an_error_that_quotes_no_value() {
        let e = postgres("postgres://tg@127.0.0.1:1/db?port=x").unwrap_err();
        assert!(e.starts_with("invalid PostgreSQL URL"), "{e}");
    }
}
