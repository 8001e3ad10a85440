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
    let Target::Http(t) = &p.target else {
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
    ];
    for (text, path) in cases {
        let err = Config::from_toml(text).unwrap_err();
        assert_eq!(err.path, path, "{text}\n=> {err}");
    }
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
