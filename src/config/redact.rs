//! Printing the effective config, and log lines, without credentials.
//!
//! Keys never live in the config (only the names of the variables holding
//! them), but other values do carry credentials. One rule says which, and
//! this module is the only place it lives:
//!
//! - in a URL, the userinfo and the value of every query parameter, whatever
//!   its name (`?code=`, `?jwt=`, `?sslpassword=` as much as `?api_key=`);
//! - on a command line or in a line of text, the argument after a flag whose
//!   name holds one of [`WORDS`] (case-insensitive: `--token`, `--bearer`,
//!   `--pat`, `-Password`) or is `-p` (mysql's short `--password`), and the
//!   value of `--flag=value`, of `NAME=value` whose name holds one of them
//!   (`GITHUB_TOKEN=…`), and of mysql's `-pVALUE`;
//! - in the config, every value of a `headers` or `env` table.
//!
//! A value `env:NAME` stays visible wherever it sits: it names a variable,
//! not a secret. [`redacted_toml`] applies the rule to the config for
//! `check`, [`url`] to one URL (`tools`, config errors) and [`in_text`] to
//! any text (every log line, through `log_writer`). Each is idempotent: a
//! line hidden twice (an error hidden by `tools::mcp`, then by the log
//! writer) reads the same as one hidden once.

use std::borrow::Cow;

use super::raw::RawConfig;

pub const REDACTED: &str = "<redacted>";

/// Words that make a flag, a `NAME=` or a JSON key name a credential,
/// matched case-insensitively anywhere in the name (`--api-key`,
/// `GITHUB_PAT`, `X-Auth-Token`). The last four were hidden before the rule
/// was written down and stay hidden. A name can hold one by chance
/// (`--path` holds `pat`, `--author` holds `auth`): its value is hidden
/// too, which costs a line of output and never a secret.
pub const WORDS: [&str; 13] = [
    "pass", "token", "secret", "key", "bearer", "pat", "jwt", "auth", "cred", "pwd", "sig",
    "session", "cookie",
];

/// Whether `name` (a flag without its dashes, the `NAME` of `NAME=value`, a
/// JSON key) holds one of [`WORDS`].
fn secret_name(name: &str) -> bool {
    WORDS.iter().any(|word| {
        name.as_bytes()
            .windows(word.len())
            .any(|w| w.eq_ignore_ascii_case(word.as_bytes()))
    })
}

/// A value that names a variable rather than holding a secret.
fn is_reference(value: &str) -> bool {
    value.starts_with("env:")
}

/// What one argument, or one word of a line, claims about what follows it.
#[derive(Debug, PartialEq, Eq)]
enum Claim {
    /// `--token`, `-p`: the next argument is a secret.
    Next,
    /// `--token=v`, `TOKEN=v`, `-pv`: the value from this byte on is.
    From(usize),
    /// `-pword`: mysql's `-pSECRET` whose secret holds a word, or a Go-style
    /// `-password` flag; no telling which, so both the glued value and the
    /// next argument are.
    FromAndNext(usize),
    /// Neither.
    Nothing,
}

/// The rule for one word: a flag (one or more dashes, then a letter) or a
/// `NAME=value`.
fn claim(word: &str) -> Claim {
    let name = word.trim_start_matches('-');
    let dashes = word.len() - name.len();
    if dashes == 0 {
        return match word.split_once('=') {
            Some((name, _)) if secret_name(name) => Claim::From(name.len() + 1),
            _ => Claim::Nothing,
        };
    }
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        // `-1`, `--`, `->`: not a flag.
        return Claim::Nothing;
    }
    let secret_flag = |flag: &str| secret_name(flag) || (dashes == 1 && flag == "p");
    if let Some((flag, _)) = name.split_once('=') {
        return if secret_flag(flag) {
            Claim::From(dashes + flag.len() + 1)
        } else {
            Claim::Nothing
        };
    }
    let glued = dashes == 1 && name.len() > 1 && name.starts_with('p');
    if glued && secret_name(name) {
        Claim::FromAndNext(2)
    } else if secret_flag(name) {
        Claim::Next
    } else if glued {
        // mysql's `-pSECRET`: the password glued to the flag. Go-style
        // `-port` reads as `-p<redacted>`: the price of never showing one.
        Claim::From(2)
    } else {
        Claim::Nothing
    }
}

