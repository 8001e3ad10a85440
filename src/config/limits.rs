//! What a tenant may use and spend (`limits`, `budget` on a
//! `[[server.auth.keys]]` entry), where the counters live
//! (`[server.limits]`), and what a provider's tokens cost
//! (`[providers.pricing]`), validated.

use std::num::{NonZeroU32, NonZeroU64};
use std::time::Duration;

use globset::{Glob, GlobMatcher};

use super::ConfigError;
use super::raw::limits::{RawBudget, RawLimits, RawPrice, RawServerLimits};

/// A tenant's limits and budget; `None` fields do not limit.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Quota {
    pub requests_per_minute: Option<NonZeroU32>,
    pub tokens_per_minute: Option<NonZeroU64>,
    pub max_concurrent_requests: Option<NonZeroU32>,
    pub budget: Option<Budget>,
}

impl Quota {
    /// Whether anything is limited (a tenant without limits costs no check).
    pub fn is_limited(&self) -> bool {
        *self != Quota::default()
    }

    /// Whether the upstream's token counts are needed to enforce it.
    pub fn counts_tokens(&self) -> bool {
        self.tokens_per_minute.is_some() || self.budget.is_some()
    }
}

/// A spending cap per period.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    pub amount: Amount,
    /// Periods start at every `period_days`-th UTC midnight since 1970-01-01.
    pub period_days: NonZeroU32,
}

/// What a budget counts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Amount {
    /// US dollars, priced by the provider's `pricing`.
    Usd(f64),
    /// Input plus output tokens.
    Tokens(u64),
}

/// Validates a key entry's `limits` and `budget` (`path` names the entry).
pub fn quota(
    path: &str,
    limits: Option<&RawLimits>,
    budget: Option<&RawBudget>,
) -> Result<Quota, ConfigError> {
    let mut quota = Quota::default();
    if let Some(limits) = limits {
        let positive = |key: &str, v: Option<u64>| -> Result<Option<u64>, ConfigError> {
            match v {
                Some(0) => Err(ConfigError::new(
                    format!("{path}.limits.{key}"),
                    "must be at least 1 (leave it out for no limit)",
                )),
                other => Ok(other),
            }
        };
        let small = |key: &str, v: Option<u64>| -> Result<Option<NonZeroU32>, ConfigError> {
            positive(key, v)?
                .map(|n| {
                    u32::try_from(n)
                        .ok()
                        .and_then(NonZeroU32::new)
                        .ok_or_else(|| {
                            ConfigError::new(format!("{path}.limits.{key}"), "is too large")
                        })
                })
                .transpose()
        };
        quota.requests_per_minute = small("requests_per_minute", limits.requests_per_minute)?;
        quota.max_concurrent_requests =
            small("max_concurrent_requests", limits.max_concurrent_requests)?;
        quota.tokens_per_minute =
            positive("tokens_per_minute", limits.tokens_per_minute)?.and_then(NonZeroU64::new);
    }
    if let Some(budget) = budget {
        let amount = match (budget.usd, budget.tokens) {
            (Some(usd), None) if usd.is_finite() && usd > 0.0 => Amount::Usd(usd),
            (None, Some(tokens)) if tokens > 0 => Amount::Tokens(tokens),
            (Some(_), Some(_)) | (None, None) => {
                return Err(ConfigError::new(
                    format!("{path}.budget"),
                    "takes one of `usd` or `tokens`",
                ));
            }
            _ => {
                return Err(ConfigError::new(
                    format!("{path}.budget"),
                    "must be a positive amount",
                ));
            }
        };
        let period_days = budget
            .period
            .strip_suffix('d')
            .and_then(|n| n.parse::<u32>().ok())
            .filter(|&n| n <= 366)
            .and_then(NonZeroU32::new)
            .ok_or_else(|| {
                ConfigError::new(
                    format!("{path}.budget.period"),
                    format!(
                        "must be a number of days such as \"1d\", \"7d\" or \"30d\", not {:?}",
                        budget.period
                    ),
                )
            })?;
        quota.budget = Some(Budget {
            amount,
            period_days,
        });
    }
    Ok(quota)
}

/// `[server.limits]`.
#[derive(Debug, Clone, PartialEq)]
pub struct LimiterConfig {
    /// `None`: each replica counts in its own memory.
    pub redis_url: Option<String>,
    pub on_redis_error: OnRedisError,
    /// How long a check waits for Redis before `on_redis_error` applies.
    pub redis_timeout: Duration,
}

