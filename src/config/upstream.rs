//! A provider's upstream targets, retry policy and health checks, validated.
//!
//! `base_url` (or a `demo` table) is one target; `targets = [...]` lists
//! several. Either way a provider ends with at least one [`UpstreamTarget`],
//! at most [`MAX_TARGETS`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use http::header::{HeaderMap, HeaderName, HeaderValue};

use super::raw::{self, Api, RawDemo};
use super::{ConfigError, DemoConfig, Target, http_target};

/// Most targets per provider (a request's tried targets fit one `u64`).
pub const MAX_TARGETS: usize = 64;
/// Largest `weight`: the weighted rotation is `sum(weights)` entries long.
pub const MAX_WEIGHT: u32 = 100;
/// Most attempts one request may make.
pub const MAX_ATTEMPTS: u32 = 10;

/// One upstream a provider sends to.
#[derive(Debug, Clone)]
pub struct UpstreamTarget {
    /// Its `name`, or its index: a metric label, never a URL.
    pub label: Arc<str>,
    pub endpoint: Target,
    pub weight: u32,
    /// `Authorization` (or `x-api-key`) sent instead of the client's.
    pub authorization: Option<HeaderValue>,
    /// The provider's headers, then the target's own.
    pub headers: HeaderMap,
    /// What a reload compares to keep this target's health: its URL (or
    /// `demo`) and its label.
    pub identity: String,
}

/// `[providers.retry]`.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    pub attempts: u32,
    pub backoff: Duration,
    pub max_backoff: Duration,
    pub max_retry_after: Duration,
    pub on: RetryOn,
}

/// Which failures `[providers.retry].on` retries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetryOn {
    pub connect: bool,
    pub timeout: bool,
    pub protocol: bool,
    /// Sorted HTTP statuses.
    pub statuses: Vec<u16>,
}

impl RetryOn {
    pub fn status(&self, status: u16) -> bool {
        self.statuses.binary_search(&status).is_ok()
    }
}

/// `[providers.health]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthPolicy {
    /// Consecutive failures that eject a target; `None`: never.
    pub failures_to_eject: Option<u32>,
    pub eject_for: Duration,
}

/// The targets of a provider: `base_url`/`demo`, or `targets`.
pub fn targets(
    path: &str,
    raw: &raw::RawProvider,
    authorization: Option<&HeaderValue>,
    headers: &HeaderMap,
) -> Result<Vec<UpstreamTarget>, ConfigError> {
    let single = raw.base_url.is_some() || raw.demo.is_some();
    if single && !raw.targets.is_empty() {
        return Err(ConfigError::new(
            format!("{path}.targets"),
            "a provider has either `targets` or one `base_url` (or `demo` table), not both",
        ));
    }
    if !single {
        if raw.targets.is_empty() {
            return Err(ConfigError::new(
                format!("{path}.base_url"),
                "missing required key (or `targets`, or a `demo` table for the built-in model)",
            ));
        }
        if raw.targets.len() > MAX_TARGETS {
            return Err(ConfigError::new(
                format!("{path}.targets"),
                format!("at most {MAX_TARGETS} targets"),
            ));
        }
        let mut out: Vec<UpstreamTarget> = Vec::with_capacity(raw.targets.len());
        for (i, t) in raw.targets.iter().enumerate() {
            let at = format!("{path}.targets[{i}]");
            let target = target(&at, i, t, raw.api, authorization, headers)?;
            if out.iter().any(|o| o.label == target.label) {
                return Err(ConfigError::new(
                    format!("{at}.name"),
                    format!("duplicate target name {:?}", &*target.label),
                ));
            }
            out.push(target);
        }
        return Ok(out);
    }
    let (endpoint, basic) = endpoint(
        path,
        raw.base_url.as_deref(),
        raw.demo.as_ref(),
        "a provider has either `base_url` or a `demo` table, not both",
    )?;
    Ok(vec![UpstreamTarget {
        label: Arc::from("0"),
        identity: identity(&endpoint, raw.base_url.as_deref(), "0"),
        endpoint,
        weight: 1,
        authorization: credential(path, authorization, basic)?,
        headers: headers.clone(),
    }])
}

