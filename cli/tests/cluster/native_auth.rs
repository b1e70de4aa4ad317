//! Issue 23's native authentication and access control: with
//! `security.client_authentication`, the brokers' and the coordinator's client listeners answer
//! nothing but `Authenticate` (and the admin token's user operations) until a client proves a
//! user with SCRAM; then every request is checked against the access control rules. Each
//! refusal is the one a user can act on: authentication required, wrong user or password,
//! not authorized (naming the operation and the stream). Everything runs through the CLI, as a
//! user would, so this test process never sets a login of its own.

use crate::common;

use common::hostile::connect_from_elsewhere;
use common::{TEST_TIMEOUT, TestCluster};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;

pub(crate) const ADMIN_TOKEN: &str = "native-auth-admin-token-0123";

pub(crate) const OVERRIDES: &str = "[security]\nadmin_token = \"native-auth-admin-token-0123\"\n\
                         client_authentication = true\nsuper_users = [\"root\"]\n\
                         [listeners]\nhandshake_timeout_ms = 1500\n";

/// Brokers list the rules every 5 s: a change applies well within this.
const RULES_APPLIED_WITHIN: Duration = Duration::from_secs(30);

/// `tailstream ARGS` as `user` (with `password`; `None`: no user at all), with the admin
/// token; (success, stdout, stderr).
pub(crate) async fn as_user(
    test: &TestCluster,
    user: Option<(&str, &str)>,
    args: &[&str],
    stdin: &[u8],
) -> (bool, String, String) {
    let mut command = test.cli_command(args);
    command
        .env("TAILSTREAM_ADMIN_TOKEN", ADMIN_TOKEN)
        .env_remove("TAILSTREAM_USER")
        .env_remove("TAILSTREAM_PASSWORD")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some((user, password)) = user {
        command
            .env("TAILSTREAM_USER", user)
            .env("TAILSTREAM_PASSWORD", password);
    }
    let mut child = command.spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    let writer = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        let _ = input.write_all(&data).await;
    });
    let output = child.wait_with_output().await.unwrap();
    writer.await.unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

pub(crate) const ROOT: Option<(&str, &str)> = Some(("root", "root-password"));
const ALICE: Option<(&str, &str)> = Some(("alice", "alice-password"));

