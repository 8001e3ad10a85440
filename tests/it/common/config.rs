//! `TestConfig`: the TOML a test's gateway reads, built section by section.
//!
//! It starts from a fast `[server]` section (port 0, short timeouts); extra
//! `[server]` lines always land inside that section, each provider's extra
//! lines inside its own `[[providers]]` table, and everything else follows
//! verbatim in the order it was added.

use super::{Mock, TestGateway};

/// The `[server]` section every test gateway starts from.
const FAST_SERVER: &str = "[server]\nlisten = \"127.0.0.1:0\"\nfirst_byte_timeout_secs = 2\nstream_idle_timeout_secs = 2\nshutdown_grace_secs = 5\n";

/// `models` for a provider that takes every model.
const ANY_MODEL: &str = "[\"*\"]";

#[derive(Clone, Debug)]
pub struct TestConfig {
    server: String,
    rest: String,
}

impl Default for TestConfig {
    fn default() -> Self {
        TestConfig::new()
    }
}

impl TestConfig {
    /// The fast `[server]` section and nothing else.
    pub fn new() -> TestConfig {
        TestConfig {
            server: FAST_SERVER.to_owned(),
            rest: String::new(),
        }
    }

    /// More `[server]` keys (`"max_body_bytes = 1024"`); they stay in
    /// `[server]` whatever was added before.
    pub fn server(mut self, lines: &str) -> TestConfig {
        push_lines(&mut self.server, lines);
        self
    }

    /// One `[[providers]]` table: `name`, `base_url`, `models` (a TOML
    /// array, e.g. `r#"["gpt-*"]"#`), then `extra` lines, which may open the
    /// provider's own tables (`[providers.tools]`) after its plain keys.
    pub fn provider(mut self, name: &str, url: &str, models: &str, extra: &str) -> TestConfig {
        self.rest
            .push_str(&super::provider_toml(name, url, models, extra));
        self
    }

    /// The usual provider: `up`, at `url`, for every model.
    pub fn up(self, url: &str, extra: &str) -> TestConfig {
        self.provider("up", url, ANY_MODEL, extra)
    }

    /// Provider `up` at `url` for model `m`, tools in `mode`, offering
    /// `gateway_tools`; `tools_extra` are more `[providers.tools]` keys.
    pub fn agent(
        mut self,
        url: &str,
        mode: &str,
        gateway_tools: &[&str],
        tools_extra: &str,
    ) -> TestConfig {
        self.rest.push_str(&super::agent::provider(
            url,
            mode,
            gateway_tools,
            tools_extra,
        ));
        self
    }

    /// The built-in demo model as provider `demo` (no upstream); `extra`
    /// lines go inside its `[providers.demo]` table and may open more of
    /// the provider's tables after that.
    pub fn demo(mut self, extra: &str) -> TestConfig {
        self.rest
            .push_str("[[providers]]\nname = \"demo\"\nmodels = [\"demo\"]\n[providers.demo]\n");
        push_lines(&mut self.rest, extra);
        self
    }

    /// Any other TOML, verbatim (`[store]`, `[[http_tools]]`, a provider
    /// written by hand).
    pub fn raw(mut self, toml: &str) -> TestConfig {
        push_lines(&mut self.rest, toml);
        self
    }

    pub fn toml(&self) -> String {
        format!("{}{}", self.server, self.rest)
    }

    /// A gateway serving this config.
    pub async fn start(&self) -> TestGateway {
        TestGateway::start(&self.toml()).await
    }
}

/// `lines` appended to `out`, ending with a line break.
fn push_lines(out: &mut String, lines: &str) {
    out.push_str(lines);
    if !lines.is_empty() && !lines.ends_with('\n') {
        out.push('\n');
    }
}

/// A gateway whose one provider, `up`, takes every model to `mock` with
/// tools in `mode`; `tools_extra` are more `[providers.tools]` keys.
pub async fn tools_gateway(mock: &Mock, mode: &str, tools_extra: &str) -> TestGateway {
    TestConfig::new()
        .up(
            &mock.url(),
            &format!("[providers.tools]\nmode = \"{mode}\"\n{tools_extra}"),
        )
        .start()
        .await
}

/// A gateway on the embedded default config: model `demo`, natural mode.
pub async fn demo_gateway() -> TestGateway {
    TestGateway::start(toolgate::config::EMBEDDED_DEFAULT).await
}