/// How one word is shown.
#[derive(Debug, PartialEq, Eq)]
enum Shown {
    Kept,
    /// Its value, from this byte on, is a secret.
    HiddenFrom(usize),
    /// From this byte on it is a URL, shown by [`url`].
    UrlFrom(usize),
}

/// The one decision, for a word of text or an argument of a command line.
/// `secret_next` carries a flag's claim over the word after it.
fn decide(word: &str, secret_next: &mut bool) -> Shown {
    if std::mem::take(secret_next) {
        // A flag in a value's place (`--auth --token x`) still claims the
        // word after it.
        *secret_next = matches!(claim(word), Claim::Next | Claim::FromAndNext(_));
        return Shown::HiddenFrom(0);
    }
    // Where the URL starts: its scheme, before `://`.
    let url_at = word.find("://").map(|s| {
        word[..s]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || "+.-".contains(c)))
            .map_or(0, |i| i + 1)
    });
    match (claim(word), url_at) {
        (Claim::Next, _) => {
            *secret_next = true;
            Shown::Kept
        }
        // The `=` is in the URL's own query: the URL rule decides.
        (Claim::From(at), Some(u)) if at > u => Shown::UrlFrom(u),
        // A name that holds a secret, before a URL or a plain value.
        (Claim::From(at), _) => Shown::HiddenFrom(at),
        (Claim::FromAndNext(at), _) => {
            *secret_next = true;
            Shown::HiddenFrom(at)
        }
        (_, Some(u)) => Shown::UrlFrom(u),
        _ => Shown::Kept,
    }
}

/// `url` with its userinfo and every query value hidden:
/// `https://user:pw@host/v1?api_key=k&x=1#f` shows as
/// `https://<redacted>@host/v1?api_key=<redacted>&x=<redacted>#f`. The
/// parameters' names stay (they say what the URL asks for). What is hidden
/// already stays as it is; anything that is not a URL is returned as it is.
pub fn url(url: &str) -> Cow<'_, str> {
    let Some(scheme_end) = url.find("://") else {
        return Cow::Borrowed(url);
    };
    let mut out: Option<String> = None;
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    if let Some(at) = rest[..authority_end].rfind('@')
        && &rest[..at] != REDACTED
    {
        let mut shown = url.to_owned();
        shown.replace_range(scheme_end + 3..scheme_end + 3 + at, REDACTED);
        out = Some(shown);
    }
    let current = out.as_deref().unwrap_or(url);
    if let Some(q) = current.find('?') {
        let end = current[q..].find('#').map_or(current.len(), |f| q + f);
        let query = &current[q + 1..end];
        let hidden: Vec<Cow<'_, str>> = query
            .split('&')
            .map(|pair| {
                let (name, value) = pair.split_once('=').unwrap_or(("", pair));
                if value.is_empty() || value == REDACTED {
                    Cow::Borrowed(pair)
                } else if pair.contains('=') {
                    Cow::Owned(format!("{name}={REDACTED}"))
                } else {
                    // `?abc123`: a value without a name.
                    Cow::Borrowed(REDACTED)
                }
            })
            .collect();
        let hidden = hidden.join("&");
        if hidden != query {
            out = Some(format!("{}?{hidden}{}", &current[..q], &current[end..]));
        }
    }
    out.map_or(Cow::Borrowed(url), Cow::Owned)
}

/// Bytes that end a word of text (a flag, a `NAME=value`, a URL).
fn ends_word(b: u8) -> bool {
    b.is_ascii_whitespace() || b"\"'`,()[]{}<>\\".contains(&b)
}

/// Bytes that end a URL in text: what cannot sit in one unescaped, and the
/// closing brackets and comma around one (`(https://…)`, `[a, b]`).
fn ends_url(b: u8) -> bool {
    b.is_ascii_whitespace() || b"\"'`<>)]},\\".contains(&b)
}

/// Bytes that end a value that is not quoted. A value runs past
/// the end of its word (`TOKEN=a,b(c)` is hidden whole), but never past a
/// quote or a backslash, so a hidden value inside a quoted or JSON string
/// leaves the string well formed.
fn ends_value(b: u8) -> bool {
    b.is_ascii_whitespace() || b"\"`<>\\".contains(&b)
}