fn target(
    at: &str,
    index: usize,
    raw: &raw::RawTarget,
    api: Api,
    authorization: Option<&HeaderValue>,
    provider_headers: &HeaderMap,
) -> Result<UpstreamTarget, ConfigError> {
    let label = match &raw.name {
        Some(name) => {
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            {
                return Err(ConfigError::new(
                    format!("{at}.name"),
                    "must be non-empty ASCII letters, digits, '-', '_' or '.' (it is a metric label)",
                ));
            }
            name.clone()
        }
        None => index.to_string(),
    };
    if raw.weight == 0 || raw.weight > MAX_WEIGHT {
        return Err(ConfigError::new(
            format!("{at}.weight"),
            format!("must be from 1 to {MAX_WEIGHT}"),
        ));
    }
    let (endpoint, basic) = endpoint(
        at,
        raw.base_url.as_deref(),
        raw.demo.as_ref(),
        "a target has either `base_url` or a `demo` table, not both",
    )?;
    let authorization = match &raw.api_key_env {
        Some(var) => Some(key(&format!("{at}.api_key_env"), var, api)?),
        None => authorization.cloned(),
    };
    let authorization = credential(at, authorization.as_ref(), basic)?;
    let mut headers = provider_headers.clone();
    add_headers(at, &raw.headers, &mut headers)?;
    Ok(UpstreamTarget {
        identity: identity(&endpoint, raw.base_url.as_deref(), &label),
        label: Arc::from(label),
        endpoint,
        weight: raw.weight,
        authorization,
        headers,
    })
}

fn identity(endpoint: &Target, url: Option<&str>, label: &str) -> String {
    match endpoint {
        Target::Http(_) => format!("{label} {}", url.unwrap_or_default()),
        Target::Demo(_) => format!("{label} demo"),
    }
}

/// The target, and the `Authorization` its URL's userinfo stood for.
fn endpoint(
    path: &str,
    base_url: Option<&str>,
    demo: Option<&RawDemo>,
    both: &str,
) -> Result<(Target, Option<HeaderValue>), ConfigError> {
    match (base_url, demo) {
        (Some(url), None) => {
            let (target, basic) = http_target(&format!("{path}.base_url"), url)?;
            Ok((Target::Http(target), basic))
        }
        (None, Some(demo)) => {
            if demo.chunk_chars == 0 {
                return Err(ConfigError::new(
                    format!("{path}.demo.chunk_chars"),
                    "must be at least 1",
                ));
            }
            let demo = DemoConfig {
                chunk_chars: demo.chunk_chars,
                chunk_delay: Duration::from_millis(demo.chunk_delay_ms),
            };
            Ok((Target::Demo(demo), None))
        }
        (Some(_), Some(_)) => Err(ConfigError::new(format!("{path}.demo"), both)),
        (None, None) => Err(ConfigError::new(
            format!("{path}.base_url"),
            "missing required key (or a `demo` table for the built-in model)",
        )),
    }
}

/// The credential a target sends: its `api_key_env`'s (or the provider's),
/// or its URL's userinfo; both at once is an error.
fn credential(
    path: &str,
    key: Option<&HeaderValue>,
    basic: Option<HeaderValue>,
) -> Result<Option<HeaderValue>, ConfigError> {
    match (key, basic) {
        (Some(_), Some(_)) => Err(ConfigError::new(
            format!("{path}.base_url"),
            "carries credentials (user:password@) and the provider has `api_key_env` too: keep one",
        )),
        (key, basic) => Ok(key.cloned().or(basic)),
    }
}

/// The upstream credential read from `var`: a bearer token, or Anthropic's bare key.
pub fn key(key_path: &str, var: &str, api: Api) -> Result<HeaderValue, ConfigError> {
    let key = std::env::var(var).map_err(|_| {
        ConfigError::new(key_path, format!("environment variable {var} is not set"))
    })?;
    // Anthropic takes its key as `x-api-key` (see `upstream`).
    let value = if api == Api::Anthropic {
        key.trim().to_owned()
    } else {
        format!("Bearer {}", key.trim())
    };
    let mut value = HeaderValue::try_from(value).map_err(|_| {
        ConfigError::new(
            key_path,
            format!("{var} holds characters not allowed in a header"),
        )
    })?;
    value.set_sensitive(true);
    Ok(value)
}

pub fn add_headers(
    path: &str,
    raw: &BTreeMap<String, String>,
    headers: &mut HeaderMap,
) -> Result<(), ConfigError> {
    for (k, v) in raw {
        let key_path = format!("{path}.headers.{k}");
        let name = HeaderName::try_from(k.as_str())
            .map_err(|_| ConfigError::new(&key_path, "not a valid header name"))?;
        let value = HeaderValue::try_from(v.as_str())
            .map_err(|_| ConfigError::new(&key_path, "not a valid header value"))?;
        headers.insert(name, value);
    }
    Ok(())
}

