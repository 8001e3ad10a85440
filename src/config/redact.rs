//! Printing the effective config without leaking credentials.
//!
//! API keys never live in the config itself (only the *name* of the env var
//! holding one), but extra headers often carry tokens. Any header whose name
//! suggests a credential is printed as `<redacted>`.

use super::raw::RawConfig;

const REDACTED: &str = "<redacted>";

fn looks_secret(header: &str) -> bool {
    let h = header.to_ascii_lowercase();
    [
        "authorization",
        "key",
        "token",
        "secret",
        "password",
        "cookie",
    ]
    .iter()
    .any(|needle| h.contains(needle))
}

fn redact_headers(headers: &mut std::collections::BTreeMap<String, String>) {
    for (name, value) in headers.iter_mut() {
        if looks_secret(name) {
            *value = REDACTED.to_owned();
        }
    }
}

/// `https://user:secret@host/v1` prints as `https://<redacted>@host/v1`.
fn redact_userinfo(url: &mut String) {
    let Some(scheme_end) = url.find("://") else {
        return;
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    if let Some(at) = rest[..authority_end].rfind('@') {
        url.replace_range(scheme_end + 3..scheme_end + 3 + at, REDACTED);
    }
}

pub fn redacted_toml(raw: &RawConfig) -> String {
    let mut copy = raw.clone();
    for provider in &mut copy.providers {
        redact_headers(&mut provider.headers);
        if let Some(url) = &mut provider.base_url {
            redact_userinfo(url);
        }
        for target in &mut provider.targets {
            redact_headers(&mut target.headers);
            if let Some(url) = &mut target.base_url {
                redact_userinfo(url);
            }
        }
    }
    if let Some(telemetry) = &mut copy.telemetry {
        redact_userinfo(&mut telemetry.otlp_endpoint);
    }
    toml::to_string_pretty(&copy).unwrap_or_else(|e| format!("# cannot print config: {e}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_headers_are_redacted_and_others_kept() {
        let raw: RawConfig = toml::from_str(
            r#"
            [[providers]]
            name = "p"
            base_url = "http://127.0.0.1:1/v1"
            headers = { "X-Api-Key" = "sk-123", "X-Team" = "blue" }
            "#,
        )
        .unwrap();
        let out = redacted_toml(&raw);
        assert!(!out.contains("sk-123"), "{out}");
        assert!(out.contains(REDACTED));
        assert!(out.contains("blue"));
    }

    #[test]
    fn targets_print_with_their_secrets_redacted() {
        let raw: RawConfig = toml::from_str(
            r#"
            [[providers]]
            name = "p"
            targets = [
              { base_url = "http://u:pw-1@127.0.0.1:1/v1", headers = { "Authorization" = "Bearer sk-9", "x-pool" = "b" } },
              { base_url = "http://127.0.0.1:2/v1", api_key_env = "KEY_B" },
            ]
            [telemetry]
            otlp_endpoint = "https://tenant:pw-2@otel.example:4318"
            "#,
        )
        .unwrap();
        let out = redacted_toml(&raw);
        assert!(
            !out.contains("sk-9") && !out.contains("pw-1") && !out.contains("pw-2"),
            "{out}"
        );
        assert!(out.contains("http://<redacted>@127.0.0.1:1/v1"), "{out}");
        assert!(out.contains("KEY_B") && out.contains("x-pool"), "{out}");
    }
}
