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

pub fn redacted_toml(raw: &RawConfig) -> String {
    let mut copy = raw.clone();
    for provider in &mut copy.providers {
        for (name, value) in provider.headers.iter_mut() {
            if looks_secret(name) {
                *value = REDACTED.to_owned();
            }
        }
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
}
