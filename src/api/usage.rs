//! `GET /toolgate/api/usage`: what tenants used, from the usage rows the
//! store keeps per hour, key, provider and model. An admin key reads every
//! tenant's (or one, with `tenant=`); a client key its own tenant's.
//!
//! - `from`, `to`: RFC 3339 times, rounded to their hours, `to` excluded;
//!   or `YYYY-MM-DD` dates, whole UTC days with `to` included (as a billing
//!   page reads them: `from=2026-11-29&to=2026-11-29` is that one day).
//!   Default: the 30 days up to now.
//! - `group_by`: a comma-separated list of `day` or `hour` (UTC, as
//!   `2026-11-29` or `2026-11-29T13:00:00Z`; rows in time order), `tenant`,
//!   `key` (with the managed key's `key_name`), `provider`, `model`
//!   (default: tenant, key, provider and model); a field not grouped by is
//!   `null`.

use std::sync::Arc;

use http::Response;
use serde_json::json;

use super::viewer::Viewer;
use crate::body::Body;
use crate::error::GatewayError;
use crate::store::{Store, StoreError, UsageColumn};

/// How far back `from` goes when not given.
const DEFAULT_DAYS: i64 = 30;

pub async fn handle(
    store: &Store,
    viewer: &Viewer,
    query: Option<&str>,
) -> Result<Response<Body>, GatewayError> {
    let param = |name: &str| super::param(query, name);
    let now = chrono::Utc::now().timestamp_millis();
    let to = param("to")
        .map(|v| time("to", &v, Edge::End))
        .transpose()?
        .unwrap_or(now);
    let from = param("from")
        .map(|v| time("from", &v, Edge::Start))
        .transpose()?
        .unwrap_or(to - DEFAULT_DAYS * 86_400_000);
    if from >= to {
        return Err(GatewayError::bad_request(
            "`from` must be before `to`",
            Some("from"),
        ));
    }
    let group_by = match param("group_by") {
        None => vec![
            UsageColumn::Tenant,
            UsageColumn::Key,
            UsageColumn::Provider,
            UsageColumn::Model,
        ],
        Some(list) => {
            let mut columns = Vec::new();
            for word in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
                let column = UsageColumn::parse(word).ok_or_else(|| {
                    GatewayError::bad_request(
                        format!(
                            "`group_by` takes day, hour, tenant, key, provider and model, not {word:?}"
                        ),
                        Some("group_by"),
                    )
                })?;
                if !columns.contains(&column) {
                    columns.push(column);
                }
            }
            columns
        }
    };
    let asked = param("tenant");
    let tenant: Option<Arc<str>> = match viewer {
        Viewer::Admin => asked.map(Arc::from),
        Viewer::Tenant(own) => match asked {
            Some(other) if *other != **own => {
                return Err(GatewayError::Forbidden(
                    "`tenant` filters usage for admin keys only; this key sees its own".into(),
                ));
            }
            _ => Some(own.clone()),
        },
    };
    let data = store
        .usage(tenant, from, to, group_by)
        .await
        .map_err(|e: StoreError| GatewayError::StoreUnavailable(e.to_string()))?;
    Ok(super::json(&json!({"data": data})))
}

/// A time parameter: RFC 3339, or a date at UTC midnight; ms since the epoch.
/// Which end of the range a time is: a date as the end takes its whole day.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Edge {
    Start,
    End,
}

/// `value` in milliseconds since the epoch: an RFC 3339 time as it is, a
/// date at the start of its day (`Start`) or of the next (`End`).
fn time(name: &str, value: &str, edge: Edge) -> Result<i64, GatewayError> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(value) {
        return Ok(t.timestamp_millis());
    }
    if let Ok(date) = chrono::NaiveDate::parse_from_str(value, "%Y-%m-%d") {
        let day = match edge {
            Edge::Start => Some(date),
            Edge::End => date.succ_opt(),
        };
        if let Some(t) = day.and_then(|d| d.and_hms_opt(0, 0, 0)) {
            return Ok(t.and_utc().timestamp_millis());
        }
    }
    Err(GatewayError::bad_request(
        format!("`{name}` must be an RFC 3339 time or a YYYY-MM-DD date, not {value:?}"),
        Some(name),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_whole_days_and_times_are_as_written() {
        let day = 86_400_000;
        let from = time("from", "2026-11-29", Edge::Start).unwrap();
        let to = time("to", "2026-11-29", Edge::End).unwrap();
        assert_eq!(to - from, day);
        assert_eq!(
            from,
            time("from", "2026-11-29T00:00:00Z", Edge::Start).unwrap()
        );
        // A time is where it says, whichever end it is.
        let noon = time("to", "2026-11-29T12:00:00Z", Edge::End).unwrap();
        assert_eq!(noon - from, day / 2);
        assert!(time("to", "29/11/2026", Edge::End).is_err());
    }
}
