//! `[store]` validated: the database to connect to, what to record, how
//! long to keep it, and the paths to redact.

use std::time::Duration;

use super::ConfigError;
use super::raw::{RawStore, Record};

#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub backend: Backend,
    pub record: Record,
    pub retention: Duration,
    /// How long usage rows are kept: at least a budget's longest period,
    /// whose spend is read from them.
    pub usage_retention: Duration,
    /// How long linking may wait for the database (`link_wait_ms`).
    pub link_wait: Duration,
    pub redact: Vec<RedactPath>,
    /// Live views open at once, in all and with one key.
    pub live_views: LiveViewLimits,
}

/// `max_live_views` and `max_live_views_per_key`, both at least 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveViewLimits {
    pub total: usize,
    pub per_key: usize,
}

/// Where the store lives. The URL is complete (a PostgreSQL password from
/// `password_env` already in it), so it is never printed.
#[derive(Debug, Clone)]
pub enum Backend {
    Sqlite { url: String },
    Postgres { url: String },
}

/// A step of a redaction path below one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Key(String),
    /// `[*]`
    Every,
    Index(usize),
}

/// `$.messages[…]…`: which messages (`None`: every one) and the path
/// inside each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedactPath {
    pub message: Option<usize>,
    pub steps: Vec<Step>,
}

/// The longest `link_wait_ms`: a request waits at most this long to learn
/// which chat it continues.
const LINK_WAIT_MAX_MS: u32 = 10_000;
/// The shortest usage retention: a budget's longest period (30 days) and
/// the hour its rows may straddle.
const USAGE_RETENTION_MIN_DAYS: u32 = 31;

pub fn store(raw: &RawStore) -> Result<StoreConfig, ConfigError> {
    let backend = backend(raw)?;
    if raw.retention_days == 0 {
        return Err(ConfigError::new(
            "store.retention_days",
            "must be at least 1",
        ));
    }
    if raw.usage_retention_days < USAGE_RETENTION_MIN_DAYS {
        return Err(ConfigError::new(
            "store.usage_retention_days",
            format!(
                "must be at least {USAGE_RETENTION_MIN_DAYS}: a key's spend this budget period (up to 30 days) is read from the usage rows"
            ),
        ));
    }
    if !(1..=LINK_WAIT_MAX_MS).contains(&raw.link_wait_ms) {
        return Err(ConfigError::new(
            "store.link_wait_ms",
            format!("must be 1 to {LINK_WAIT_MAX_MS}"),
        ));
    }
    for (key, value) in [
        ("store.max_live_views", raw.max_live_views),
        ("store.max_live_views_per_key", raw.max_live_views_per_key),
    ] {
        if value == 0 {
            return Err(ConfigError::new(key, "must be at least 1"));
        }
    }
    let redact = raw
        .redact
        .iter()
        .enumerate()
        .map(|(i, p)| {
            parse_path(p).map_err(|why| ConfigError::new(format!("store.redact[{i}]"), why))
        })
        .collect::<Result<_, _>>()?;
    Ok(StoreConfig {
        backend,
        record: raw.record,
        retention: Duration::from_secs(u64::from(raw.retention_days) * 86_400),
        usage_retention: Duration::from_secs(u64::from(raw.usage_retention_days) * 86_400),
        link_wait: Duration::from_millis(u64::from(raw.link_wait_ms)),
        redact,
        live_views: LiveViewLimits {
            total: raw.max_live_views,
            per_key: raw.max_live_views_per_key.min(raw.max_live_views),
        },
    })
}

fn backend(raw: &RawStore) -> Result<Backend, ConfigError> {
    let url = raw.url.trim();
    if url.starts_with("sqlite:") {
        if raw.password_env.is_some() {
            return Err(ConfigError::new(
                "store.password_env",
                "only a postgres:// store has a password",
            ));
        }
        return Ok(Backend::Sqlite {
            url: url.to_owned(),
        });
    }
    let Some(rest) = url
        .strip_prefix("postgres://")
        .or_else(|| url.strip_prefix("postgresql://"))
    else {
        return Err(ConfigError::new(
            "store.url",
            format!(
                "{:?} is neither sqlite:… nor postgres://…",
                super::redact::url(url)
            ),
        ));
    };
    let Some(var) = &raw.password_env else {
        return Ok(Backend::Postgres {
            url: url.to_owned(),
        });
    };
    let password = std::env::var(var).map_err(|_| {
        ConfigError::new(
            "store.password_env",
            format!("the environment variable {var} is not set"),
        )
    })?;
    let Some((user, host)) = rest.split_once('@') else {
        return Err(ConfigError::new(
            "store.url",
            "a password needs a user: postgres://user@host/db",
        ));
    };
    if user.contains(':') {
        return Err(ConfigError::new(
            "store.url",
            "the URL has a password already; keep it in password_env only",
        ));
    }
    Ok(Backend::Postgres {
        url: format!("postgres://{user}:{}@{host}", percent_encode(&password)),
    })
}

fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Parses `$.messages[*].content`, `$.messages[2].tool_calls[*].function.arguments` …
fn parse_path(path: &str) -> Result<RedactPath, String> {
    let rest = path
        .strip_prefix("$.messages")
        .ok_or("a path starts with `$.messages` (only messages are recorded)")?;
    let mut steps = parse_steps(rest)?;
    let message = match steps.first() {
        Some(Step::Every) => None,
        Some(Step::Index(i)) => Some(*i),
        _ => return Err("`$.messages` is followed by `[*]` or `[N]`".into()),
    };
    steps.remove(0);
    Ok(RedactPath { message, steps })
}

fn parse_steps(mut rest: &str) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let key = &after[..end];
            if key.is_empty() {
                return Err("an empty key".into());
            }
            steps.push(Step::Key(key.to_owned()));
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let end = after.find(']').ok_or("an unclosed `[`")?;
            let inner = &after[..end];
            steps.push(if inner == "*" {
                Step::Every
            } else {
                Step::Index(
                    inner
                        .parse()
                        .map_err(|_| format!("`[{inner}]` is neither `[*]` nor an index"))?,
                )
            });
            rest = &after[end + 1..];
        } else {
            return Err(format!("unexpected {rest:?}"));
        }
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(
            parse_path("$.messages[*].content").unwrap(),
            RedactPath {
                message: None,
                steps: vec![Step::Key("content".into())]
            }
        );
        assert_eq!(
            parse_path("$.messages[2].tool_calls[*].function.arguments").unwrap(),
            RedactPath {
                message: Some(2),
                steps: vec![
                    Step::Key("tool_calls".into()),
                    Step::Every,
                    Step::Key("function".into()),
                    Step::Key("arguments".into())
                ]
            }
        );
        for bad in [
            "$.tools",
            "$.messages.content",
            "$.messages[x]",
            "$.messages[*]..a",
        ] {
            assert!(parse_path(bad).is_err(), "{bad}");
        }
    }

    /// `[store]` at `url` with the defaults.
    fn raw_store(url: &str) -> RawStore {
        RawStore {
            url: url.into(),
            password_env: None,
            record: Record::Tools,
            retention_days: 30,
            usage_retention_days: 400,
            link_wait_ms: 100,
            redact: vec![],
            max_live_views: 1000,
            max_live_views_per_key: 16,
        }
    }

    #[test]
    fn urls() {
        let raw = raw_store;
        assert!(matches!(
            store(&raw("sqlite::memory:")).unwrap().backend,
            Backend::Sqlite { .. }
        ));
        assert!(matches!(
            store(&raw("postgres://u@h/db")).unwrap().backend,
            Backend::Postgres { .. }
        ));
        assert_eq!(store(&raw("mysql://x")).unwrap_err().path, "store.url");
        let mut with_password = raw("postgres://u@h:5432/db");
        with_password.password_env = Some("PATH".into());
        let Backend::Postgres { url } = store(&with_password).unwrap().backend else {
            unreachable!()
        };
        assert!(url.starts_with("postgres://u:") && url.ends_with("@h:5432/db"));
    }

    #[test]
    fn link_wait_is_bounded() {
        let raw = |ms: u32| RawStore {
            link_wait_ms: ms,
            ..raw_store("sqlite::memory:")
        };
        assert_eq!(
            store(&raw(250)).unwrap().link_wait,
            Duration::from_millis(250)
        );
        for bad in [0, LINK_WAIT_MAX_MS + 1] {
            assert_eq!(store(&raw(bad)).unwrap_err().path, "store.link_wait_ms");
        }
    }

    #[test]
    fn usage_outlives_a_budget_period() {
        let raw = |days: u32| RawStore {
            usage_retention_days: days,
            ..raw_store("sqlite::memory:")
        };
        assert_eq!(
            store(&raw(31)).unwrap().usage_retention,
            Duration::from_secs(31 * 86_400)
        );
        let refused = store(&raw(30)).unwrap_err();
        assert_eq!(refused.path, "store.usage_retention_days");
        assert!(refused.to_string().contains("at least 31"), "{refused}");
    }
}
