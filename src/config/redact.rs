//! Printing the effective config, and URLs in logs, without credentials.
//!
//! Keys never live in the config (only the names of the variables holding
//! them), but other values do carry credentials: header values, a stdio
//! server's environment and its `--token` arguments, URL userinfo and
//! query parameters such as `?api_key=`. [`redacted_toml`] walks the whole
//! config tree once and hides each of them wherever it sits, so a table
//! added later is covered without a line here; [`url`] is the one
//! function that shows a URL, for `check`, `tools` and every log line.

use std::borrow::Cow;

use super::raw::RawConfig;

const REDACTED: &str = "<redacted>";

/// Words that make a name (a query parameter, a command-line flag) look
/// like it holds a credential.
fn looks_secret(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    [
        "key",
        "token",
        "secret",
        "pass",
        "pwd",
        "auth",
        "sig",
        "credential",
        "session",
        "cookie",
    ]
    .iter()
    .any(|needle| name.contains(needle))
}

/// `url` with its userinfo and credential-looking query values hidden:
/// `https://user:pw@host/v1?api_key=k&x=1` shows as
/// `https://<redacted>@host/v1?api_key=<redacted>&x=1`. Anything else is
/// returned as it is.
pub fn url(url: &str) -> Cow<'_, str> {
    let Some(scheme_end) = url.find("://") else {
        return Cow::Borrowed(url);
    };
    let mut out: Option<String> = None;
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    if let Some(at) = rest[..authority_end].rfind('@') {
        let mut shown = url.to_owned();
        shown.replace_range(scheme_end + 3..scheme_end + 3 + at, REDACTED);
        out = Some(shown);
    }
    let current = out.as_deref().unwrap_or(url);
    if let Some(q) = current.find('?') {
        let end = current[q..].find('#').map_or(current.len(), |f| q + f);
        let query = &current[q + 1..end];
        let hidden: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, value)) if looks_secret(name) && !value.is_empty() => {
                    format!("{name}={REDACTED}")
                }
                _ => pair.to_owned(),
            })
            .collect();
        let hidden = hidden.join("&");
        if hidden != query {
            out = Some(format!("{}?{hidden}{}", &current[..q], &current[end..]));
        }
    }
    out.map_or(Cow::Borrowed(url), Cow::Owned)
}

