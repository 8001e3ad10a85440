use super::*;

const MINIMAL: &str = r#"
[[providers]]
name = "local"
base_url = "http://127.0.0.1:9/v1/"
models = ["llama*"]
"#;

#[test]
fn defaults_fill_the_server_table() {
    let c = Config::from_toml(MINIMAL).unwrap();
    assert_eq!(c.server.listen, "127.0.0.1:8080".parse().unwrap());
    // `workers = 0` (the default): one per core the process may use.
    assert_eq!(
        Some(c.server.workers),
        std::thread::available_parallelism().ok()
    );
    let two = Config::from_toml(&format!("[server]\nworkers = 2\n{MINIMAL}")).unwrap();
    assert_eq!(two.server.workers.get(), 2);
    let p = &c.providers[0];
    let Target::Http(t) = &p.targets[0].endpoint else {
        panic!("http target")
    };
    assert_eq!(t.base_path, "/v1");
    assert_eq!(p.tools.mode, Mode::Passthrough);
    assert!(p.models.is_match("llama3"));
}

#[test]
fn unknown_key_is_named_with_its_path() {
    let err = Config::from_toml("[server]\nlisten = \"127.0.0.1:1\"\nlistn = 3\n").unwrap_err();
    assert_eq!(err.path, "server.listn", "{err}");
    let err = Config::from_toml(&format!(
        "{MINIMAL}\n[providers.tools]\nmdoe = \"natural\"\n"
    ))
    .unwrap_err();
    assert_eq!(err.path, "providers[0].tools.mdoe", "{err}");
}

#[test]
fn bad_values_name_their_key() {
    let cases = [
        ("[server]\nlisten = \"nope\"", "server.listen"),
        // An empty or truncated file: no providers, every model would be 404.
        ("", "providers"),
        ("[server]\nlisten = \"127.0.0.1:1\"", "providers"),
        (
            "[server]\nbody_read_timeout_secs = 0\n[[providers]]\nname = \"a\"\nbase_url = \"http://x\"",
            "server.body_read_timeout_secs",
        ),
        (
            "[[providers]]\nname = \"a\"\nbase_url = \"ftp://x\"",
            "providers[0].base_url",
        ),
        ("[[providers]]\nname = \"a\"", "providers[0].base_url"),
        (
            "[[providers]]\nname = \"a/b\"\nbase_url = \"http://x\"",
            "providers[0].name",
        ),
        (
            "[[providers]]\nname = \"a\"\nbase_url = \"http://x\"\nmodels = [\"[\"]",
            "providers[0].models[0]",
        ),
        (
            "[[providers]]\nname = \"a\"\nbase_url = \"http://x\"\n[[providers]]\nname = \"a\"\nbase_url = \"http://y\"",
            "providers[1].name",
        ),
        (
            "[[providers]]\nname = \"a\"\nbase_url = \"http://x\"\n[providers.tools]\nmode = \"natural\"\nfallback = \"nobody/m\"\non_invalid = \"fallback\"",
            "providers[0].tools.fallback",
        ),
        (
            "[[providers]]\nname = \"a\"\nbase_url = \"http://x\"\n[providers.tools]\nmode = \"natural\"\ninstructions = \"no placeholder\"",
            "providers[0].tools.instructions",
        ),
        (
            "[[providers]]\nname = \"a\"\nbase_url = \"http://x\"\napi_key_env = \"TOOLGATE_TEST_SURELY_UNSET_VAR\"",
            "providers[0].api_key_env",
        ),
        (
            "[server]\nshutdown_grace_secs = -1",
            "server.shutdown_grace_secs",
        ),
        ("[server]\nworkers = 5000", "server.workers"),
        (
            "[[providers]]\nname = \"a\"\nbase_url = \"http://x\"\napi = \"responses\"\n[providers.tools]\nmode = \"natural\"",
            "providers[0].api",
        ),
        (
            "[[providers]]\nname = \"a\"\napi = \"responses\"\n[providers.demo]",
            "providers[0].api",
        ),
        (
            "[[providers]]\nname = \"a\"\nbase_url = \"http://x\"\n[providers.tools]\nrescue_text_calls = true\nconstrain = \"gbnf\"",
            "providers[0].tools.constrain",
        ),
        (
            "[[providers]]\nname = \"a\"\nbase_url = \"http://x\"\n[providers.tools]\nrescue_text_calls = true\non_ungrounded = \"ask\"",
            "providers[0].tools.on_ungrounded",
        ),
        (
            "[[providers]]\nname = \"a\"\nbase_url = \"http://x\"\n[providers.tools]\nmode = \"natural\"\non_ungrounded = \"maybe\"",
            "providers[0].tools.on_ungrounded",
        ),
        (
            "[[providers]]\nname = \"a\"\nbase_url = \"http://x\"\n[providers.tools]\nmode = \"natural\"\nconstrain = \"regex\"",
            "providers[0].tools.constrain",
        ),
        (
            "[[providers]]\nname = \"a\"\nbase_url = \"http://x\"\n[providers.tools]\nconstrain = \"structural_tag\"",
            "providers[0].tools.constrain",
        ),
        (
            "[[providers]]\nname = \"a\"\nbase_url = \"http://x\"\n[providers.tools]\nmode = \"to_natural\"\nconstrain = \"structural_tag\"",
            "providers[0].tools.constrain",
        ),
    ];
    for (text, path) in cases {
        let err = Config::from_toml(text).unwrap_err();
        assert_eq!(err.path, path, "{text}\n=> {err}");
    }
}