impl Default for LimiterConfig {
    fn default() -> Self {
        LimiterConfig {
            redis_url: None,
            on_redis_error: OnRedisError::Allow,
            redis_timeout: Duration::from_millis(DEFAULT_REDIS_TIMEOUT_MS),
        }
    }
}

/// `server.limits.redis_timeout_ms` when not set.
pub const DEFAULT_REDIS_TIMEOUT_MS: u64 = 25;

/// What a request gets while Redis cannot answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnRedisError {
    /// Served, and counted in `toolgate_limiter_errors_total`.
    Allow,
    /// `503`.
    Deny,
}

/// Validates `[server.limits]`.
pub fn limiter(raw: Option<&RawServerLimits>) -> Result<LimiterConfig, ConfigError> {
    let Some(raw) = raw else {
        return Ok(LimiterConfig::default());
    };
    let on_redis_error = match raw.on_redis_error.as_deref() {
        None | Some("allow") => OnRedisError::Allow,
        Some("deny") => OnRedisError::Deny,
        Some(other) => {
            return Err(ConfigError::new(
                "server.limits.on_redis_error",
                format!("must be \"allow\" or \"deny\", not {other:?}"),
            ));
        }
    };
    if let Some(url) = &raw.redis_url {
        let plain = url.starts_with("redis://") || url.starts_with("rediss://");
        if let Err(e) = redis::Client::open(url.as_str())
            .map(drop)
            .map_err(|e| e.to_string())
            .and_then(|()| {
                plain
                    .then_some(())
                    .ok_or_else(|| "not a redis:// URL".to_owned())
            })
        {
            return Err(ConfigError::new(
                "server.limits.redis_url",
                format!("{e}: {:?}", super::redact::url(url)),
            ));
        }
    }
    let redis_timeout = match raw.redis_timeout_ms {
        Some(0) => {
            return Err(ConfigError::new(
                "server.limits.redis_timeout_ms",
                "must be at least 1",
            ));
        }
        Some(ms) => Duration::from_millis(ms),
        None => Duration::from_millis(DEFAULT_REDIS_TIMEOUT_MS),
    };
    Ok(LimiterConfig {
        redis_url: raw.redis_url.clone(),
        on_redis_error,
        redis_timeout,
    })
}

/// `[providers.pricing]`: the first glob (in the file's order) matching the
/// model the client asked for gives the price.
#[derive(Debug, Clone, Default)]
pub struct Pricing {
    rules: Vec<(GlobMatcher, Price)>,
}

/// USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    pub input: f64,
    pub output: f64,
}

impl Price {
    /// The cost of these tokens in USD.
    pub fn cost(&self, input: u64, output: u64) -> f64 {
        (input as f64 * self.input + output as f64 * self.output) / 1e6
    }

    /// The cost of these tokens in whole micro-dollars, rounded to the
    /// nearest (half up). A price in USD per million tokens is micro-dollars
    /// per token: it is taken to its sixth decimal (pico-dollars per token),
    /// and the sum is worked out in integers.
    pub fn cost_micros(&self, input: u64, output: u64) -> u64 {
        let pico = |per_million: f64| (per_million * 1e6).round() as u128;
        let total = u128::from(input) * pico(self.input) + u128::from(output) * pico(self.output);
        u64::try_from((total + 500_000) / 1_000_000).unwrap_or(u64::MAX)
    }
}

impl Pricing {
    /// The price of `model`, when a glob matches it.
    pub fn price(&self, model: &str) -> Option<Price> {
        self.rules
            .iter()
            .find(|(glob, _)| glob.is_match(model))
            .map(|(_, price)| *price)
    }

    /// Whether any price is set.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

/// Validates a provider's pricing, `entries` in the file's order.
pub fn pricing(path: &str, entries: &[(String, RawPrice)]) -> Result<Pricing, ConfigError> {
    let mut rules = Vec::with_capacity(entries.len());
    for (pattern, price) in entries {
        let key = format!("{path}.pricing.{pattern:?}");
        let glob = Glob::new(pattern)
            .map_err(|e| ConfigError::new(&key, format!("not a glob: {e}")))?
            .compile_matcher();
        for (which, v) in [("input", price.input), ("output", price.output)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(ConfigError::new(
                    format!("{key}.{which}"),
                    "must be a price of 0 or more (USD per million tokens)",
                ));
            }
        }
        rules.push((
            glob,
            Price {
                input: price.input,
                output: price.output,
            },
        ));
    }
    Ok(Pricing { rules })
}

/// `default_max_tokens` when a provider does not set it: what many
/// upstreams answer at most when the client sets no limit, and a reservation
/// a budget of a few dollars can carry.
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

