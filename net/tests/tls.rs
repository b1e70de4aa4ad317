#![allow(clippy::unwrap_used)] // tests may unwrap freely (see clippy.toml)

//! TLS on a listener: a member's certificate opens a peer listener, and nothing else does.

use bytes::Bytes;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tailstream_net::server::{ServerLimits, serve};
use tailstream_net::tls::{self, MemberTls, ServerTls, TlsFiles};
use tailstream_net::{
    BodyBudget, ConnectionLimits, Reply, Request, Response, RpcClient, RpcClientConfig, Service,
};
use tailstream_wire::Opcode;
use tokio::net::TcpListener;
use tokio::sync::watch;

struct Echo;

impl Service for Echo {
    fn dispatch(&self, request: Request) -> Reply {
        Reply::Ready(Response::ok_parts(vec![request.body]))
    }
}

fn files(dir: &Path) -> TlsFiles {
    TlsFiles {
        ca_path: dir.join("ca.pem"),
        cert_path: Some(dir.join("member.pem")),
        key_path: Some(dir.join("member.key")),
    }
}

/// A fresh CA's member TLS, and a client of that CA with no certificate of its own.
fn cluster(name: &str) -> (MemberTls, tls::TlsConnector) {
    let dir =
        std::env::temp_dir().join(format!("tailstream-net-tls-{}-{name}", std::process::id()));
    tailstream_launcher::tls::make_dev_certificates(&dir, &[]).unwrap();
    let member = tls::member(&files(&dir)).unwrap();
    let mut ca_only = files(&dir);
    ca_only.cert_path = None;
    ca_only.key_path = None;
    let client = tls::client(&ca_only).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    (member, client)
}

async fn start(tls: ServerTls) -> (String, watch::Sender<bool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (stop, stopped) = watch::channel(false);
    let limits = ServerLimits {
        connections: ConnectionLimits {
            connections_max: 16,
            connections_per_address_max: 16,
        },
        requests_in_flight_per_connection_max: 8,
        frame_body_bytes_max: 1 << 20,
        idle_timeout: Duration::from_secs(60),
        request_read_timeout: Duration::from_secs(2),
        body_budget: BodyBudget::new("test", 1 << 20),
        tls: Some(tls),
        authentication: None,
    };
    tokio::spawn(serve(listener, "test", Arc::new(Echo), limits, stopped));
    (addr, stop)
}

/// A call over a connection made through `connector`, or the error that stopped it.
async fn echo(addr: &str, connector: Option<&tls::TlsConnector>) -> Result<Bytes, String> {
    let stream = tls::connect_with(addr, connector)
        .await
        .map_err(|e| e.to_string())?;
    let config = RpcClientConfig {
        request_timeout_ms: 3000,
        ..RpcClientConfig::default()
    };
    let client = RpcClient::over(stream, addr, config);
    client
        .call_parts(Opcode::Ping, vec![Bytes::from_static(b"hello")])
        .await
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn a_peer_listener_answers_members_of_its_own_ca_only() {
    let (member, client) = cluster("cluster");
    let (stranger, stranger_client) = cluster("stranger");
    let (peer_addr, _stop_peer) = start(member.peers.clone()).await;
    let (client_addr, _stop_client) = start(member.clients.clone()).await;

    // A member of the cluster: both listeners answer.
    assert_eq!(
        echo(&peer_addr, Some(&member.connector)).await.unwrap(),
        "hello"
    );
    assert_eq!(
        echo(&client_addr, Some(&member.connector)).await.unwrap(),
        "hello"
    );

    // A client that trusts the CA but has no certificate: the client listener answers, the
    // peer listener does not.
    assert_eq!(echo(&client_addr, Some(&client)).await.unwrap(), "hello");
    assert!(
        echo(&peer_addr, Some(&client)).await.is_err(),
        "a peer listener must require a certificate"
    );

    // A member of another cluster (its own CA): refused by the peer listener, and its clients
    // refuse this cluster's certificate.
    assert!(echo(&peer_addr, Some(&stranger.connector)).await.is_err());
    assert!(echo(&client_addr, Some(&stranger_client)).await.is_err());

    // A plain-text request on a TLS listener is answered TlsRequired, with how to connect.
    for addr in [&client_addr, &peer_addr] {
        let refused = echo(addr, None).await.unwrap_err();
        assert!(
            refused.contains("TlsRequired") && refused.contains("TLS only"),
            "{refused}"
        );
    }

    // The listeners survived all of it.
    assert_eq!(
        echo(&peer_addr, Some(&member.connector)).await.unwrap(),
        "hello"
    );
    assert_eq!(echo(&client_addr, Some(&client)).await.unwrap(), "hello");
}