#[test]
fn structural_tags_constrain_natural_mode() {
    let config = Config::from_toml(
        "[[providers]]\nname = \"a\"\nbase_url = \"http://x\"\n[providers.tools]\nmode = \"natural\"\nconstrain = \"structural_tag\"",
    )
    .unwrap();
    assert_eq!(
        config.providers[0].tools.constrain,
        crate::config::Constrain::StructuralTag
    );
    // Python's calls have their own tags (keyword-argument grammars).
    let config = Config::from_toml(
        "[[providers]]\nname = \"a\"\nbase_url = \"http://x\"\n[providers.tools]\nmode = \"natural\"\nsyntax = \"python\"\nconstrain = \"structural_tag\"",
    )
    .unwrap();
    assert_eq!(
        config.providers[0].tools.constrain,
        crate::config::Constrain::StructuralTag
    );
}

#[test]
fn embedded_default_is_valid() {
    let c = Config::from_toml(EMBEDDED_DEFAULT).unwrap();
    assert!(c.provider("demo").is_some());
}

#[test]
fn missing_file_is_an_error() {
    let err = Config::load(Source::File(Path::new("/nonexistent/toolgate.toml"))).unwrap_err();
    assert!(err.message.contains("cannot read"), "{err}");
}

#[test]
fn targets_take_weights_keys_and_headers_and_default_their_retries() {
    // Any variable that is set serves as a key here.
    let home = std::env::var("HOME").unwrap();
    let c = Config::from_toml(
        r#"
        [[providers]]
        name = "llama"
        models = ["llama-*"]
        headers = { "x-team" = "a" }
        targets = [
          { base_url = "http://127.0.0.1:1/v1", weight = 2 },
          { name = "b", base_url = "http://127.0.0.1:2/v1", api_key_env = "HOME", headers = { "x-pool" = "b" } },
          { demo = {} },
        ]
        "#,
    )
    .unwrap();
    let p = &c.providers[0];
    let labels: Vec<&str> = p.targets.iter().map(|t| &*t.label).collect();
    assert_eq!(labels, ["0", "b", "2"]);
    assert_eq!(p.targets[0].weight, 2);
    assert!(p.targets[0].authorization.is_none());
    assert_eq!(
        p.targets[1].authorization.as_ref().unwrap(),
        &format!("Bearer {home}")
    );
    assert_eq!(p.targets[1].headers["x-team"], "a");
    assert_eq!(p.targets[1].headers["x-pool"], "b");
    assert!(matches!(p.targets[2].endpoint, Target::Demo(_)));
    // One attempt per target, at most 3; one target keeps today's single attempt.
    assert_eq!(p.retry.attempts, 3);
    assert_eq!(p.retry.on.statuses, [429, 500, 502, 503, 504]);
    assert_eq!(
        Config::from_toml(MINIMAL).unwrap().providers[0]
            .retry
            .attempts,
        1
    );
}

