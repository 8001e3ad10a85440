//! Every example in README.md and docs/*.md, run as a reader would run it,
//! against the binary this suite built; and every link between the pages
//! resolves.
//!
//! A fenced block is checked by its language:
//! - `toml`: `toolgate check` accepts it (a fragment is first merged into the
//!   config its `after=` names);
//! - `sh`: bash runs it (`set -euo pipefail`, `curl` failing on an HTTP error,
//!   `toolgate` on `PATH`) against a toolgate serving the page's config;
//! - `python`: the client tests' venv runs it against the same toolgate;
//! - `js`: node runs it as a module from the client tests' npm project;
//! - `json`: it parses, whole or line by line.
//!
//! Blocks without a language are output samples. `localhost:8080` and
//! `127.0.0.1:8080` in a block become the serving toolgate's address. An HTML
//! comment just above a block steers it (a reader does not see it):
//! `<!-- check: skip (why) -->` leaves it out, saying why;
//! `<!-- check: serve=FILE env=NAME=VALUE … -->` makes this and the page's
//! later blocks run against toolgate serving FILE (`default` is the embedded
//! config, where every page starts) with that environment, given to the
//! blocks too; `after=FILE` merges a TOML fragment into FILE's config;
//! `env=NAME=VALUE` sets a variable for one block; `standalone` runs an `sh`
//! block that starts its own toolgate (given a free port as its `listen`).

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::binary::Binary;
use crate::common::installed;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[derive(Default, Clone)]
struct Directive {
    skip: Option<String>,
    serve: Option<String>,
    after: Option<String>,
    env: Vec<(String, String)>,
    standalone: bool,
}

impl Directive {
    fn parse(text: &str, at: &str) -> Directive {
        let text = text.trim();
        if let Some(why) = text.strip_prefix("skip") {
            let why = why.trim();
            assert!(
                why.starts_with('(') && why.ends_with(')') && why.len() > 2,
                "{at}: `skip` needs its reason in parentheses"
            );
            return Directive {
                skip: Some(why.to_owned()),
                ..Directive::default()
            };
        }
        let mut d = Directive::default();
        for word in text.split_whitespace() {
            if let Some(file) = word.strip_prefix("serve=") {
                d.serve = Some(file.to_owned());
            } else if let Some(file) = word.strip_prefix("after=") {
                d.after = Some(file.to_owned());
            } else if let Some(pair) = word.strip_prefix("env=") {
                let (k, v) = pair
                    .split_once('=')
                    .unwrap_or_else(|| panic!("{at}: `env=` wants NAME=VALUE"));
                d.env.push((k.to_owned(), v.to_owned()));
            } else if word == "standalone" {
                d.standalone = true;
            } else {
                panic!("{at}: unknown check directive `{word}`");
            }
        }
        d
    }
}

struct Block {
    at: String,
    lang: String,
    text: String,
    directive: Directive,
}

/// The fenced blocks of a Markdown page, each with the directive above it.
fn blocks(page: &str) -> Vec<Block> {
    let text = std::fs::read_to_string(root().join(page)).unwrap();
    let mut out = Vec::new();
    let mut pending: Option<Directive> = None;
    let mut open: Option<(usize, String, Vec<&str>)> = None;
    for (n, line) in text.lines().enumerate() {
        let at = format!("{page}:{}", n + 1);
        if let Some((start, lang, body)) = open.as_mut() {
            if line.starts_with("```") {
                out.push(Block {
                    at: format!("{page}:{start}"),
                    lang: std::mem::take(lang),
                    text: body.join("\n") + "\n",
                    directive: pending.take().unwrap_or_default(),
                });
                open = None;
            } else {
                body.push(line);
            }
            continue;
        }
        if let Some(info) = line.strip_prefix("```") {
            let lang = info.split_whitespace().next().unwrap_or("").to_owned();
            open = Some((n + 1, lang, Vec::new()));
        } else if let Some(d) = line
            .strip_prefix("<!-- check:")
            .and_then(|l| l.strip_suffix("-->"))
        {
            pending = Some(Directive::parse(d, &at));
        } else if !line.trim().is_empty() && pending.is_some() {
            panic!("{at}: a check directive must stand just above its block");
        }
    }
    assert!(open.is_none(), "{page}: a code block is never closed");
    out
}

/// One toolgate serving a page's examples.
struct Served {
    file: String,
    env: Vec<(String, String)>,
    binary: Binary,
}

fn serve(file: &str, env: &[(String, String)], cwd: &Path) -> Binary {
    let path = if file == "default" {
        "config/toolgate.toml"
    } else {
        file
    };
    let config =
        std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("serve={file}: {e}"));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Binary::start_in(&config, &env, cwd)
}