/// The first byte at or after `from` that `ends`, or the end of `bytes`.
fn find_end(bytes: &[u8], from: usize, ends: fn(u8) -> bool) -> usize {
    bytes[from..]
        .iter()
        .position(|&b| ends(b))
        .map_or(bytes.len(), |e| from + e)
}

/// The closing `quote` of a string whose text starts at `from`, past
/// backslash escapes (`\"` inside a Debug or JSON string).
fn closing_quote(bytes: &[u8], from: usize, quote: u8) -> usize {
    let mut j = from;
    while j < bytes.len() {
        match bytes[j] {
            b'\\' => j += 2,
            b if b == quote => return j,
            _ => j += 1,
        }
    }
    bytes.len()
}

/// Where a secret value that starts at `from` (in the word at `word_start`
/// that ends at `word_end`) lies. A value that opens a quoted string
/// (`TOKEN="a b"`, `--token 'a b'`, `["--token", "a b"]`) is the string's
/// text; any other runs to [`ends_value`].
fn value_span(text: &str, word_start: usize, word_end: usize, from: usize) -> (usize, usize) {
    let bytes = text.as_bytes();
    let is_quote = |b: u8| b == b'"' || b == b'\'';
    if from == word_start && from > 0 && is_quote(bytes[from - 1]) {
        let quote = bytes[from - 1];
        if from > 1 && bytes[from - 2] == b'\\' {
            // An escaped quote inside a Debug or JSON string (`\"T\"`)
            // closes at the next escaped one, within the string.
            let string_end = closing_quote(bytes, from, b'"');
            let close = text[from..string_end]
                .find(if quote == b'"' { "\\\"" } else { "\\'" })
                .map_or(string_end, |c| from + c);
            return (from, close);
        }
        return (from, closing_quote(bytes, from, quote));
    }
    if from == word_end && from < bytes.len() && is_quote(bytes[from]) {
        return (from + 1, closing_quote(bytes, from + 1, bytes[from]));
    }
    (from, find_end(bytes, from, ends_value))
}

/// A copy of a text made only once something in it changes.
struct Edits<'a> {
    text: &'a str,
    out: Option<String>,
    copied: usize,
}

impl<'a> Edits<'a> {
    /// Replaces `from..to` (after every earlier replacement) with `with`.
    fn replace(&mut self, from: usize, to: usize, with: &str) {
        let out = self
            .out
            .get_or_insert_with(|| String::with_capacity(self.text.len()));
        out.push_str(&self.text[self.copied..from]);
        out.push_str(with);
        self.copied = to;
    }

    /// Hides `from..to` unless it is empty, hidden already or a reference.
    fn hide(&mut self, from: usize, to: usize) {
        let value = &self.text[from..to];
        if !value.is_empty() && !value.starts_with(REDACTED) && !is_reference(value) {
            self.replace(from, to, REDACTED);
        }
    }

    fn finish(self) -> Cow<'a, str> {
        match self.out {
            Some(mut out) => {
                out.push_str(&self.text[self.copied..]);
                Cow::Owned(out)
            }
            None => Cow::Borrowed(self.text),
        }
    }
}

