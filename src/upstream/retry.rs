//! What one attempt's outcome means for the next: whether to retry, and
//! how long to wait first. Pure; [`super::Upstreams::send`] does the IO.

use std::borrow::Cow;
use std::time::Duration;

use http::HeaderMap;
use http::header::RETRY_AFTER;

use crate::config::RetryPolicy;

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A response head, with its status.
    Answered(u16),
    Connect,
    Timeout,
    Protocol,
}

impl Outcome {
    /// Whether `retry.on` names it: a retry may follow, and it counts
    /// against the target's health.
    pub fn is_failure(self, policy: &RetryPolicy) -> bool {
        match self {
            Outcome::Answered(status) => policy.on.status(status),
            Outcome::Connect => policy.on.connect,
            Outcome::Timeout => policy.on.timeout,
            Outcome::Protocol => policy.on.protocol,
        }
    }

    /// The `outcome` label of `toolgate_upstream_attempts_total`: `ok`,
    /// `connect`, `timeout`, `protocol`, or a status `retry.on` names.
    pub fn label(self, policy: &RetryPolicy) -> Cow<'static, str> {
        match self {
            Outcome::Answered(status) if policy.on.status(status) => status.to_string().into(),
            Outcome::Answered(_) => "ok".into(),
            Outcome::Connect => "connect".into(),
            Outcome::Timeout => "timeout".into(),
            Outcome::Protocol => "protocol".into(),
        }
    }
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Try again after waiting this long.
    Retry(Duration),
    /// Give up: the client gets this attempt's answer (or error).
    Stop,
}

/// The wait before retry number `retry` (1 for the second attempt):
/// `backoff` doubled per retry, capped, with "equal jitter" (half fixed,
/// half random, from `unit` in [0, 1)) so clients that failed together do
/// not retry together.
pub fn backoff(policy: &RetryPolicy, retry: u32, unit: f64) -> Duration {
    let doubled = policy
        .backoff
        .saturating_mul(1u32 << retry.saturating_sub(1).min(20));
    let capped = doubled.min(policy.max_backoff);
    capped / 2 + capped.mul_f64(unit.clamp(0.0, 1.0) / 2.0)
}

/// The decision after a failed attempt (`attempt` counts from 1), given
/// where the next attempt would go: `Same` target (no other is left),
/// a target this request has not `Tried` yet, or one it has. Only a retry
/// to the same target honours its `Retry-After`, and one longer than
/// `max_retry_after` ends the retries; a target not tried yet is asked at
/// once; any other retry waits the backoff.
pub fn next(
    policy: &RetryPolicy,
    attempt: u32,
    retry_after: Option<Duration>,
    to: To,
    unit: f64,
) -> Next {
    if attempt >= policy.attempts {
        return Next::Stop;
    }
    let wait = backoff(policy, attempt, unit);
    match (to, retry_after) {
        (To::Same, Some(after)) if after > policy.max_retry_after => Next::Stop,
        (To::Same, Some(after)) => Next::Retry(after.max(wait)),
        (To::Untried, _) => Next::Retry(Duration::ZERO),
        _ => Next::Retry(wait),
    }
}

/// Where a retry would go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum To {
    /// The target that just failed.
    Same,
    /// Another target this request has not tried.
    Untried,
    /// Another target this request already tried.
    Tried,
}

/// `Retry-After` as seconds or an HTTP date (`now` is the current time as
/// seconds since the epoch).
pub fn retry_after(headers: &HeaderMap, now: i64) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let date = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    Some(Duration::from_secs(
        u64::try_from(date.timestamp() - now).unwrap_or(0),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::upstream::RetryOn;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            attempts: 3,
            backoff: Duration::from_millis(50),
            max_backoff: Duration::from_millis(2000),
            max_retry_after: Duration::from_secs(10),
            on: RetryOn {
                connect: true,
                timeout: true,
                protocol: false,
                statuses: vec![429, 500, 502, 503, 504],
            },
        }
    }

    #[test]
    fn backoff_doubles_with_jitter_and_stops_at_the_cap() {
        let p = policy();
        assert_eq!(backoff(&p, 1, 0.0), Duration::from_millis(25));
        assert_eq!(backoff(&p, 1, 0.999_999).as_millis(), 49);
        assert_eq!(backoff(&p, 2, 0.0), Duration::from_millis(50));
        assert_eq!(backoff(&p, 3, 0.0), Duration::from_millis(100));
        assert_eq!(backoff(&p, 30, 0.0), Duration::from_millis(1000));
        assert_eq!(backoff(&p, 30, 0.999_999).as_millis(), 1999);
    }

    #[test]
    fn retry_after_delays_only_a_retry_to_the_same_target() {
        let p = policy();
        let after = Some(Duration::from_secs(2));
        assert_eq!(
            next(&p, 1, after, To::Same, 0.0),
            Next::Retry(Duration::from_secs(2))
        );
        assert_eq!(
            next(&p, 1, None, To::Same, 0.0),
            Next::Retry(Duration::from_millis(25))
        );
        // Another target: at once if this request has not tried it, else after the backoff.
        assert_eq!(
            next(&p, 1, after, To::Untried, 0.0),
            Next::Retry(Duration::ZERO)
        );
        assert_eq!(
            next(&p, 2, after, To::Tried, 0.0),
            Next::Retry(Duration::from_millis(50))
        );
        // Too long to wait for: give up rather than hold the client.
        let long = Some(Duration::from_secs(60));
        assert_eq!(next(&p, 1, long, To::Same, 0.0), Next::Stop);
        assert_eq!(
            next(&p, 1, long, To::Untried, 0.0),
            Next::Retry(Duration::ZERO)
        );
        // The attempts are spent.
        assert_eq!(next(&p, 3, None, To::Untried, 0.0), Next::Stop);
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, "7".parse().unwrap());
        assert_eq!(retry_after(&h, 0), Some(Duration::from_secs(7)));
        h.insert(
            RETRY_AFTER,
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(
            retry_after(&h, 1_445_412_470),
            Some(Duration::from_secs(10))
        );
        assert_eq!(retry_after(&h, 1_445_412_490), Some(Duration::ZERO));
        h.insert(RETRY_AFTER, "soon".parse().unwrap());
        assert_eq!(retry_after(&h, 0), None);
    }

    #[test]
    fn outcomes_named_in_retry_on_are_failures_with_their_labels() {
        let p = policy();
        assert!(Outcome::Answered(503).is_failure(&p));
        assert!(!Outcome::Answered(400).is_failure(&p));
        assert!(!Outcome::Protocol.is_failure(&p));
        assert_eq!(Outcome::Answered(503).label(&p), "503");
        assert_eq!(Outcome::Answered(429).label(&p), "429");
        assert_eq!(Outcome::Answered(404).label(&p), "ok");
        assert_eq!(Outcome::Answered(200).label(&p), "ok");
        assert_eq!(Outcome::Connect.label(&p), "connect");
    }
}