/// A directory holding `toolgate`, to put first on a block's `PATH`.
fn bin_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("toolgate-docs-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("toolgate");
    if !link.exists() {
        let _ = std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_toolgate"), &link);
    }
    dir
}

fn scratch(at: &str) -> PathBuf {
    let name: String = at
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let dir = std::env::temp_dir().join(format!("toolgate-docs-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // As in a checkout: `docs/examples/…` and `config/…` are at hand.
    for name in ["docs", "config"] {
        std::os::unix::fs::symlink(root().join(name), dir.join(name)).unwrap();
    }
    dir
}

/// `curl` for the blocks: an HTTP error fails it (unless the block asks for
/// `-f` itself, which curl will not take twice), and nothing waits forever.
const CURL: &str = r#"curl() {
  local fail=--fail-with-body a
  for a in "$@"; do
    case "$a" in --fail*|--*) ;; -*f*) fail= ;; esac
    case "$a" in --fail|--fail-with-body) fail= ;; esac
  done
  command curl $fail --max-time 30 "$@"
}"#;

/// Runs `command` in its own process group within `limit`, then kills the
/// group (a block may leave a server in the background). Err: what it wrote.
fn run(mut command: Command, limit: Duration) -> Result<String, String> {
    use std::os::unix::process::CommandExt;
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = command.spawn().map_err(|e| e.to_string())?;
    let group = child.id() as i32;
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // SAFETY: signalling a process group this function created.
    unsafe { libc::kill(-group, libc::SIGKILL) };
    let _ = child.wait();
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    let said = format!("--- stdout\n{out}--- stderr\n{err}");
    match status {
        Some(s) if s.success() => Ok(out),
        Some(s) => Err(format!("exited with {s}\n{said}")),
        None => Err(format!("did not finish within {limit:?}\n{said}")),
    }
}

/// Merges a TOML fragment into a config: tables member by member, a table
/// into an array of tables' last element (`[providers.tools]` after
/// `[[providers]]`), arrays of tables one after the other.
fn merge(base: &mut toml::Table, add: toml::Table) {
    for (key, value) in add {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(a)) => merge(b, a),
            (Some(toml::Value::Array(b)), toml::Value::Table(a))
                if b.last().is_some_and(toml::Value::is_table) =>
            {
                merge(b.last_mut().unwrap().as_table_mut().unwrap(), a);
            }
            (Some(toml::Value::Array(b)), toml::Value::Array(a))
                if b.iter().chain(&a).all(toml::Value::is_table) =>
            {
                b.extend(a);
            }
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

fn check_toml(block: &Block) -> Result<(), String> {
    let config = match &block.directive.after {
        Some(file) => {
            let base =
                std::fs::read_to_string(root().join(file)).map_err(|e| format!("{file}: {e}"))?;
            let mut base: toml::Table = base.parse().map_err(|e| format!("{file}: {e}"))?;
            let add: toml::Table = block.text.parse().map_err(|e| format!("{e}"))?;
            merge(&mut base, add);
            toml::to_string(&base).unwrap()
        }
        None => block.text.clone(),
    };
    let dir = scratch(&block.at);
    std::fs::write(dir.join("toolgate.toml"), &config).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolgate"));
    command
        .args(["check", "--config", "toolgate.toml"])
        .current_dir(&dir);
    for (k, v) in &block.directive.env {
        command.env(k, v);
    }
    run(command, Duration::from_secs(30)).map(drop)
}

fn check_json(block: &Block) -> Result<(), String> {
    if serde_json::from_str::<serde_json::Value>(&block.text).is_ok() {
        return Ok(());
    }
    for line in block.text.lines().filter(|l| !l.trim().is_empty()) {
        serde_json::from_str::<serde_json::Value>(line)
            .map_err(|e| format!("neither JSON nor JSON lines: {e}: {line}"))?;
    }
    Ok(())
}

fn run_block(block: &Block, served: Option<&Served>) -> Result<(), String> {
    let port = match (served, block.directive.standalone) {
        (_, true) => crate::common::free_port(),
        (Some(s), false) => s.binary.port,
        (None, false) => unreachable!("blocks that run have a server"),
    };
    let text = block
        .text
        .replace("localhost:8080", &format!("127.0.0.1:{port}"))
        .replace("127.0.0.1:8080", &format!("127.0.0.1:{port}"));
    let dir = scratch(&block.at);
    let mut command = match block.lang.as_str() {
        "sh" => {
            let script = format!("set -euo pipefail\n{CURL}\n{text}");
            let mut c = Command::new("bash");
            c.arg("-c").arg(script);
            c
        }
        "python" => {
            std::fs::write(dir.join("example.py"), &text).unwrap();
            let mut c = Command::new(installed::python());
            c.arg("example.py");
            c
        }
        "js" => {
            // From inside the npm project, so its imports resolve.
            let node = installed::node_dir();
            let file = node.join(format!(".docs-example-{}.mjs", std::process::id()));
            std::fs::write(&file, &text).unwrap();
            let mut c = Command::new("node");
            c.arg(&file);
            c
        }
        other => unreachable!("{other}"),
    };
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    command
        .current_dir(&dir)
        .env("PATH", path)
        .env("TOOLGATE_SERVER__LISTEN", format!("127.0.0.1:{port}"))
        .env("TOOLGATE_LOG", "warn");
    for (k, v) in served
        .map(|s| s.env.as_slice())
        .unwrap_or_default()
        .iter()
        .chain(&block.directive.env)
    {
        command.env(k, v);
    }
    let result = run(command, Duration::from_secs(90)).map(drop);
    if block.lang == "js" {
        let _ = std::fs::remove_file(
            installed::node_dir().join(format!(".docs-example-{}.mjs", std::process::id())),
        );
    }
    result
}

/// Runs every example of `page`; fails naming each that failed.
fn check_page(page: &str) {
    let mut served: Option<Served> = None;
    let mut context = ("default".to_owned(), Vec::new());
    let mut failed = Vec::new();
    let mut ran = 0;
    for block in blocks(page) {
        if block.directive.skip.is_some() {
            continue;
        }
        if let Some(file) = &block.directive.serve {
            context = (file.clone(), block.directive.env.clone());
        }
        let result = match block.lang.as_str() {
            "toml" => check_toml(&block),
            "json" => check_json(&block),
            "sh" | "python" | "js" => {
                let wanted = !block.directive.standalone;
                let stale = served
                    .as_ref()
                    .is_some_and(|s| (s.file.as_str(), &s.env) != (context.0.as_str(), &context.1));
                if stale || !wanted {
                    served = None;
                }
                if wanted && served.is_none() {
                    served = Some(Served {
                        file: context.0.clone(),
                        env: context.1.clone(),
                        binary: serve(&context.0, &context.1, &scratch(&block.at)),
                    });
                }
                run_block(&block, served.as_ref())
            }
            _ => continue,
        };
        ran += 1;
        if let Err(e) = result {
            failed.push(format!("{} ({}): {e}", block.at, block.lang));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {ran} examples in {page} failed:\n\n{}",
        failed.len(),
        failed.join("\n\n")
    );
}

fn pages() -> Vec<String> {
    let mut pages = vec!["README.md".to_owned()];
    let mut docs: Vec<String> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// GitHub's anchor for a heading.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(page: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(page).unwrap();
    let mut fenced = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.insert(slug(line.trim_start_matches('#')));
        }
    }
    out
}

