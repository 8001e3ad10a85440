//! The real `toolgate` binary on a loopback port, with its own environment
//! (keys come from env vars), stopped when dropped.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Binary {
    child: Child,
    pub port: u16,
    /// Every line it wrote to stderr so far.
    pub log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    config: String,
    env: Vec<(String, String)>,
}

impl Binary {
    /// Serves `config` (its `listen` is replaced by a free port) with `env`.
    pub fn start(config: &str, env: &[(&str, &str)]) -> Binary {
        Binary::start_as(config, env, None)
    }

    /// [`Binary::start`] with `cwd` as its working directory (where a
    /// relative path in the config points).
    #[allow(dead_code)]
    pub fn start_in(config: &str, env: &[(&str, &str)], cwd: &std::path::Path) -> Binary {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Binary::start_on_in(port, config, env, None, Some(cwd))
    }

    /// [`Binary::start`], as user `uid` when given (the test runs as root).
    pub fn start_as(config: &str, env: &[(&str, &str)], uid: Option<u32>) -> Binary {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Binary::start_on(port, config, env, uid)
    }

    /// Kills the process (SIGKILL, as a crash would) and waits for it.
    #[allow(dead_code)]
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts it again on the same port with the same config.
    #[allow(dead_code)]
    pub fn restart(&mut self) {
        self.kill();
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let config = self.config.clone();
        *self = Binary::start_on(self.port, &config, &env, None);
    }

    /// Sends a signal (SIGSTOP to pause it, SIGCONT to resume).
    #[allow(dead_code)]
    pub fn signal(&self, signal: i32) {
        let pid = i32::try_from(self.child.id()).unwrap();
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    }

    fn start_on(port: u16, config: &str, env: &[(&str, &str)], uid: Option<u32>) -> Binary {
        Binary::start_on_in(port, config, env, uid, None)
    }

    fn start_on_in(
        port: u16,
        config: &str,
        env: &[(&str, &str)],
        uid: Option<u32>,
        cwd: Option<&std::path::Path>,
    ) -> Binary {
        let dir = std::env::temp_dir().join(format!("toolgate-bin-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("toolgate.toml");
        std::fs::write(&path, config).unwrap();
        if uid.is_some() {
            use std::os::unix::fs::PermissionsExt;
            for p in [&dir, &path] {
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
        }
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolgate"));
        command
            .arg("--config")
            .arg(&path)
            .env("TOOLGATE_SERVER__LISTEN", format!("127.0.0.1:{port}"))
            .env("TOOLGATE_LOG", "warn")
            .stderr(Stdio::piped());
        for (k, v) in env {
            command.env(k, v);
        }
        if let Some(cwd) = cwd {
            command.current_dir(cwd);
        }
        if let Some(uid) = uid {
            std::os::unix::process::CommandExt::uid(&mut command, uid);
        }
        let mut child = command.spawn().unwrap();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = log.clone();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                eprintln!("[toolgate:{port}] {line}");
                kept.lock().unwrap().push(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(15);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("toolgate exited at start: {status}");
            }
            assert!(Instant::now() < deadline, "toolgate did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Binary {
            child,
            port,
            log,
            config: config.to_owned(),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `command` with `input` on its stdin and its stdout and stderr
/// captured; what it wrote once it has ended.
pub fn run_with_input(command: &mut Command, input: &[u8]) -> std::process::Output {
    use std::io::Write;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}