pub fn retry(path: &str, raw: &raw::RawRetry, targets: usize) -> Result<RetryPolicy, ConfigError> {
    let attempts = match raw.attempts {
        Some(n) if n == 0 || n > MAX_ATTEMPTS => {
            return Err(ConfigError::new(
                format!("{path}.attempts"),
                format!("must be from 1 to {MAX_ATTEMPTS}"),
            ));
        }
        Some(n) => n,
        None => targets.clamp(1, 3) as u32,
    };
    if raw.max_backoff_ms < raw.backoff_ms {
        return Err(ConfigError::new(
            format!("{path}.max_backoff_ms"),
            "must be at least backoff_ms",
        ));
    }
    let max_retry_after = raw.max_retry_after_secs;
    if !(max_retry_after.is_finite() && (0.0..1e6).contains(&max_retry_after)) {
        return Err(ConfigError::new(
            format!("{path}.max_retry_after_secs"),
            "must be a number of seconds, 0 or more",
        ));
    }
    let mut on = RetryOn::default();
    for (i, item) in raw.on.iter().enumerate() {
        match item.as_str() {
            "connect" => on.connect = true,
            "timeout" => on.timeout = true,
            "protocol" => on.protocol = true,
            status => match status.parse::<u16>() {
                Ok(code) if (400..=599).contains(&code) => on.statuses.push(code),
                _ => {
                    return Err(ConfigError::new(
                        format!("{path}.on[{i}]"),
                        format!(
                            "{status:?} is not \"connect\", \"timeout\", \"protocol\" or an HTTP status from 400 to 599"
                        ),
                    ));
                }
            },
        }
    }
    on.statuses.sort_unstable();
    on.statuses.dedup();
    Ok(RetryPolicy {
        attempts,
        backoff: Duration::from_millis(raw.backoff_ms),
        max_backoff: Duration::from_millis(raw.max_backoff_ms),
        max_retry_after: Duration::from_secs_f64(max_retry_after),
        on,
    })
}

pub fn health(path: &str, raw: &raw::RawHealth) -> Result<HealthPolicy, ConfigError> {
    Ok(HealthPolicy {
        failures_to_eject: (raw.failures_to_eject > 0).then_some(raw.failures_to_eject),
        eject_for: super::secs(&format!("{path}.eject_secs"), raw.eject_secs)?,
    })
}

/// Checks every provider's `failover` list: configured providers only, each
/// once, not itself, each offering the gateway tools the provider offers
/// (a model that calls one of them through a provider that does not run it
/// would hand the call's text to the client), and no cycle through the
/// lists.
pub fn check_failover(providers: &[raw::RawProvider]) -> Result<(), ConfigError> {
    let index = |name: &str| providers.iter().position(|p| p.name == name);
    for (i, p) in providers.iter().enumerate() {
        for (j, name) in p.failover.iter().enumerate() {
            let path = format!("providers[{i}].failover[{j}]");
            if p.failover[..j].contains(name) {
                return Err(ConfigError::new(path, format!("{name:?} is listed twice")));
            }
            if let Some(k) = index(name) {
                let missing: Vec<&str> = p
                    .tools
                    .gateway_tools
                    .iter()
                    .filter(|t| !providers[k].tools.gateway_tools.contains(t))
                    .map(String::as_str)
                    .collect();
                if !missing.is_empty() {
                    return Err(ConfigError::new(
                        path,
                        format!(
                            "`{name}` does not offer gateway tools `{}` offers ({}): its model could call them and nothing would run them; give `{name}` the same `gateway_tools`",
                            p.name,
                            missing.join(", ")
                        ),
                    ));
                }
            }
            match index(name) {
                None => {
                    return Err(ConfigError::new(
                        path,
                        format!("names no configured provider: {name:?}"),
                    ));
                }
                Some(k) if k == i => {
                    return Err(ConfigError::new(
                        path,
                        "a provider cannot fail over to itself",
                    ));
                }
                Some(_) => {}
            }
        }
    }
    // Depth-first search for a cycle: 0 unvisited, 1 on the stack, 2 done.
    fn visit(
        i: usize,
        providers: &[raw::RawProvider],
        state: &mut [u8],
        stack: &mut Vec<usize>,
    ) -> Option<Vec<usize>> {
        state[i] = 1;
        stack.push(i);
        for name in &providers[i].failover {
            let k = providers.iter().position(|p| &p.name == name)?;
            match state[k] {
                1 => {
                    let from = stack.iter().position(|&s| s == k).unwrap_or(0);
                    let mut cycle = stack[from..].to_vec();
                    cycle.push(k);
                    return Some(cycle);
                }
                0 => {
                    if let Some(cycle) = visit(k, providers, state, stack) {
                        return Some(cycle);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state[i] = 2;
        None
    }
    let mut state = vec![0u8; providers.len()];
    for i in 0..providers.len() {
        if state[i] == 0
            && let Some(cycle) = visit(i, providers, &mut state, &mut Vec::new())
        {
            let names: Vec<&str> = cycle.iter().map(|&k| providers[k].name.as_str()).collect();
            return Err(ConfigError::new(
                format!("providers[{}].failover", cycle[0]),
                format!("failover lists form a cycle: {}", names.join(" -> ")),
            ));
        }
    }
    Ok(())
}
