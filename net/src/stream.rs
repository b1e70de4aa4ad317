//! A connection that is plain TCP or TLS over TCP, and its two halves.
//!
//! Plain connections split into tokio's owned TCP halves, exactly as before TLS existed, so a
//! cluster without TLS pays nothing for it. A TLS connection's halves share one session behind
//! tokio's split lock (a TLS record layer cannot be read and written apart).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

type ServerSession = tokio_rustls::server::TlsStream<TcpStream>;
type ClientSession = tokio_rustls::client::TlsStream<TcpStream>;

/// One connection, as a listener accepted it or a client made it.
#[derive(Debug)]
pub enum Stream {
    Plain(TcpStream),
    TlsServer(Box<ServerSession>),
    TlsClient(Box<ClientSession>),
}

/// The read half of a [`Stream`].
#[derive(Debug)]
pub enum StreamReader {
    Plain(OwnedReadHalf),
    TlsServer(tokio::io::ReadHalf<ServerSession>),
    TlsClient(tokio::io::ReadHalf<ClientSession>),
}

/// The write half of a [`Stream`].
#[derive(Debug)]
pub enum StreamWriter {
    Plain(OwnedWriteHalf),
    TlsServer(tokio::io::WriteHalf<ServerSession>),
    TlsClient(tokio::io::WriteHalf<ClientSession>),
}

impl Stream {
    /// The TCP socket underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(tcp) => tcp,
            Stream::TlsServer(session) => session.get_ref().0,
            Stream::TlsClient(session) => session.get_ref().0,
        }
    }

    pub fn is_tls(&self) -> bool {
        !matches!(self, Stream::Plain(_))
    }

    /// Small frames (acks, pings) must not wait for Nagle.
    pub fn set_nodelay(&self) {
        let _ = self.tcp().set_nodelay(true);
    }

    pub fn into_split(self) -> (StreamReader, StreamWriter) {
        match self {
            Stream::Plain(tcp) => {
                let (reader, writer) = tcp.into_split();
                (StreamReader::Plain(reader), StreamWriter::Plain(writer))
            }
            Stream::TlsServer(session) => {
                let (reader, writer) = tokio::io::split(*session);
                (
                    StreamReader::TlsServer(reader),
                    StreamWriter::TlsServer(writer),
                )
            }
            Stream::TlsClient(session) => {
                let (reader, writer) = tokio::io::split(*session);
                (
                    StreamReader::TlsClient(reader),
                    StreamWriter::TlsClient(writer),
                )
            }
        }
    }
}

/// Forwards a poll to whichever variant `self` is.
macro_rules! each_variant {
    ($this:expr, $inner:ident => $call:expr) => {
        match $this.get_mut() {
            Self::Plain($inner) => $call,
            Self::TlsServer($inner) => $call,
            Self::TlsClient($inner) => $call,
        }
    };
}

macro_rules! impl_async_read {
    ($type:ty) => {
        impl AsyncRead for $type {
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut ReadBuf<'_>,
            ) -> Poll<io::Result<()>> {
                each_variant!(self, inner => Pin::new(inner).poll_read(cx, buf))
            }
        }
    };
}

macro_rules! impl_async_write {
    ($type:ty) => {
        impl AsyncWrite for $type {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                each_variant!(self, inner => Pin::new(inner).poll_write(cx, buf))
            }

            fn poll_write_vectored(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                bufs: &[io::IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                each_variant!(self, inner => Pin::new(inner).poll_write_vectored(cx, bufs))
            }

            fn is_write_vectored(&self) -> bool {
                match self {
                    Self::Plain(inner) => inner.is_write_vectored(),
                    Self::TlsServer(inner) => inner.is_write_vectored(),
                    Self::TlsClient(inner) => inner.is_write_vectored(),
                }
            }

            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                each_variant!(self, inner => Pin::new(inner).poll_flush(cx))
            }

            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                each_variant!(self, inner => Pin::new(inner).poll_shutdown(cx))
            }
        }
    };
}

impl_async_read!(Stream);
impl_async_write!(Stream);
impl_async_read!(StreamReader);
impl_async_write!(StreamWriter);
