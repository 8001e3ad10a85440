//! What a request reserves at admission: the most it may use, as far as
//! its body tells before anything is sent. OpenAI counts a request against
//! its token limits the same way, from `max_tokens` and the prompt.
//!
//! The prompt is estimated at four bytes of body a token (JSON framing
//! included, so it errs high, as `upstream::answered` estimates a cut
//! answer), the answer at the client's own limit on output tokens, or the
//! provider's `default_max_tokens` when it sets none.

use serde::Deserialize;

use crate::config::Provider;

/// A request as the limiter's admission reads it.
#[derive(Clone, Copy)]
pub struct Ask<'a> {
    /// The request's body, as the client sent it.
    pub body: &'a [u8],
    /// The provider it is routed to (its pricing, its `default_max_tokens`).
    pub provider: &'a Provider,
}

/// The tokens, and their price, one request holds from its admission until
/// it is settled.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Reserve {
    /// Prompt estimate plus the output limit.
    pub tokens: u64,
    /// Those tokens at the provider's price (0 without one).
    pub usd: f64,
}

/// The output limits of every door: Chat Completions' two, Messages'
/// `max_tokens`, Responses' `max_output_tokens`.
#[derive(Deserialize)]
struct Limits {
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
    max_output_tokens: Option<u64>,
}

/// Bytes of body a prompt token is estimated at.
const BYTES_PER_TOKEN: u64 = 4;

impl Reserve {
    /// What `ask` reserves for `model` (as the client wrote it). A body that
    /// is not JSON, or whose limits are not numbers, reserves the default.
    pub(super) fn of(ask: Ask<'_>, model: &str) -> Reserve {
        let limit = serde_json::from_slice::<Limits>(ask.body)
            .ok()
            .and_then(|l| {
                [l.max_tokens, l.max_completion_tokens, l.max_output_tokens]
                    .into_iter()
                    .flatten()
                    .max()
            })
            .unwrap_or(ask.provider.default_max_tokens);
        let prompt = (ask.body.len() as u64).div_ceil(BYTES_PER_TOKEN);
        Reserve {
            tokens: prompt.saturating_add(limit),
            usd: ask
                .provider
                .pricing
                .price(model)
                .map_or(0.0, |p| p.cost(prompt, limit)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn provider(extra: &str) -> std::sync::Arc<Provider> {
        let toml = format!(
            "[[providers]]\nname = \"p\"\nbase_url = \"http://127.0.0.1:9\"\nmodels = [\"*\"]\n{extra}"
        );
        Config::from_toml(&toml).unwrap().providers[0].clone()
    }

    #[test]
    fn the_largest_output_limit_or_the_providers_default_plus_the_prompt() {
        let p = provider(
            "default_max_tokens = 100\n[providers.pricing]\n\"*\" = { input = 1000000, output = 2000000 }\n",
        );
        let reserve = |body: &str| {
            Reserve::of(
                Ask {
                    body: body.as_bytes(),
                    provider: &p,
                },
                "m",
            )
        };
        // 40 bytes: 10 tokens of prompt.
        let body = r#"{"model":"m","max_tokens":7,"x":"....."}"#;
        assert_eq!(body.len(), 40);
        assert_eq!(
            reserve(body),
            Reserve {
                tokens: 17,
                usd: 10.0 + 14.0
            }
        );
        let both = r#"{"max_tokens":7,"max_completion_tokens":30}"#;
        assert_eq!(reserve(both).tokens, 11 + 30);
        let responses = r#"{"max_output_tokens":50}"#;
        assert_eq!(reserve(responses).tokens, 6 + 50);
        assert_eq!(reserve(r#"{"model":"m"}"#).tokens, 4 + 100);
        assert_eq!(reserve(r#"{"max_tokens":-1}"#).tokens, 5 + 100);
        let unpriced = provider("");
        let r = Reserve::of(
            Ask {
                body: b"{}",
                provider: &unpriced,
            },
            "m",
        );
        assert_eq!(
            r,
            Reserve {
                tokens: 1 + 4096,
                usd: 0.0
            }
        );
    }
}