#[test]
fn every_link_between_the_pages_resolves() {
    let link = regex_lite_links;
    let mut broken = Vec::new();
    for page in pages() {
        let path = root().join(&page);
        let text = std::fs::read_to_string(&path).unwrap();
        for target in link(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let file = if file.is_empty() {
                path.clone()
            } else {
                path.parent().unwrap().join(file)
            };
            if !file.exists() {
                broken.push(format!("{page}: {target}: no such file"));
            } else if !anchor.is_empty() && !anchors(&file).contains(anchor) {
                broken.push(format!("{page}: {target}: no such heading"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The targets of `[text](target)` links outside code.
fn regex_lite_links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Inline code is not a link.
        let plain: String = line
            .split('`')
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .map(|(_, s)| s)
            .collect::<Vec<_>>()
            .join(" ");
        let mut rest = plain.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn readme_links_every_docs_page() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    for page in pages().into_iter().filter(|p| p.starts_with("docs/")) {
        assert!(
            readme.contains(&format!("]({page})")),
            "README.md does not link {page}"
        );
    }
}

macro_rules! page_examples_run {
    ($($name:ident => $page:literal),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                check_page($page);
            }
        )*

        #[test]
        fn every_page_has_its_examples_test() {
            let tested: BTreeSet<&str> = [$($page),*].into_iter().collect();
            for page in pages() {
                assert!(tested.contains(page.as_str()), "{page} has no examples test in tests/it/docs.rs");
            }
        }
    };
}

page_examples_run! {
    readme_examples_run => "README.md",
    configuration_examples_run => "docs/configuration.md",
    deployment_examples_run => "docs/deployment.md",
    doors_examples_run => "docs/doors.md",
    gateway_tools_examples_run => "docs/gateway-tools.md",
    keys_and_limits_examples_run => "docs/keys-and-limits.md",
    mcp_server_examples_run => "docs/mcp-server.md",
    natural_mode_examples_run => "docs/natural-mode.md",
    performance_examples_run => "docs/performance.md",
    transcripts_examples_run => "docs/transcripts.md",
}
