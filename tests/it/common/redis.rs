//! A throwaway Redis for a test: the distribution's `redis-server` (`bash
//! tests/run.sh` installs it when missing) on a free loopback port, with
//! nothing saved to disk, killed when dropped. `stop` and `start` take it
//! down and bring it back on the same port, as an outage would; `signal`
//! stalls it and `flush_all` empties it.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Redis {
    child: Option<Child>,
    pub port: u16,
}

impl Redis {
    pub fn start() -> Redis {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut redis = Redis { child: None, port };
        redis.up();
        redis
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts the server again (after [`Redis::stop`]), empty.
    pub fn up(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "\n\n*** The limit tests need redis-server ({e}). ***\n\
                     Run `bash tests/run.sh` once (it installs the distribution's redis-server package).\n"
                )
            });
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends the server a signal: SIGSTOP stalls it (connections stay
    /// open, nothing is answered), SIGCONT lets it run what waited.
    #[allow(dead_code)]
    pub fn signal(&self, signal: i32) {
        let child = self.child.as_ref().expect("redis-server runs");
        let pid = i32::try_from(child.id()).unwrap();
        // SAFETY: a signal to our own child process.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    }

    /// Empties the server, as a restart without persistence would.
    #[allow(dead_code)]
    pub async fn flush_all(&self) {
        let client = ::redis::Client::open(self.url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let _: () = ::redis::cmd("FLUSHALL")
            .query_async(&mut conn)
            .await
            .unwrap();
    }

    /// Kills the server, as a crash would.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}
