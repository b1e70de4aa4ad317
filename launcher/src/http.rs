//! A plain HTTP/1.0 GET: enough for the endpoints the launcher and the benchmarks poll (etcd's
//! `/health`, an admin `/metrics`), without an HTTP client.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The whole answer (status line, headers and body) to `GET path` at `addr`, or `None` when
/// there is none within `timeout`.
pub async fn get(addr: &str, path: &str, timeout: Duration) -> Option<String> {
    let ask = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.ok()?;
        Some(String::from_utf8_lossy(&answer).into_owned())
    };
    tokio::time::timeout(timeout, ask).await.ok().flatten()
}