/// `text` (an error message, say) with every URL in it shown by [`url`]:
/// a client library's error can quote the address it failed to reach.
pub fn in_text(text: &str) -> Cow<'_, str> {
    if !text.contains("://") {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(found) = rest.find("://") {
        // The URL starts after the last delimiter before `://`.
        let start = rest[..found]
            .rfind(|c: char| c.is_whitespace() || "\"'(<[{,".contains(c))
            .map_or(0, |i| i + 1);
        let end = rest[found..]
            .find(|c: char| c.is_whitespace() || "\"')>]},".contains(c))
            .map_or(rest.len(), |i| found + i);
        out.push_str(&rest[..start]);
        out.push_str(&url(&rest[start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// The config as TOML with every credential hidden.
pub fn redacted_toml(raw: &RawConfig) -> String {
    let mut tree = match toml::Value::try_from(raw) {
        Ok(tree) => tree,
        Err(e) => return format!("# cannot print config: {e}\n"),
    };
    redact(&mut tree);
    toml::to_string_pretty(&tree).unwrap_or_else(|e| format!("# cannot print config: {e}\n"))
}

/// Hides, anywhere in the tree: every value of a `headers` or `env` table
/// (but `env:NAME` references, which name a variable), the value after a
/// credential-looking flag in a `command`, and the credentials of every
/// URL.
fn redact(value: &mut toml::Value) {
    match value {
        toml::Value::Table(table) => {
            for (key, child) in table.iter_mut() {
                match (key.as_str(), child) {
                    ("headers" | "env", toml::Value::Table(values)) => {
                        for (_, v) in values.iter_mut() {
                            if let toml::Value::String(s) = v
                                && !s.starts_with("env:")
                            {
                                *s = REDACTED.to_owned();
                            }
                        }
                    }
                    ("command", toml::Value::Array(args)) => redact_args(args),
                    (_, child) => redact(child),
                }
            }
        }
        toml::Value::Array(items) => items.iter_mut().for_each(redact),
        toml::Value::String(s) => {
            if let Cow::Owned(shown) = url(s) {
                *s = shown;
            }
        }
        _ => {}
    }
}

/// `--token abc`, `--api-key=abc` and `-p abc` style arguments of a stdio
/// server's command line.
fn redact_args(args: &mut [toml::Value]) {
    let mut hide_next = false;
    for arg in args {
        let toml::Value::String(s) = arg else {
            continue;
        };
        if std::mem::take(&mut hide_next) {
            *s = REDACTED.to_owned();
            continue;
        }
        let Some(flag) = s.strip_prefix('-') else {
            if let Cow::Owned(shown) = url(s) {
                *s = shown;
            }
            continue;
        };
        match flag.split_once('=') {
            Some((name, _)) if looks_secret(name) => {
                *s = format!("{}={REDACTED}", &s[..=name.len()]);
            }
            Some(_) => {}
            None => hide_next = looks_secret(flag),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_userinfo_and_credential_parameters_only() {
        assert_eq!(
            url("https://u:pw@host:1/v1?api_key=k1&x=1#f"),
            "https://<redacted>@host:1/v1?api_key=<redacted>&x=1#f"
        );
        assert_eq!(
            url("postgres://tg:pw@127.0.0.1/db?sslpassword=s&application_name=tg"),
            "postgres://<redacted>@127.0.0.1/db?sslpassword=<redacted>&application_name=tg"
        );
        assert_eq!(
            url("http://127.0.0.1:1/v1?a=b"),
            "http://127.0.0.1:1/v1?a=b"
        );
        assert!(
            matches!(url("http://h/p@q"), Cow::Borrowed(_)),
            "an @ in the path"
        );
        assert_eq!(url("not a url ?token=x"), "not a url ?token=x");
    }

    #[test]
    fn urls_inside_text_are_shown_without_credentials() {
        let e = "error sending request for url (https://u:pw@mcp.example/mcp?token=T1): connection refused";
        assert_eq!(
            in_text(e),
            "error sending request for url (https://<redacted>@mcp.example/mcp?token=<redacted>): connection refused"
        );
        assert!(matches!(in_text("no address here"), Cow::Borrowed(_)));
    }

    /// Every key of a config that can hold a credential, each given a
    /// distinct secret: none of them is printed, and what is not a secret
    /// still is.
    #[test]
    fn check_prints_no_secret_of_any_key() {
        let raw: RawConfig = toml::from_str(
            r#"
            [server]
            listen = "127.0.0.1:8080"
            [server.limits]
            redis_url = "redis://:SECRET-22@127.0.0.1:6379/0"
            [[providers]]
            name = "p"
            base_url = "http://user1:SECRET-01@127.0.0.1:1/v1?api_key=SECRET-02&region=eu"
            headers = { "X-Api-Key" = "SECRET-03", "X-Team" = "SECRET-04", "X-Ref" = "env:TEAM_TOKEN" }
            [[providers]]
            name = "q"
            targets = [
              { base_url = "http://u:SECRET-05@127.0.0.1:1/v1", headers = { "Authorization" = "Bearer SECRET-06" } },
              { base_url = "http://127.0.0.1:2/v1?token=SECRET-07", api_key_env = "KEY_B" },
            ]
            [[mcp_servers]]
            name = "remote"
            url = "https://u:SECRET-08@mcp.example/mcp?access_token=SECRET-09"
            headers = { "Authorization" = "Bearer SECRET-10" }
            [[mcp_servers]]
            name = "local"
            command = ["npx", "server", "--api-key", "SECRET-11", "--token=SECRET-12", "--port", "3"]
            env = { "GITHUB_TOKEN" = "SECRET-13", "LOG" = "SECRET-14" }
            [[http_tools]]
            name = "lookup"
            url = "https://u:SECRET-15@tools.example/lookup?sig=SECRET-16"
            headers = { "X-Anything" = "SECRET-17" }
            [store]
            url = "postgres://toolgate:SECRET-18@127.0.0.1/db?password=SECRET-19"
            [telemetry]
            otlp_endpoint = "https://tenant:SECRET-20@otel.example:4318?key=SECRET-21"
            "#,
        )
        .unwrap();
        let out = redacted_toml(&raw);
        for n in 1..=22 {
            let secret = format!("SECRET-{n:02}");
            assert!(!out.contains(&secret), "{secret} printed:\n{out}");
        }
        for kept in [
            "region=eu",
            "env:TEAM_TOKEN",
            "KEY_B",
            "--port",
            "\"3\"",
            "127.0.0.1:2/v1",
        ] {
            assert!(out.contains(kept), "{kept} hidden:\n{out}");
        }
    }
}