/// `text` (a log line, an error message, an argument with spaces in it)
/// with the rule of this module applied to every word: each URL shown by
/// [`url`], the value a flag or `NAME=` claims hidden, and the value of a
/// JSON key that holds one of [`WORDS`] (`"token":"…"`, as tracing's JSON
/// layout writes a field). A client library's error can quote the address
/// it failed to reach, or the command line it ran.
pub fn in_text(text: &str) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    let mut edits = Edits {
        text,
        out: None,
        copied: 0,
    };
    let mut secret_next = false;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'<' && text[i..].starts_with(REDACTED) {
            // Hidden already (this is a second pass): it was the value a
            // flag claimed, if one did.
            secret_next = false;
            i += REDACTED.len();
            continue;
        }
        if ends_word(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        let end = find_end(bytes, start, ends_word);
        let word = &text[start..end];
        if !secret_next && start > 0 && bytes[start - 1] == b'"' && text[end..].starts_with("\":") {
            // A JSON key: its value is the string or the word after `:`.
            i = end + 2;
            while bytes.get(i) == Some(&b' ') {
                i += 1;
            }
            if secret_name(word) {
                if bytes.get(i) == Some(&b'"') {
                    let to = closing_quote(bytes, i + 1, b'"');
                    edits.hide(i + 1, to);
                    i = to;
                } else {
                    // A number or `true`: hidden as a string, so the line
                    // stays JSON.
                    let to = find_end(bytes, i, ends_word);
                    if to > i {
                        edits.replace(i, to, &format!("\"{REDACTED}\""));
                    }
                    i = to;
                }
            }
            continue;
        }
        i = match decide(word, &mut secret_next) {
            Shown::Kept => end,
            Shown::HiddenFrom(at) => {
                let (from, to) = value_span(text, start, end, start + at);
                edits.hide(from, to);
                to.max(end)
            }
            Shown::UrlFrom(at) => {
                let from = start + at;
                let to = find_end(bytes, from, ends_url);
                if let Cow::Owned(shown) = url(&text[from..to]) {
                    edits.replace(from, to, &shown);
                }
                to
            }
        };
    }
    edits.finish()
}