#[test]
fn resilience_settings_are_checked_with_their_paths() {
    let cases = [
        (
            "[[providers]]\nname = \"a\"\nbase_url = \"http://127.0.0.1:1\"\ntargets = [{ base_url = \"http://127.0.0.1:2\" }]\n",
            "providers[0].targets",
        ),
        (
            "[[providers]]\nname = \"a\"\ntargets = [{ weight = 1 }]\n",
            "providers[0].targets[0].base_url",
        ),
        (
            "[[providers]]\nname = \"a\"\ntargets = [{ base_url = \"http://127.0.0.1:2\", weight = 0 }]\n",
            "providers[0].targets[0].weight",
        ),
        (
            "[[providers]]\nname = \"a\"\ntargets = [{ name = \"x\", base_url = \"http://127.0.0.1:2\" }, { name = \"x\", base_url = \"http://127.0.0.1:3\" }]\n",
            "providers[1].targets[1].name",
        ),
        (
            "[[providers]]\nname = \"a\"\nbase_url = \"http://127.0.0.1:1\"\n[providers.retry]\non = [\"connect\", \"418x\"]\n",
            "providers[0].retry.on[1]",
        ),
        (
            "[[providers]]\nname = \"a\"\nbase_url = \"http://127.0.0.1:1\"\n[providers.retry]\nattempts = 0\n",
            "providers[0].retry.attempts",
        ),
        (
            "[[providers]]\nname = \"a\"\nbase_url = \"http://127.0.0.1:1\"\nfailover = [\"nope\"]\n",
            "providers[0].failover[0]",
        ),
        (
            "[[providers]]\nname = \"a\"\nbase_url = \"http://127.0.0.1:1\"\nfailover = [\"a\"]\n",
            "providers[0].failover[0]",
        ),
    ];
    for (toml, path) in cases {
        let err = Config::from_toml(toml).unwrap_err();
        let path = path.replace("providers[1]", "providers[0]");
        assert_eq!(err.path, path, "{toml}\n{err}");
    }
    let err = Config::from_toml(
        "[[providers]]\nname = \"a\"\nbase_url = \"http://127.0.0.1:1\"\nfailover = [\"b\"]\n[[providers]]\nname = \"b\"\nbase_url = \"http://127.0.0.1:2\"\nfailover = [\"c\"]\n[[providers]]\nname = \"c\"\nbase_url = \"http://127.0.0.1:3\"\nfailover = [\"a\"]\n",
    )
    .unwrap_err();
    assert_eq!(
        err.message, "failover lists form a cycle: a -> b -> c -> a",
        "{err}"
    );
}

