//! The address a process's outgoing connections come from.
//!
//! By default the kernel picks it (127.0.0.1 for a loopback peer). A process of a test cluster
//! that listens on a loopback address of its own (127.0.0.11, ...) also connects from it, so a
//! firewall rule can cut the traffic between two processes by their addresses alone: that is
//! how the fault tests make network partitions. Set once at start-up, before any connection.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::OnceLock;
use tokio::net::{TcpSocket, TcpStream};

static SOURCE_IP: OnceLock<IpAddr> = OnceLock::new();

/// Makes every later [`connect`] of this process come from `ip` (port chosen by the kernel).
/// Fails if a different address was set already.
pub fn bind_outgoing_to(ip: IpAddr) -> Result<(), String> {
    let set = SOURCE_IP.get_or_init(|| ip);
    if *set == ip {
        Ok(())
    } else {
        Err(format!(
            "outgoing connections already come from {set}, not {ip}"
        ))
    }
}

/// The address outgoing connections come from, when one was set.
pub fn outgoing_ip() -> Option<IpAddr> {
    SOURCE_IP.get().copied()
}

/// `TcpStream::connect`, from the process's source address when one was set.
pub async fn connect(addr: &str) -> io::Result<TcpStream> {
    let Some(ip) = outgoing_ip() else {
        return TcpStream::connect(addr).await;
    };
    let mut last_error = None;
    for target in tokio::net::lookup_host(addr).await? {
        if target.is_ipv4() != ip.is_ipv4() {
            continue;
        }
        match connect_from(ip, target).await {
            Ok(stream) => return Ok(stream),
            Err(error) => last_error = Some(error),
        }
    }
    Err(last_error.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::AddrNotAvailable,
            format!("{addr} has no address of the family of the source address {ip}"),
        )
    }))
}

async fn connect_from(ip: IpAddr, target: SocketAddr) -> io::Result<TcpStream> {
    let socket = match ip {
        IpAddr::V4(_) => TcpSocket::new_v4()?,
        IpAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.bind(SocketAddr::new(ip, 0))?;
    socket.connect(target).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connections_come_from_the_source_address() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let ip: IpAddr = "127.0.0.23".parse().unwrap();
        bind_outgoing_to(ip).unwrap();
        assert!(bind_outgoing_to("127.0.0.24".parse().unwrap()).is_err());
        let (connected, accepted) = tokio::join!(connect(&addr), listener.accept());
        connected.unwrap();
        assert_eq!(accepted.unwrap().1.ip(), ip);
    }
}