/// One argument of a stdio server's command line as `check` shows it.
/// `secret_next` carries a flag's claim (`--token`, `-p`) over the
/// argument after it, which is hidden whole, spaces and all; an argument
/// that is neither a flag nor a value is shown by [`in_text`]
/// (`sh -c "mysql -p secret"`).
pub fn arg<'a>(arg: &'a str, secret_next: &mut bool) -> Cow<'a, str> {
    match decide(arg, secret_next) {
        Shown::HiddenFrom(at)
            if at < arg.len() && !is_reference(&arg[at..]) && !arg[at..].starts_with(REDACTED) =>
        {
            Cow::Owned(format!("{}{REDACTED}", &arg[..at]))
        }
        Shown::HiddenFrom(_) => Cow::Borrowed(arg),
        Shown::Kept if *secret_next => Cow::Borrowed(arg),
        Shown::Kept | Shown::UrlFrom(_) => in_text(arg),
    }
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
/// (but `env:NAME` references), what [`arg`] hides in a `command`, and what
/// [`url`] hides in every URL.
fn redact(value: &mut toml::Value) {
    match value {
        toml::Value::Table(table) => {
            for (key, child) in table.iter_mut() {
                match (key.as_str(), child) {
                    ("headers" | "env", toml::Value::Table(values)) => {
                        for (_, v) in values.iter_mut() {
                            if let toml::Value::String(s) = v
                                && !is_reference(s)
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
        toml::Value::String(s) if s.contains("://") => {
            if let Cow::Owned(shown) = in_text(s) {
                *s = shown;
            }
        }
        _ => {}
    }
}

fn redact_args(args: &mut [toml::Value]) {
    let mut secret_next = false;
    for value in args {
        if let toml::Value::String(s) = value
            && let Cow::Owned(shown) = arg(s, &mut secret_next)
        {
            *s = shown;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command line as `check` prints it.
    fn shown(args: &[&str]) -> Vec<String> {
        let mut values: Vec<toml::Value> = args.iter().map(|a| toml::Value::from(*a)).collect();
        redact_args(&mut values);
        values
            .into_iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn urls_lose_userinfo_and_every_query_value() {
        assert_eq!(
            url("https://u:pw@host:1/v1?api_key=k1&x=1#f"),
            "https://<redacted>@host:1/v1?api_key=<redacted>&x=<redacted>#f"
        );
        assert_eq!(
            url("postgres://tg:pw@127.0.0.1/db?sslpassword=s&application_name=tg"),
            "postgres://<redacted>@127.0.0.1/db?sslpassword=<redacted>&application_name=<redacted>"
        );
        for (given, shown) in [
            (
                "https://mcp.example/mcp?jwt=eyJhbGciOi.J1",
                "https://mcp.example/mcp?jwt=<redacted>",
            ),
            (
                "https://idp.example/cb?code=C1&state=S1",
                "https://idp.example/cb?code=<redacted>&state=<redacted>",
            ),
            ("http://h/x?abc123", "http://h/x?<redacted>"),
            ("http://h/x?flag=&y", "http://h/x?flag=&<redacted>"),
        ] {
            assert_eq!(url(given), shown, "{given}");
        }
        assert!(matches!(url("http://127.0.0.1:1/v1"), Cow::Borrowed(_)));
        assert!(
            matches!(url("http://h/p@q"), Cow::Borrowed(_)),
            "an @ in the path"
        );
        assert_eq!(url("not a url ?token=x"), "not a url ?token=x");
        // Shown twice, a URL reads as shown once.
        let once = url("https://u:pw@h/x?token=T1&a=b");
        assert_eq!(url(&once), once);
    }

    #[test]
    fn arguments_after_a_secret_flag_and_secret_names_are_hidden() {
        let cases: [(&[&str], &[&str]); 16] = [
            (
                &["mysql", "-p", "S01", "db"],
                &["mysql", "-p", REDACTED, "db"],
            ),
            (&["mysql", "-pS02", "db"], &["mysql", "-p<redacted>", "db"]),
            // Glued or a Go-style flag: no telling, so both are hidden.
            (
                &["mysql", "-pMY-TOKEN", "db"],
                &["mysql", "-p<redacted>", REDACTED],
            ),
            (
                &["srv", "-password", "S16"],
                &["srv", "-p<redacted>", REDACTED],
            ),
            (&["srv", "--bearer", "S03"], &["srv", "--bearer", REDACTED]),
            (&["srv", "--pat", "S04"], &["srv", "--pat", REDACTED]),
            (&["srv", "--JWT", "S05"], &["srv", "--JWT", REDACTED]),
            (&["srv", "TOKEN=S06"], &["srv", "TOKEN=<redacted>"]),
            (
                &["srv", "GITHUB_PAT=S07"],
                &["srv", "GITHUB_PAT=<redacted>"],
            ),
            (&["srv", "--Api-Key=S08"], &["srv", "--Api-Key=<redacted>"]),
            (
                &["srv", "-Password", "S09"],
                &["srv", "-Password", REDACTED],
            ),
            (
                &["srv", "--credentials", "S10"],
                &["srv", "--credentials", REDACTED],
            ),
            (
                &["srv", "--auth-header=Bearer S11"],
                &["srv", "--auth-header=<redacted>"],
            ),
            // A flag in a value's place still claims the next argument.
            (
                &["srv", "--auth", "--token", "S12"],
                &["srv", "--auth", REDACTED, REDACTED],
            ),
            // A reference names a variable; other flags keep their values.
            (
                &[
                    "srv",
                    "--token",
                    "env:GH_TOKEN",
                    "SECRET=env:S",
                    "--port",
                    "3",
                    "-v",
                ],
                &[
                    "srv",
                    "--token",
                    "env:GH_TOKEN",
                    "SECRET=env:S",
                    "--port",
                    "3",
                    "-v",
                ],
            ),
            (
                &["sh", "-c", "mysql -u root -p S13 db"],
                &["sh", "-c", "mysql -u root -p <redacted> db"],
            ),
        ];
        for (given, expected) in cases {
            assert_eq!(shown(given), expected, "{given:?}");
        }
        assert_eq!(
            shown(&[
                "srv",
                "--url=https://u:S14@h/mcp?code=S15",
                "https://h/?jwt=S16"
            ]),
            [
                "srv",
                "--url=https://<redacted>@h/mcp?code=<redacted>",
                "https://h/?jwt=<redacted>"
            ]
        );
    }

    #[test]
    fn log_lines_lose_the_same_secrets_and_stay_well_formed() {
        let cases = [
            (
                "error sending request for url (https://u:pw@mcp.example/mcp?token=T1&jwt=J1): refused",
                "error sending request for url (https://<redacted>@mcp.example/mcp?token=<redacted>&jwt=<redacted>): refused",
            ),
            (
                "spawned npx srv --token T2 --port 3 -p T3 TOKEN=T4",
                "spawned npx srv --token <redacted> --port 3 -p <redacted> TOKEN=<redacted>",
            ),
            (
                r#" WARN x: failed command=["srv", "--bearer", "T5 T5"] api_key="T6 \"T6\"" n=1"#,
                r#" WARN x: failed command=["srv", "--bearer", "<redacted>"] api_key="<redacted>" n=1"#,
            ),
            (
                "postgres://tg@db/x?sslpassword=T7 down",
                "postgres://<redacted>@db/x?sslpassword=<redacted> down",
            ),
            ("--token env:GH_TOKEN", "--token env:GH_TOKEN"),
        ];
        for (line, expected) in cases {
            let once = in_text(line);
            assert_eq!(once, expected, "{line}");
            assert_eq!(in_text(&once), once, "a second pass changes nothing");
        }
        let json = r#"{"fields":{"message":"ran \"--pat\" \"T8\" and PASSWORD=T9","access_token":"T10","key":7, "Cookie": "T11"}}"#;
        let shown = in_text(json);
        let parsed: serde_json::Value = serde_json::from_str(&shown).expect(&shown);
        let text = parsed.to_string();
        for secret in ["T8", "T9", "T10", "7", "T11"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert_eq!(in_text(&shown), shown);
        assert!(matches!(
            in_text("no secret here: a=b -v"),
            Cow::Borrowed(_)
        ));
    }

    /// The doubled bracket: a value hidden once and then seen again (an MCP
    /// error hidden by `tools::mcp`, then by the log writer) took the `>`
    /// for the end of the URL and hid `<redacted` again.
    #[test]
    fn a_line_hidden_twice_reads_as_hidden_once() {
        let error = "url (http://h/mcp?token=T1&x=2): refused; spawned -p P1 --token=T2";
        let once = in_text(error);
        let twice = in_text(&once);
        assert_eq!(twice, once);
        assert!(
            !twice.contains("<redacted>>") && !twice.contains("<<redacted>"),
            "{twice}"
        );
        assert!(!twice.contains("T1") && !twice.contains("P1") && !twice.contains("T2"));
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
            base_url = "http://user1:SECRET-01@127.0.0.1:1/v1?api_key=SECRET-02&region=SECRET-23"
            headers = { "X-Api-Key" = "SECRET-03", "X-Team" = "SECRET-04", "X-Ref" = "env:TEAM_TOKEN" }
            [[providers]]
            name = "q"
            targets = [
              { base_url = "http://u:SECRET-05@127.0.0.1:1/v1", headers = { "Authorization" = "Bearer SECRET-06" } },
              { base_url = "http://127.0.0.1:2/v1?token=SECRET-07", api_key_env = "KEY_B" },
            ]
            [[mcp_servers]]
            name = "remote"
            url = "https://u:SECRET-08@mcp.example/mcp?jwt=SECRET-09&code=SECRET-24"
            headers = { "Authorization" = "Bearer SECRET-10" }
            [[mcp_servers]]
            name = "local"
            command = ["npx", "server", "--api-key", "SECRET-11", "--token=SECRET-12", "--port", "3",
                       "-p", "SECRET-25", "--bearer", "SECRET-26", "--pat", "SECRET-27", "TOKEN=SECRET-28",
                       "--key-ref", "env:SERVER_KEY"]
            env = { "GITHUB_TOKEN" = "SECRET-13", "LOG" = "SECRET-14" }
            [[http_tools]]
            name = "lookup"
            url = "https://u:SECRET-15@tools.example/lookup?sig=SECRET-16"
            headers = { "X-Anything" = "SECRET-17" }
            [store]
            url = "postgres://toolgate:SECRET-18@127.0.0.1/db?password=SECRET-19&sslpassword=SECRET-29"
            [telemetry]
            otlp_endpoint = "https://tenant:SECRET-20@otel.example:4318?key=SECRET-21"
            "#,
        )
        .unwrap();
        let out = redacted_toml(&raw);
        for n in 1..=29 {
            let secret = format!("SECRET-{n:02}");
            assert!(!out.contains(&secret), "{secret} printed:\n{out}");
        }
        for kept in [
            "region=<redacted>",
            "sslpassword=<redacted>",
            "env:TEAM_TOKEN",
            "env:SERVER_KEY",
            "KEY_B",
            "--port",
            "\"3\"",
            "127.0.0.1:2/v1",
        ] {
            assert!(out.contains(kept), "{kept} hidden:\n{out}");
        }
        assert!(!out.contains("<redacted>>"), "{out}");
    }
}