#[test]
fn failover_lists_are_checked_for_repeats_and_gateway_tools() {
    let twice = "[[providers]]\nname = \"a\"\nbase_url = \"http://x/v1\"\nfailover = [\"b\", \"b\"]\n[[providers]]\nname = \"b\"\nbase_url = \"http://y/v1\"\n";
    let err = Config::from_toml(twice).unwrap_err();
    assert_eq!(err.path, "providers[0].failover[1]", "{err}");
    assert!(err.message.contains("listed twice"), "{err}");
    let tools = "[[providers]]\nname = \"a\"\nbase_url = \"http://x/v1\"\nfailover = [\"b\"]\n[providers.tools]\ngateway_tools = [\"builtin:calculator\"]\n[[providers]]\nname = \"b\"\nbase_url = \"http://y/v1\"\n";
    let err = Config::from_toml(tools).unwrap_err();
    assert_eq!(err.path, "providers[0].failover[0]", "{err}");
    assert!(
        err.message.contains("`b`")
            && err.message.contains("`a`")
            && err.message.contains("builtin:calculator"),
        "names both providers and the tool: {err}"
    );
    let same = tools.replace(
        "base_url = \"http://y/v1\"\n",
        "base_url = \"http://y/v1\"\n[providers.tools]\ngateway_tools = [\"builtin:calculator\", \"builtin:clock\"]\n",
    );
    assert!(Config::from_toml(&same).is_ok());
}

#[test]
fn provider_names_no_override_could_tell_apart_are_refused() {
    let err = Config::from_toml(
        "[[providers]]\nname = \"a\"\nbase_url = \"http://x/v1\"\n[[providers]]\nname = \"A\"\nbase_url = \"http://y/v1\"\n",
    )
    .unwrap_err();
    assert_eq!(err.path, "providers[1].name", "{err}");
    assert!(err.message.contains("only in case"), "{err}");
    let err = Config::from_toml("[[providers]]\nname = \"my__p\"\nbase_url = \"http://x/v1\"\n")
        .unwrap_err();
    assert_eq!(err.path, "providers[0].name", "{err}");
    assert!(err.message.contains("__"), "{err}");
}

#[test]
fn errors_are_one_line_without_stray_quotes() {
    let err = Config::from_toml("[[providers]]\nname = \"a\"\nbase_url = \"http://x/v1\"\n[providers.retry]\nbackoff_ms = 18446744073709551615\n").unwrap_err().to_string();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("line 5") && err.contains("too large") && err.contains("backoff_ms"),
        "{err}"
    );
    let err = Config::from_toml("[[providers]\nname = \"a\"\n")
        .unwrap_err()
        .to_string();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("line 1"), "{err}");
    let err =
        Config::from_toml(&format!("{MINIMAL}[providers.tools]\nmode = \"magic\"\n")).unwrap_err();
    assert_eq!(err.path, "providers[0].tools.mode");
    assert!(!err.message.contains("`one of"), "{err}");
    assert!(
        err.message.contains("passthrough, natural, to_natural"),
        "{err}"
    );
}

#[test]
fn a_base_url_without_v1_is_warned_about() {
    let c = Config::from_toml("[[providers]]\nname = \"a\"\nbase_url = \"http://x:1\"\n").unwrap();
    assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    assert!(
        c.warnings[0].contains("/chat/completions"),
        "{:?}",
        c.warnings
    );
    assert!(Config::from_toml(MINIMAL).unwrap().warnings.is_empty());
}

#[test]
fn userinfo_in_a_url_becomes_an_authorization_header() {
    let c = Config::from_toml(
        "[[providers]]\nname = \"a\"\nbase_url = \"http://u:pw@127.0.0.1:1/v1\"\n[[http_tools]]\nname = \"t\"\nurl = \"http://u:pw@127.0.0.1:2/t\"\n",
    )
    .unwrap();
    let Target::Http(h) = &c.providers[0].targets[0].endpoint else {
        panic!("http")
    };
    assert_eq!(h.authority.as_str(), "127.0.0.1:1");
    assert_eq!(
        c.providers[0].targets[0].authorization.as_ref().unwrap(),
        "Basic dTpwdw=="
    );
    let tool = &c.http_tools[0];
    assert_eq!(tool.url.authority().unwrap().as_str(), "127.0.0.1:2");
    assert!(
        tool.headers
            .iter()
            .any(|(n, v)| n == http::header::AUTHORIZATION && v == "Basic dTpwdw==")
    );
}
