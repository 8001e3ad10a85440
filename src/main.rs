//! The `toolgate` binary: parses the command line, loads the config, installs
//! logging and metrics, and hands over to the library.

use std::io::{IsTerminal, Read};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use toolgate::commands::probe;
use toolgate::config::{Config, Source};

#[derive(Parser)]
#[command(
    name = "toolgate",
    version,
    about = "OpenAI-compatible gateway that rewrites tool calling per provider"
)]
struct Cli {
    /// Config file (TOML). Defaults to $TOOLGATE_CONFIG, else the embedded default.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Validate the config and print the effective config with secrets redacted.
    Check,
    /// Print the body a provider would receive for a request JSON read from stdin
    /// (its first round, gateway tools included), sent through the gateway to a
    /// loopback listener instead of the provider.
    Render {
        /// The provider (by name) the request goes to.
        #[arg(long)]
        provider: String,
        /// The door the request comes in at.
        #[arg(long, default_value = "/v1/chat/completions")]
        path: String,
        /// Print the body exactly as it would be sent, not pretty-printed.
        #[arg(long)]
        raw: bool,
        /// Seconds to wait for the MCP servers to list their tools.
        #[arg(long, default_value_t = 30)]
        wait: u64,
    },
    /// Print the content and tool calls a model output (read from stdin) turns into.
    Parse {
        /// JSON file with the request's `tools` array (or a whole request).
        #[arg(long, value_name = "FILE")]
        tools: PathBuf,
        /// Call syntax: tag, tool_call, bracket or python.
        #[arg(long, default_value = "tag")]
        syntax: String,
    },
    /// Connect to every configured tool server and list the gateway tools, their sources and schemas.
    Tools {
        /// Seconds to wait for the MCP servers to start and list their tools.
        #[arg(long, default_value_t = 30)]
        wait: u64,
    },
    /// Send tool-use prompts through a provider in each natural syntax (and natively) and
    /// report which syntax the model follows best.
    Probe {
        /// The provider (by name) to probe.
        #[arg(long)]
        provider: String,
        /// The model to ask for (default: the provider's first model, when it is not a pattern).
        #[arg(long)]
        model: Option<String>,
        /// Which syntaxes to try, comma-separated: tag, tool_call, bracket, python, native, rescue.
        #[arg(long, default_value = "tag,tool_call,bracket,python,native,rescue")]
        syntaxes: String,
        /// JSONL file of cases (default: the built-in set); repeat to add files,
        /// and `builtin` adds the built-in set.
        #[arg(long, value_name = "FILE")]
        cases: Vec<PathBuf>,
        /// How many times to send each case in each syntax.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        runs: u32,
        /// `max_tokens` of each request.
        #[arg(long, default_value_t = 256)]
        max_tokens: u32,
        /// Seconds to wait for each answer.
        #[arg(long, default_value_t = 120)]
        timeout: u64,
        /// Print the results as JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// After the table, print the `[providers.tools]` block of the arm that
        /// scored best on first calls and closed loops.
        #[arg(long)]
        recommend: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Command::Parse { tools, syntax }) = &cli.command {
        return parse(tools, syntax);
    }
    let path = cli
        .config
        .or_else(|| std::env::var_os("TOOLGATE_CONFIG").map(PathBuf::from));
    let source = match &path {
        Some(p) => Source::File(p),
        None => Source::Embedded,
    };
    let config = match Config::load(source) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("toolgate: invalid config: {e}");
            return ExitCode::FAILURE;
        }
    };
    match cli.command {
        Some(Command::Check) => {
            write_out(&config.to_redacted_toml());
            for warning in &config.warnings {
                write_err(&format!("toolgate: warning: {warning}\n"));
            }
            write_err("toolgate: config OK\n");
            ExitCode::SUCCESS
        }
        Some(Command::Render {
            provider,
            path,
            raw,
            wait,
        }) => {
            let result = read_stdin()
                .map_err(|e| format!("cannot read stdin: {e}"))
                .and_then(|input| {
                    let what = toolgate::commands::Render {
                        provider: &provider,
                        path: &path,
                        request: input.as_bytes(),
                        wait: std::time::Duration::from_secs(wait),
                    };
                    toolgate::commands::render(&config, &what)
                });
            match result {
                Ok(rendered) if raw => {
                    write_out(&rendered.body);
                    ExitCode::SUCCESS
                }
                Ok(rendered) => print_result(Ok(rendered.pretty())),
                Err(e) => print_result(Err(e)),
            }
        }
        Some(Command::Tools { wait }) => list_tools(&config, wait),
        Some(Command::Probe {
            provider,
            model,
            syntaxes,
            cases,
            runs,
            max_tokens,
            timeout,
            json,
            recommend,
        }) => {
            let options =
                probe_options(provider, model, &syntaxes, cases, runs, max_tokens, timeout);
            match options {
                Ok(options) => probe(config, &options, json, recommend),
                Err(e) => {
                    eprintln!("toolgate: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Some(Command::Parse { .. }) => unreachable!("handled before loading a config"),
        None => serve(config, path),
    }
}

fn parse(tools: &std::path::Path, syntax: &str) -> ExitCode {
    let syntax = match syntax {
        "tag" => toolgate::natural::syntax::Syntax::Tag,
        "tool_call" => toolgate::natural::syntax::Syntax::ToolCall,
        "bracket" => toolgate::natural::syntax::Syntax::Bracket,
        "python" => toolgate::natural::syntax::Syntax::Python,
        other => {
            eprintln!(
                "toolgate: unknown syntax {other:?}; expected tag, tool_call, bracket or python"
            );
            return ExitCode::FAILURE;
        }
    };
    let result = std::fs::read(tools)
        .map_err(|e| format!("cannot read {}: {e}", tools.display()))
        .and_then(|t| {
            let text = read_stdin().map_err(|e| format!("cannot read stdin: {e}"))?;
            toolgate::commands::parse(&t, syntax, &text)
        });
    print_result(result)
}

fn list_tools(config: &Config, wait: u64) -> ExitCode {
    let tokio_runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("toolgate: cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let wait = std::time::Duration::from_secs(wait);
    let (listing, outcome) = tokio_runtime.block_on(toolgate::commands::tools(config, wait));
    write_out(&format!("{listing}\n"));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("toolgate: {e}");
            ExitCode::FAILURE
        }
    }
}

fn probe_options(
    provider: String,
    model: Option<String>,
    syntaxes: &str,
    files: Vec<PathBuf>,
    runs: u32,
    max_tokens: u32,
    timeout: u64,
) -> Result<probe::Options, String> {
    let mut cases = probe::Cases::default();
    if files.is_empty() {
        cases = probe::cases::builtin();
    }
    for path in files {
        let more = if path.as_os_str() == "builtin" {
            probe::cases::builtin()
        } else {
            std::fs::read_to_string(&path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))
                .and_then(|text| probe::cases::from_jsonl(&text))
                .map_err(|e| format!("{}: {e}", path.display()))?
        };
        cases.client.extend(more.client);
        cases.agent.extend(more.agent);
    }
    Ok(probe::Options {
        provider,
        model,
        arms: probe::Arm::parse_list(syntaxes)?,
        cases,
        runs: runs as usize,
        max_tokens,
        timeout: std::time::Duration::from_secs(timeout),
    })
}

fn probe(config: Config, options: &probe::Options, json: bool, recommend: bool) -> ExitCode {
    // Warnings only: an upstream failure says why, the per-request lines stay quiet.
    init_tracing("warn");
    let tokio_runtime = match toolgate::workers::tokio_runtime() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("toolgate: cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let tty = std::io::stderr().is_terminal();
    let mut draw = |p: probe::Progress| {
        if tty {
            eprint!("\r{}", progress_bar(p));
            if p.done == p.total {
                eprint!("\r{:width$}\r", "", width = 60);
            }
        }
    };
    let report = tokio_runtime.block_on(probe::run(config, options, &mut draw));
    toolgate::log_writer::flush();
    match report {
        Ok(report) if json => {
            write_out(&format!("{:#}\n", report.json()));
            ExitCode::SUCCESS
        }
        Ok(report) => {
            let mut out = report.table();
            if recommend {
                out = format!("{out}\n{}", report.recommendation());
            }
            write_out(&out);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("toolgate: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `[#########...........]  9/20  tool_call`
fn progress_bar(p: probe::Progress) -> String {
    const WIDTH: usize = 30;
    let filled = WIDTH * p.done / p.total.max(1);
    format!(
        "[{}{}] {}/{}  {:<9}",
        "#".repeat(filled),
        ".".repeat(WIDTH - filled),
        p.done,
        p.total,
        p.arm.as_str()
    )
}

/// Writes a command's output to stdout. A reader that went away (`toolgate
/// check | head -2`) ends the command quietly, as it would a shell tool.
fn write_out(text: &(impl AsRef<[u8]> + ?Sized)) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_ref()).and_then(|()| out.flush()) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => {
            eprintln!("toolgate: cannot write the output: {e}");
            std::process::exit(1);
        }
    }
}

/// A note on stderr that nobody may be reading any more (`2>&1 | head`).
fn write_err(text: &str) {
    use std::io::Write;
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

fn print_result(result: Result<String, String>) -> ExitCode {
    match result {
        Ok(out) => {
            write_out(&format!("{out}\n"));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("toolgate: {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve(config: Config, path: Option<PathBuf>) -> ExitCode {
    init_tracing("info");
    for warning in &config.warnings {
        tracing::warn!("config: {warning}");
    }
    // The main thread is worker 0: it also accepts and deals connections.
    let started = toolgate::workers::tokio_runtime().and_then(|tokio_runtime| {
        let others = toolgate::workers::Workers::start(config.server.workers.get() - 1)?;
        Ok((tokio_runtime, others))
    });
    let (tokio_runtime, workers) = match started {
        Ok(started) => started,
        Err(e) => {
            eprintln!("toolgate: cannot start the workers: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(telemetry) = &config.telemetry {
        // Before any tokio runtime runs on this thread: the exporter's blocking
        // HTTP client must not be built inside one.
        if let Err(e) = toolgate::telemetry::install(telemetry) {
            eprintln!("toolgate: [telemetry]: {e}");
            return ExitCode::FAILURE;
        }
        let endpoint = toolgate::config::redact::url(&telemetry.traces_url);
        tracing::info!(endpoint = %endpoint, sample_ratio = telemetry.sample_ratio, "exporting traces");
    }
    let dealer = toolgate::workers::Dealer::new(workers.handles());
    let gateway = Arc::new(toolgate::gateway::Gateway::new(Arc::new(config)));
    let serving = gateway.clone();
    let code = tokio_runtime.block_on(async move {
        let gateway = serving;
        let config = gateway.config();
        let listen = config.server.listen;
        let listener = match tokio::net::TcpListener::bind(listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("toolgate: cannot listen on {listen}: {e}");
                return ExitCode::FAILURE;
            }
        };
        tokio::spawn(reload_on_sighup(gateway.clone(), path));
        let shutdown = toolgate::server::shutdown_signal();
        match toolgate::server::run(gateway, listener, dealer, shutdown).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("toolgate: {e}");
                ExitCode::FAILURE
            }
        }
    });
    workers.stop();
    // Transcript rows still queued are written before the process ends.
    gateway.close_store(std::time::Duration::from_secs(5));
    // Spans still queued are exported before the process ends.
    toolgate::telemetry::shutdown(std::time::Duration::from_secs(5));
    toolgate::log_writer::flush();
    code
}

/// SIGHUP: re-read the same config source (and env), validate it, and swap
/// it in; an invalid config is logged and counted, and the old one keeps serving.
async fn reload_on_sighup(gateway: Arc<toolgate::gateway::Gateway>, path: Option<PathBuf>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hup) = signal(SignalKind::hangup()) else {
            tracing::warn!("cannot listen for SIGHUP; config reload is off");
            return;
        };
        while hup.recv().await.is_some() {
            let source = match &path {
                Some(p) => Source::File(p),
                None => Source::Embedded,
            };
            match Config::load(source) {
                // A refused reload is logged and counted by the gateway itself.
                Ok(config) => drop(gateway.reload(config)),
                Err(e) => {
                    metrics::counter!(toolgate::metrics::CONFIG_RELOADS, "outcome" => "invalid")
                        .increment(1);
                    tracing::error!(error = %e, "config reload rejected; the previous config keeps serving");
                }
            }
        }
    }
    #[cfg(not(unix))]
    let _ = (gateway, path);
}

/// Logging to stderr at `TOOLGATE_LOG`, `default` when it is not set.
fn init_tracing(default: &str) {
    let mut directives = std::env::var("TOOLGATE_LOG").unwrap_or_else(|_| default.to_owned());
    // rmcp logs each MCP server's whole initialize result (kilobytes of
    // instructions) at info; toolgate logs it at debug itself.
    if !["rmcp", "debug", "trace"]
        .iter()
        .any(|w| directives.contains(w))
    {
        directives.push_str(",rmcp=warn");
    }
    let filter = tracing_subscriber::EnvFilter::try_new(&directives)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let json = std::env::var("TOOLGATE_LOG_FORMAT").is_ok_and(|v| v == "json");
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(toolgate::log_writer::ParkFlushed);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
    toolgate::log_writer::init(json);
}

fn read_stdin() -> std::io::Result<String> {
    let mut s = String::new();
    std::io::stdin().read_to_string(&mut s)?;
    Ok(s)
}