/// Validates a provider's `default_max_tokens`.
pub fn default_max_tokens(path: &str, raw: Option<u64>) -> Result<u64, ConfigError> {
    match raw {
        None => Ok(DEFAULT_MAX_TOKENS),
        Some(0) => Err(ConfigError::new(
            format!("{path}.default_max_tokens"),
            "must be at least 1",
        )),
        Some(n) => Ok(n),
    }
}

/// A budget in USD counts only what `pricing` prices: name the providers
/// whose answers it would not count.
pub fn budget_warnings(
    auth: &super::Auth,
    providers: &[std::sync::Arc<super::Provider>],
) -> Vec<String> {
    let unpriced: Vec<&str> = providers
        .iter()
        .filter(|p| p.pricing.is_empty())
        .map(|p| p.name.as_str())
        .collect();
    if unpriced.is_empty() {
        return Vec::new();
    }
    auth.tenant_list()
        .filter(|t| t.quota.budget.is_some_and(|b| matches!(b.amount, Amount::Usd(_))))
        .map(|t| {
            format!(
                "tenant `{}` has a budget in USD, but providers {} have no [providers.pricing]: their answers cost it nothing",
                t.name,
                unpriced.join(", ")
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_glob_in_the_files_order_prices_the_model() {
        let price = |i, o| RawPrice {
            input: i,
            output: o,
        };
        let p = pricing(
            "providers[0]",
            &[
                ("gpt-4o-mini*".into(), price(0.15, 0.6)),
                ("gpt-4o*".into(), price(2.5, 10.0)),
                ("*".into(), price(1.0, 3.0)),
            ],
        )
        .unwrap();
        assert_eq!(p.price("gpt-4o-mini-2024").unwrap().input, 0.15);
        assert_eq!(p.price("gpt-4o").unwrap().input, 2.5);
        assert_eq!(p.price("other").unwrap().output, 3.0);
        let cost = p.price("gpt-4o-mini").unwrap().cost(1_000_000, 500_000);
        assert!((cost - 0.45).abs() < 1e-12, "{cost}");
        let mini = p.price("gpt-4o-mini").unwrap();
        assert_eq!(mini.cost_micros(1_000_000, 500_000), 450_000);
        // 0.15 micro-dollars a token: 1,234 input and 567 output tokens are
        // 185.1 + 340.2 = 525.3 micro-dollars, rounded to 525.
        assert_eq!(mini.cost_micros(1_234, 567), 525);
        assert_eq!(mini.cost_micros(3, 0), 0);
        assert_eq!(mini.cost_micros(4, 0), 1);
        let tiny = Price {
            input: 0.000_001,
            output: 0.0,
        };
        assert_eq!(tiny.cost_micros(500_000, 0), 1);
        let bad = pricing("p", &[("*".into(), price(-1.0, 0.0))]).unwrap_err();
        assert!(bad.to_string().contains("p.pricing.\"*\".input"), "{bad}");
    }

    #[test]
    fn limits_and_budgets_refuse_what_cannot_be_enforced() {
        let limits = RawLimits {
            requests_per_minute: Some(0),
            ..RawLimits::default()
        };
        let e = quota("k", Some(&limits), None).unwrap_err().to_string();
        assert!(e.contains("k.limits.requests_per_minute"), "{e}");
        let budget = |usd, tokens, period: &str| RawBudget {
            usd,
            tokens,
            period: period.into(),
        };
        let both = quota("k", None, Some(&budget(Some(1.0), Some(5), "1d"))).unwrap_err();
        assert!(both.to_string().contains("one of"), "{both}");
        let period = quota("k", None, Some(&budget(Some(1.0), None, "1w"))).unwrap_err();
        assert!(period.to_string().contains("k.budget.period"), "{period}");
        let ok = quota("k", None, Some(&budget(None, Some(5000), "30d"))).unwrap();
        assert_eq!(ok.budget.unwrap().period_days.get(), 30);
        assert!(ok.is_limited() && ok.counts_tokens());
        assert!(!Quota::default().is_limited());
    }

    #[test]
    fn a_request_without_max_tokens_reserves_the_providers_default() {
        assert_eq!(default_max_tokens("p", None).unwrap(), DEFAULT_MAX_TOKENS);
        assert_eq!(default_max_tokens("p", Some(30)).unwrap(), 30);
        let e = default_max_tokens("providers[0]", Some(0)).unwrap_err();
        assert!(
            e.to_string().contains("providers[0].default_max_tokens"),
            "{e}"
        );
    }
}
