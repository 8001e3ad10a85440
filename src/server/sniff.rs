//! Telling HTTP/1.1 from HTTP/2 on a new connection.
//!
//! With TLS, ALPN says which. Without it (or when the client offered no
//! ALPN), a client speaking HTTP/2 with prior knowledge opens with the
//! 24-byte connection preface; anything else is HTTP/1.1. The bytes read to
//! decide are handed back to the protocol's parser by [`Rewound`].

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

/// The HTTP/2 connection preface (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    Http2,
}

/// Reads until the first bytes match the preface or cannot: as few bytes
/// as that takes (an HTTP/1.1 request line differs at its first byte).
/// Fails if the connection ends first.
pub async fn sniff<I: AsyncRead + Unpin>(io: &mut I) -> io::Result<(Protocol, BytesMut)> {
    let mut seen = BytesMut::with_capacity(PREFACE.len());
    loop {
        let matched = seen.len().min(PREFACE.len());
        if seen[..matched] != PREFACE[..matched] {
            return Ok((Protocol::Http1, seen));
        }
        if matched == PREFACE.len() {
            return Ok((Protocol::Http2, seen));
        }
        if io.read_buf(&mut seen).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
}

/// A connection whose first bytes were already read: they are read again
/// first, together with whatever the socket has ready after them. (Handed
/// over alone, they made hyper's next read find its 8 KiB buffer 24 bytes
/// short and double it: 8 KiB more per connection, for its whole life.)
pub struct Rewound<I> {
    prefix: BytesMut,
    inner: I,
}

impl<I> Rewound<I> {
    pub fn new(prefix: BytesMut, inner: I) -> Self {
        Rewound { prefix, inner }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Rewound<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.prefix.is_empty() {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        let n = this.prefix.len().min(buf.remaining());
        buf.put_slice(&this.prefix[..n]);
        this.prefix.advance(n);
        if this.prefix.is_empty() && buf.remaining() > 0 {
            // Bytes were delivered either way: a pending or failed read now
            // shows on the next call.
            let _ = Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        Poll::Ready(Ok(()))
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Rewound<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    async fn sniffed(chunks: &[&[u8]]) -> (io::Result<(Protocol, BytesMut)>, Vec<u8>) {
        let (mut client, mut server) = tokio::io::duplex(1024);
        let sent: Vec<u8> = chunks.concat();
        let chunks: Vec<Vec<u8>> = chunks.iter().map(|c| c.to_vec()).collect();
        let writer = tokio::spawn(async move {
            for chunk in chunks {
                client.write_all(&chunk).await.unwrap();
                tokio::task::yield_now().await;
            }
            client.shutdown().await.unwrap();
        });
        let result = sniff(&mut server).await;
        let mut replayed = Vec::new();
        if let Ok((_, prefix)) = &result {
            let mut rewound = Rewound::new(prefix.clone(), server);
            rewound.read_to_end(&mut replayed).await.unwrap();
        }
        writer.await.unwrap();
        assert!(
            replayed.is_empty() || replayed == sent,
            "every byte is read again"
        );
        (result, replayed)
    }

    #[tokio::test]
    async fn http1_is_told_at_the_first_differing_byte() {
        let (result, replayed) = sniffed(&[b"P", b"OST / HTTP/1.1\r\n\r\n"]).await;
        let (protocol, prefix) = result.unwrap();
        assert_eq!(protocol, Protocol::Http1);
        assert!(
            b"POST / HTTP/1.1\r\n\r\n".starts_with(&prefix),
            "{prefix:?}"
        );
        assert_eq!(replayed, b"POST / HTTP/1.1\r\n\r\n");
        let (result, _) = sniffed(&[b"GET /healthz HTTP/1.1\r\n\r\n"]).await;
        assert_eq!(result.unwrap().0, Protocol::Http1);
    }

    #[tokio::test]
    async fn the_preface_in_pieces_is_http2() {
        let (result, replayed) =
            sniffed(&[b"PRI * HT", b"TP/2.0\r\n\r\nSM\r\n\r\n", b"\0\0"]).await;
        assert_eq!(result.unwrap().0, Protocol::Http2);
        assert!(replayed.starts_with(PREFACE));
    }

    #[tokio::test]
    async fn the_first_read_after_sniffing_returns_the_prefix_and_what_follows() {
        let (mut client, mut server) = tokio::io::duplex(1024);
        let request =
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}";
        client.write_all(request).await.unwrap();
        let (protocol, prefix) = sniff(&mut server).await.unwrap();
        assert_eq!(protocol, Protocol::Http1);
        let mut rewound = Rewound::new(prefix, server);
        let mut buf = [0u8; 8192];
        let n = rewound.read(&mut buf).await.unwrap();
        assert_eq!(
            &buf[..n],
            request,
            "one read: a parser sees the whole head at once"
        );
    }

    #[tokio::test]
    async fn a_connection_that_ends_before_deciding_is_an_error() {
        let (result, _) = sniffed(&[b"PRI"]).await;
        assert_eq!(result.unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        let (result, _) = sniffed(&[]).await;
        assert!(result.is_err());
    }
}
