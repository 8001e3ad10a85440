//! A throwaway PostgreSQL cluster for a test: `initdb` in a temporary
//! directory, `pg_ctl` on a free loopback port, removed when dropped. The
//! server binaries come from the distribution's package (`bash tests/run.sh`
//! installs it when missing). PostgreSQL refuses to run as root, so as root
//! the cluster belongs to the package's unprivileged `postgres` user.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Postgres {
    dir: PathBuf,
    bin: PathBuf,
    pub port: u16,
}

fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TOOLGATE_TEST_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|p| p.join("initdb").exists())
        .collect();
    found.sort();
    found.pop().unwrap_or_else(|| {
        panic!(
            "\n\n*** The PostgreSQL tests need the server binaries (initdb, pg_ctl). ***\n\
             Run `bash tests/run.sh` once (it installs the distribution's postgresql package),\n\
             or set TOOLGATE_TEST_PG_BIN to their directory.\n"
        )
    })
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

impl Postgres {
    pub fn start() -> Postgres {
        let bin = bin_dir();
        let dir = std::env::temp_dir().join(format!(
            "toolgate-pg-{}-{}",
            std::process::id(),
            rand_suffix()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        if is_root() {
            chown_postgres(&dir);
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let pg = Postgres { dir, bin, port };
        pg.run(
            "initdb",
            &[
                "-D",
                &pg.data(),
                "-U",
                "toolgate",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        );
        pg.start_server();
        pg
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    pub fn url(&self) -> String {
        format!("postgres://toolgate@127.0.0.1:{}/postgres", self.port)
    }

    /// `tool`, run as the cluster's owner.
    fn command(&self, tool: &str) -> Command {
        let program = self.bin.join(tool);
        let mut command = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&program);
            c
        } else {
            Command::new(&program)
        };
        command.current_dir(&self.dir);
        command
    }

    fn run(&self, tool: &str, args: &[&str]) {
        let out = self
            .command(tool)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {tool}: {e}"));
        assert!(
            out.status.success(),
            "{tool} {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn start_server(&self) {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("server.log").display().to_string();
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-o",
                &options,
                "-l",
                &log,
                "-w",
                "start",
            ],
        );
    }

    /// `psql` on the cluster's database, as the URL's user: `script` read
    /// from standard input, one unaligned value per output line.
    pub fn psql(&self) -> Command {
        let mut command = Command::new(self.bin.join("psql"));
        command.args([
            "-X",
            "-q",
            "-tA",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            "127.0.0.1",
            "-p",
            &self.port.to_string(),
            "-U",
            "toolgate",
            "-d",
            "postgres",
        ]);
        command
    }

    /// The output of `sql` run by [`Postgres::psql`] (it must succeed).
    pub fn query(&self, sql: &str) -> String {
        let out = self
            .psql()
            .args(["-c", sql])
            .output()
            .unwrap_or_else(|e| panic!("cannot run psql: {e}"));
        assert!(
            out.status.success(),
            "psql {sql:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Stops the server at once (connections are cut).
    pub fn stop_server(&self) {
        self.run(
            "pg_ctl",
            &["-D", &self.data(), "-m", "immediate", "-w", "stop"],
        );
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .args(["-D", &self.data(), "-m", "immediate", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn chown_postgres(dir: &Path) {
    let out = Command::new("chown")
        .args(["postgres:postgres"])
        .arg(dir)
        .output()
        .expect("chown");
    assert!(
        out.status.success(),
        "as root the cluster needs the `postgres` user (from the postgresql package): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Unique within the test process (tests start clusters at once).
fn rand_suffix() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}
