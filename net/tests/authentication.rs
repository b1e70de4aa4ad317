#![allow(clippy::unwrap_used)] // tests may unwrap freely (see clippy.toml)

//! A listener that requires authentication, against a toy service on 127.0.0.1: nothing but
//! `Ping` and `Authenticate` before a SCRAM exchange succeeds; the service then sees the user
//! on every request (pipelined ones included); a wrong password, an unknown user and a silent
//! connection are closed; a listener that requires nothing answers `NotRequired`.

use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tailstream_auth::scram::new_credential;
use tailstream_net::login::{Login, log_in};
use tailstream_net::scram_server::{CredentialSource, ScramAuthenticator};
use tailstream_net::server::{ServerLimits, serve};
use tailstream_net::{
    Authentication, BodyBudget, ConnectionLimits, Reply, Request, Response, RpcClient,
    RpcClientConfig, Service,
};
use tailstream_wire::frame::FrameHeader;
use tailstream_wire::messages::{ScramCredential, ScramMechanism};
use tailstream_wire::{Opcode, RequestId, Status};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// One user, "alice" with password "wonderland", both mechanisms, until `delete`d.
#[derive(Debug)]
struct OneUser(Arc<Mutex<Arc<Vec<ScramCredential>>>>);

impl OneUser {
    fn delete(&self) {
        *self.0.lock().unwrap() = Arc::new(Vec::new());
    }
}

impl CredentialSource for OneUser {
    fn credentials<'a>(
        &'a self,
        user: &'a str,
    ) -> BoxFuture<'a, Result<Arc<Vec<ScramCredential>>, String>> {
        let found = if user == "alice" {
            self.0.lock().unwrap().clone()
        } else {
            Arc::new(Vec::new())
        };
        futures::future::ready(Ok(found)).boxed()
    }
}

/// Answers Produce with the user its connection authenticated as; lets `ListUsers` in before
/// authentication (as the coordinator lets in what carries the admin token).
struct WhoAmI;

impl Service for WhoAmI {
    fn dispatch(&self, request: Request) -> Reply {
        let user = request.session.user().unwrap_or("(nobody)").to_owned();
        Reply::Ready(Response::ok_parts(vec![Bytes::from(user)]))
    }

    fn open_before_authentication(&self, opcode: Opcode) -> bool {
        opcode == Opcode::ListUsers
    }
}

async fn start(required: bool) -> (String, watch::Sender<bool>) {
    start_with(required, Duration::from_millis(800)).await
}

async fn start_with(required: bool, handshake_timeout: Duration) -> (String, watch::Sender<bool>) {
    let (addr, stop, _) = start_full(required, handshake_timeout, None).await;
    (addr, stop)
}

async fn start_full(
    required: bool,
    handshake_timeout: Duration,
    recheck_every: Option<Duration>,
) -> (String, watch::Sender<bool>, OneUser) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (stop, stopped) = watch::channel(false);
    let credentials = ScramMechanism::ALL
        .iter()
        .map(|&m| new_credential(m, "wonderland", 4096).unwrap())
        .collect();
    let shared = Arc::new(Mutex::new(Arc::new(credentials)));
    let authentication = required.then(|| Authentication {
        authenticator: Arc::new(ScramAuthenticator::new(OneUser(shared.clone()))),
        handshake_timeout,
        recheck_every,
    });
    let limits = ServerLimits {
        connections: ConnectionLimits {
            connections_max: 16,
            connections_per_address_max: 16,
        },
        requests_in_flight_per_connection_max: 8,
        frame_body_bytes_max: 1 << 20,
        idle_timeout: Duration::from_secs(60),
        request_read_timeout: Duration::from_secs(10),
        body_budget: BodyBudget::new("test", 1 << 20),
        tls: None,
        authentication,
    };
    tokio::spawn(serve(listener, "test", Arc::new(WhoAmI), limits, stopped));
    (addr, stop, OneUser(shared))
}

async fn connect(addr: &str) -> RpcClient {
    RpcClient::connect(addr, RpcClientConfig::default())
        .await
        .unwrap()
}

fn login(user: &str, password: &str, mechanism: ScramMechanism) -> Login {
    Login::new(user, password, mechanism)
}

