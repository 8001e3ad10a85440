//! A worker's own connection to Redis: one socket, one call at a time,
//! driven by the task that makes the call. It has no task of its own and no
//! channel: a call is a write and a read on the calling worker's reactor.
//! The `redis` crate encodes every command and decodes every reply (this is
//! its [`redis::aio::ConnectionLike`], so a [`redis::Script`] runs on it as on
//! the crate's own connections: `EVALSHA`, and the script loaded on
//! `NOSCRIPT`).
//!
//! A connection whose call failed or was cut short (a timeout drops the
//! call's future) must not be used again: a reply may still be on its way.
//! Its owner drops it.

use std::io;

use redis::{
    Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult,
    Value,
};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// The state of a reply read in parts, as the `redis` crate's
/// [`redis::parse_redis_value_async`] keeps it.
type Replies = combine::stream::Decoder<
    combine::parser::combinator::AnySendSyncPartialState,
    combine::stream::PointerOffset<[u8]>,
>;

/// One connection to Redis, used by one call at a time.
pub(super) struct Connection {
    socket: TcpStream,
    replies: Replies,
    /// The last command's bytes; its capacity serves the next.
    packed: Vec<u8>,
    db: i64,
}

impl Connection {
    /// Connects to `info`'s address and authenticates and selects its
    /// database as its URL says.
    pub(super) async fn open(info: &ConnectionInfo) -> RedisResult<Connection> {
        // `redis_url` is a `redis://` URL (`config::limits`).
        let ConnectionAddr::Tcp(host, port) = info.addr() else {
            return Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "the limiter connects to Redis over plain TCP only",
            )));
        };
        let socket = TcpStream::connect((host.as_str(), *port)).await?;
        // A call is one write, then its reply: nothing to gather.
        socket.set_nodelay(true)?;
        let settings = info.redis_settings();
        let mut connection = Connection {
            socket,
            replies: Replies::new(),
            packed: Vec::new(),
            db: settings.db(),
        };
        if let Some(password) = settings.password() {
            let mut auth = redis::cmd("AUTH");
            if let Some(username) = settings.username() {
                auth.arg(username);
            }
            auth.arg(password).exec_async(&mut connection).await?;
        }
        if settings.db() != 0 {
            redis::cmd("SELECT")
                .arg(settings.db())
                .exec_async(&mut connection)
                .await?;
        }
        Ok(connection)
    }

    /// Whether the server is still there, as far as the socket tells
    /// without waiting: a restarted Redis closed its end. (Nothing else
    /// arrives between calls.)
    pub(super) fn is_open(&self) -> bool {
        let mut byte = [0];
        matches!(self.socket.try_read(&mut byte), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// Sends `self.packed`, then reads `count` replies.
    async fn call(&mut self, count: usize) -> RedisResult<Vec<Value>> {
        self.socket.write_all(&self.packed).await?;
        let mut replies = Vec::with_capacity(count);
        for _ in 0..count {
            replies.push(self.reply().await?);
        }
        Ok(replies)
    }

    async fn reply(&mut self) -> RedisResult<Value> {
        redis::parse_redis_value_async(&mut self.replies, &mut self.socket).await
    }
}

impl redis::aio::ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            self.packed.clear();
            cmd.write_packed_command(&mut self.packed);
            let mut replies = self.call(1).await?;
            replies.pop().ok_or_else(|| no_reply().into())
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            self.packed = pipeline.get_packed_pipeline();
            let mut replies = self.call(offset + count).await?;
            Ok(replies.split_off(offset))
        })
    }

    fn get_db(&self) -> i64 {
        self.db
    }
}

fn no_reply() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "Redis sent no reply")
}

#[cfg(test)]
mod tests {
    use redis::IntoConnectionInfo;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// What a server got, and the replies it sent, on one accepted
    /// connection: it answers each command it reads with the next reply.
    async fn serve(listener: TcpListener, replies: Vec<&'static [u8]>) -> Vec<u8> {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut got = Vec::new();
        for reply in replies {
            let mut buf = [0; 4096];
            let n = socket.read(&mut buf).await.unwrap();
            got.extend_from_slice(&buf[..n]);
            socket.write_all(reply).await.unwrap();
        }
        got
    }

    /// A loopback listener and the URL `redis://{auth}127.0.0.1:PORT{db}` of it.
    async fn listening(auth: &str, db: &str) -> (TcpListener, ConnectionInfo) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let info = format!("redis://{auth}127.0.0.1:{port}{db}")
            .into_connection_info()
            .unwrap();
        (listener, info)
    }

    #[tokio::test]
    async fn a_url_with_a_password_and_a_database_authenticates_and_selects_it() {
        let (listener, info) = listening("user:secret@", "/3").await;
        let server = tokio::spawn(serve(listener, vec![b"+OK\r\n", b"+OK\r\n", b":7\r\n"]));
        let mut connection = Connection::open(&info).await.unwrap();
        assert_eq!(redis::aio::ConnectionLike::get_db(&connection), 3);
        let seven: i64 = redis::cmd("INCR")
            .arg("k")
            .query_async(&mut connection)
            .await
            .unwrap();
        assert_eq!(seven, 7);
        let got = server.await.unwrap();
        assert_eq!(
            String::from_utf8(got).unwrap(),
            "*3\r\n$4\r\nAUTH\r\n$4\r\nuser\r\n$6\r\nsecret\r\n\
             *2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n\
             *2\r\n$4\r\nINCR\r\n$1\r\nk\r\n"
        );
    }

    #[tokio::test]
    async fn a_refused_password_fails_the_connection() {
        let (listener, info) = listening(":nope@", "").await;
        tokio::spawn(serve(listener, vec![b"-WRONGPASS invalid password\r\n"]));
        let error = Connection::open(&info).await.err().unwrap();
        assert!(error.to_string().contains("WRONGPASS"), "{error}");
    }

    #[tokio::test]
    async fn a_connection_the_server_closed_is_not_open() {
        let (listener, info) = listening("", "").await;
        let server = tokio::spawn(async move { listener.accept().await.unwrap().0 });
        let connection = Connection::open(&info).await.unwrap();
        let socket = server.await.unwrap();
        assert!(connection.is_open());
        drop(socket);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while connection.is_open() {
            assert!(
                std::time::Instant::now() < deadline,
                "a closed end is never seen"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn a_reply_cut_short_is_an_error() {
        let (listener, info) = listening("", "").await;
        tokio::spawn(serve(listener, vec![b"*2\r\n:1\r\n"]));
        let mut connection = Connection::open(&info).await.unwrap();
        let reply: RedisResult<Vec<i64>> = redis::cmd("X").query_async(&mut connection).await;
        assert!(reply.is_err(), "{reply:?}");
    }
}