/// Retries `args` as `user` until it succeeds (rules reach brokers within 5 s).
async fn until_allowed(
    test: &TestCluster,
    user: Option<(&str, &str)>,
    args: &[&str],
    stdin: &[u8],
) -> String {
    let started = Instant::now();
    loop {
        let (ok, out, err) = as_user(test, user, args, stdin).await;
        if ok {
            return out;
        }
        assert!(
            started.elapsed() < RULES_APPLIED_WITHIN,
            "{args:?} never allowed: {err}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Root adds a rule: alice may do `operation` on stream `stream`.
async fn grant_alice(test: &TestCluster, operation: &str, stream: &str) {
    let args = [
        "acl",
        "add",
        "--principal",
        "User:alice",
        "--operation",
        operation,
        "--topic",
        stream,
    ];
    let (ok, _, err) = as_user(test, ROOT, &args, b"").await;
    assert!(ok, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_clients_authenticate_and_do_only_what_rules_allow() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let test = TestCluster::start(2, OVERRIDES).await;

        // Users are made with the admin token, before anyone can authenticate.
        for (name, password) in [("root", "root-password"), ("alice", "alice-password")] {
            let (ok, _, err) = as_user(
                &test,
                None,
                &["user", "create", name, "--password", password],
                b"",
            )
            .await;
            assert!(ok, "{err}");
        }
        // The super user sees the cluster (both brokers registered) and makes two streams.
        let started = Instant::now();
        loop {
            let (ok, out, err) = as_user(&test, ROOT, &["cluster", "status", "--json"], b"").await;
            assert!(ok, "{err}");
            if out.matches("\"state\":\"alive\"").count() >= 2 {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "brokers: {out}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for stream in ["clicks", "payroll"] {
            let (ok, _, err) = as_user(
                &test,
                ROOT,
                &["stream", "create", stream, "--streamlets", "2"],
                b"",
            )
            .await;
            assert!(ok, "{err}");
        }

        // No user: told that authentication is required, and how to give it.
        let (ok, _, err) = as_user(&test, None, &["stream", "list"], b"").await;
        assert!(!ok && err.contains("requires authentication"), "{err}");
        // A wrong password, an unknown user: the same refusal.
        for user in [("alice", "wrong"), ("mallory", "alice-password")] {
            let (ok, _, err) = as_user(&test, Some(user), &["stream", "list"], b"").await;
            assert!(
                !ok && err.contains("authentication failed"),
                "{user:?}: {err}"
            );
        }
        // Alice, with no rule yet: authenticated, and allowed nothing.
        let (ok, _, err) = as_user(&test, ALICE, &["stream", "delete", "clicks"], b"").await;
        assert!(!ok && err.contains("not authorized"), "{err}");
        let (ok, out, err) = as_user(&test, ALICE, &["stream", "list"], b"").await;
        assert!(ok, "{err}");
        assert!(!out.contains("clicks") && !out.contains("payroll"), "{out}");

        // Write on clicks: she produces to it (the broker checks each batch), not to payroll.
        grant_alice(&test, "write", "clicks").await;
        until_allowed(&test, ALICE, &["produce", "clicks"], b"one\ntwo\nthree\n").await;
        let (ok, _, err) = as_user(&test, ALICE, &["produce", "payroll"], b"x\n").await;
        assert!(!ok && err.contains("not authorized"), "{err}");
        let (ok, out, err) = as_user(&test, ALICE, &["stream", "list"], b"").await;
        assert!(ok, "{err}");
        assert!(
            out.contains("clicks") && !out.contains("payroll"),
            "listed only clicks: {out}"
        );
        // Writing is not reading: the broker refuses her fetches until a rule allows them.
        let consume = [
            "consume",
            "clicks",
            "--from-beginning",
            "--max-records",
            "3",
            "--idle-timeout-ms",
            "3000",
        ];
        let (ok, _, err) = as_user(&test, ALICE, &consume, b"").await;
        assert!(!ok && err.contains("not authorized"), "{err}");
        grant_alice(&test, "read", "clicks").await;
        let read = until_allowed(&test, ALICE, &consume, b"").await;
        let mut read: Vec<&str> = read.lines().collect();
        read.sort();
        assert_eq!(read, ["one", "three", "two"]);
        // Nor may she delete it; the super user may.
        let (ok, _, err) = as_user(&test, ALICE, &["stream", "delete", "clicks"], b"").await;
        assert!(!ok && err.contains("not authorized"), "{err}");
        let (ok, _, err) = as_user(&test, ROOT, &["stream", "delete", "payroll"], b"").await;
        assert!(ok, "{err}");

        // The coordinator's peer listener (members only; without TLS anyone who reaches it)
        // changes no user or rule, even with the admin token.
        let peer = test.cluster.coordinator.peer_addr.to_string();
        let member = tailstream_stubs::CoordinatorClient::new(
            &peer,
            tailstream_net::RpcClientConfig::default(),
        );
        let credentials = tailstream_auth::scram::new_credential(
            tailstream_wire::messages::ScramMechanism::Sha256,
            "x",
            4096,
        )
        .unwrap();
        let refused = member
            .create_user(ADMIN_TOKEN, "mallory", vec![credentials])
            .await
            .unwrap_err();
        assert!(refused.to_string().contains("client listener"), "{refused}");

        // A connection that never authenticates is closed after the handshake timeout (1.5 s),
        // on a broker's listener as on the coordinator's.
        let broker = test.cluster.broker(0).unwrap().rpc_addr;
        let coordinator: std::net::SocketAddr = test.coordinator().parse().unwrap();
        for addr in [broker, coordinator] {
            let opened = Instant::now();
            let mut idle = connect_from_elsewhere(addr).await;
            let mut buffer = [0u8; 256];
            loop {
                match tokio::time::timeout(Duration::from_secs(10), idle.read(&mut buffer)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => break,
                    Ok(Ok(_)) => {}
                    Err(_) => panic!("{addr}: not closed within 10 s"),
                }
            }
            let lived = opened.elapsed();
            assert!(
                lived >= Duration::from_millis(1000) && lived < Duration::from_secs(5),
                "{addr}: closed after {lived:?}"
            );
        }
    })
    .await
    .expect("test timed out");
}