#[tokio::test]
async fn only_an_authenticated_connection_is_served_and_as_its_user() {
    let (addr, _stop) = start(true).await;
    let client = connect(&addr).await;
    // Before authenticating: Ping and what the service lets in, nothing else.
    client.call_parts(Opcode::Ping, vec![]).await.unwrap();
    let open = client.call_parts(Opcode::ListUsers, vec![]).await.unwrap();
    assert_eq!(open, "(nobody)");
    let refused = client
        .call_parts(Opcode::Produce, vec![])
        .await
        .unwrap_err();
    assert_eq!(refused.status(), Some(Status::AuthenticationRequired));
    // Both mechanisms; then every request, pipelined ones too, is the user's.
    for mechanism in ScramMechanism::ALL {
        let client = connect(&addr).await;
        log_in(&client, &login("alice", "wonderland", *mechanism))
            .await
            .unwrap();
        let answers = (0..20).map(|_| client.call_parts(Opcode::Produce, vec![]));
        for answer in futures::future::join_all(answers).await {
            assert_eq!(answer.unwrap(), "alice");
        }
    }
}

#[tokio::test]
async fn a_wrong_password_or_an_unknown_user_fails_alike_and_is_closed() {
    let (addr, _stop) = start(true).await;
    for (user, password) in [("alice", "looking-glass"), ("mallory", "wonderland")] {
        let client = connect(&addr).await;
        let error = log_in(&client, &login(user, password, ScramMechanism::Sha256))
            .await
            .unwrap_err();
        assert_eq!(
            error.status(),
            Some(Status::AuthenticationFailed),
            "{error}"
        );
        assert!(
            error.to_string().contains("wrong user name or password"),
            "{error}"
        );
        // The server closed the connection after its refusal.
        let next = client.call_parts(Opcode::Ping, vec![]).await;
        assert!(next.is_err(), "{user}: still open");
    }
}

#[tokio::test]
async fn a_connection_that_does_not_authenticate_in_time_is_closed() {
    let (addr, _stop) = start(true).await;
    let opened = Instant::now();
    let mut silent = TcpStream::connect(&addr).await.unwrap();
    let mut buffer = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(10), silent.read(&mut buffer))
        .await
        .expect("closed within 10 s");
    assert!(matches!(read, Ok(0) | Err(_)));
    let lived = opened.elapsed();
    assert!(
        lived >= Duration::from_millis(700) && lived < Duration::from_secs(5),
        "closed after {lived:?}"
    );
}

#[tokio::test]
async fn a_listener_that_requires_nothing_says_so() {
    let (addr, _stop) = start(false).await;
    let client = connect(&addr).await;
    log_in(
        &client,
        &login("anyone", "anything", ScramMechanism::Sha512),
    )
    .await
    .unwrap();
    let answer = client.call_parts(Opcode::Produce, vec![]).await.unwrap();
    assert_eq!(answer, "(nobody)", "nothing was proven");
}

#[tokio::test]
async fn a_large_request_before_authenticating_is_closed_on_its_header() {
    // A handshake timeout far off: the close comes from the header alone.
    let (addr, _stop) = start_with(true, Duration::from_secs(30)).await;
    let body = vec![0u8; 512 << 10];
    let header = FrameHeader::request(Opcode::ListUsers, RequestId(1)).encode_for_body(&[&body]);
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    let sent = Instant::now();
    stream.write_all(&header).await.unwrap();
    let mut buffer = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buffer))
        .await
        .expect("closed within 10 s");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "{:?}",
        sent.elapsed()
    );
}

#[tokio::test]
async fn a_session_ends_once_its_user_is_deleted() {
    let recheck = Duration::from_millis(200);
    let (addr, _stop, users) = start_full(true, Duration::from_secs(5), Some(recheck)).await;
    let client = connect(&addr).await;
    log_in(
        &client,
        &login("alice", "wonderland", ScramMechanism::Sha256),
    )
    .await
    .unwrap();
    // Rechecked several times while the user exists: the session goes on.
    tokio::time::sleep(recheck * 4).await;
    assert_eq!(
        client.call_parts(Opcode::Produce, vec![]).await.unwrap(),
        "alice"
    );
    users.delete();
    let deleted = Instant::now();
    while client.call_parts(Opcode::Produce, vec![]).await.is_ok() {
        assert!(deleted.elapsed() < Duration::from_secs(5), "still served");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
