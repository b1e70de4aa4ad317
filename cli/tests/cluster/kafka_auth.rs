//! Issue 23's authentication: with `kafka.sasl_mechanisms` set, a Kafka client gets nothing
//! but ApiVersions until it proves who it is with SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN, as a
//! user made with `tailstream user create`. kcat (librdkafka) and kafka-python authenticate
//! as they are; a wrong password fails with the client's own authentication error; an
//! anonymous request, or a connection that does not finish authenticating in
//! `listeners.handshake_timeout_ms`, is closed; a deleted user is refused within seconds, and
//! its open sessions end at their next `kafka.session_recheck_ms` check.

use crate::common;

use common::hostile::{connect_from_elsewhere, metric};
use common::kafka::{CLIENTS_PY, bootstrap, kafka_python, kcat, parse, required, run};
use common::{TEST_TIMEOUT, TestCluster};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Brokers list the rules every 5 s: a change applies well within this.
const RULES_APPLIED_WITHIN: Duration = Duration::from_secs(30);

const OVERRIDES: &str = "[kafka]\nsasl_mechanisms = [\"SCRAM-SHA-256\", \"SCRAM-SHA-512\", \"PLAIN\"]\n\
                         session_recheck_ms = 1000\n\
                         [listeners]\nhandshake_timeout_ms = 1500\n";

/// kcat's settings to authenticate as `user`.
fn sasl(mechanism: &str, user: &str, password: &str) -> Vec<String> {
    [
        "security.protocol=SASL_PLAINTEXT".to_owned(),
        format!("sasl.mechanisms={mechanism}"),
        format!("sasl.username={user}"),
        format!("sasl.password={password}"),
    ]
    .into_iter()
    .flat_map(|setting| ["-X".to_owned(), setting])
    .collect()
}

/// A Metadata v1 request for every topic, as an anonymous client would send it first.
fn anonymous_metadata() -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&3i16.to_be_bytes()); // Metadata
    body.extend_from_slice(&1i16.to_be_bytes());
    body.extend_from_slice(&7i32.to_be_bytes());
    body.extend_from_slice(&(-1i16).to_be_bytes()); // no client id
    body.extend_from_slice(&(-1i32).to_be_bytes()); // every topic
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend(body);
    frame
}

/// An ApiVersions v0 request (answered before authentication).
fn api_versions(correlation_id: i32) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&18i16.to_be_bytes());
    body.extend_from_slice(&0i16.to_be_bytes());
    body.extend_from_slice(&correlation_id.to_be_bytes());
    body.extend_from_slice(&(-1i16).to_be_bytes());
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend(body);
    frame
}

/// A request frame: api key, version, correlation id, no client id, then `body`.
fn request(api_key: i16, version: i16, correlation_id: i32, body: &[u8]) -> Vec<u8> {
    let mut frame = Vec::new();
    frame.extend_from_slice(&(10 + body.len() as i32).to_be_bytes());
    frame.extend_from_slice(&api_key.to_be_bytes());
    frame.extend_from_slice(&version.to_be_bytes());
    frame.extend_from_slice(&correlation_id.to_be_bytes());
    frame.extend_from_slice(&(-1i16).to_be_bytes());
    frame.extend_from_slice(body);
    frame
}

/// One answer: its correlation id and body.
async fn read_answer(stream: &mut tokio::net::TcpStream) -> (i32, Vec<u8>) {
    let mut size = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut size))
        .await
        .expect("answered in time")
        .expect("answered, not closed");
    let mut answer = vec![0u8; i32::from_be_bytes(size) as usize];
    stream.read_exact(&mut answer).await.unwrap();
    let correlation_id = i32::from_be_bytes(answer[..4].try_into().unwrap());
    (correlation_id, answer[4..].to_vec())
}

/// A connection that authenticated as `user` with SCRAM-SHA-256, by hand (SaslHandshake v1,
/// then SaslAuthenticate v0 twice), from 127.0.0.1.
async fn scram_connect(
    kafka: std::net::SocketAddr,
    user: &str,
    password: &str,
) -> tokio::net::TcpStream {
    use tailstream_auth::scram::ClientExchange;
    use tailstream_wire::messages::ScramMechanism;
    let mut stream = tokio::net::TcpStream::connect(kafka).await.unwrap();
    let mechanism = b"SCRAM-SHA-256";
    let mut body = (mechanism.len() as i16).to_be_bytes().to_vec();
    body.extend_from_slice(mechanism);
    stream.write_all(&request(17, 1, 1, &body)).await.unwrap();
    let (_, answer) = read_answer(&mut stream).await;
    assert_eq!(&answer[..2], &[0, 0], "handshake accepted");
    // SaslAuthenticate v0: auth_bytes in; error, message, auth_bytes out.
    let authenticate = |id: i32, bytes: &[u8]| {
        let mut body = (bytes.len() as i32).to_be_bytes().to_vec();
        body.extend_from_slice(bytes);
        request(36, 0, id, &body)
    };
    let auth_bytes = |answer: &[u8]| {
        assert_eq!(&answer[..2], &[0, 0], "step accepted");
        let message = i16::from_be_bytes([answer[2], answer[3]]).max(0) as usize;
        answer[4 + message + 4..].to_vec()
    };
    let client = ClientExchange::new(ScramMechanism::Sha256, user, password);
    stream
        .write_all(&authenticate(2, &client.first_message()))
        .await
        .unwrap();
    let (_, answer) = read_answer(&mut stream).await;
    let (last, expected) = client.final_message(&auth_bytes(&answer)).unwrap();
    stream.write_all(&authenticate(3, &last)).await.unwrap();
    let (_, answer) = read_answer(&mut stream).await;
    expected
        .verify(&auth_bytes(&answer))
        .expect("the server proved itself");
    stream
}

/// Reads until the peer closes; the bytes read.
async fn read_until_closed(stream: &mut tokio::net::TcpStream) -> Vec<u8> {
    let mut all = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(20), stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return all,
            Ok(Ok(n)) => all.extend_from_slice(&buffer[..n]),
            Err(_) => panic!("the connection was not closed within 20 s"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_clients_authenticate_with_scram_or_plain_and_nobody_else_gets_in() {
    let (Some(kcat), Some(python)) = (
        required(kcat(), "kcat"),
        required(kafka_python(), "kafka-python"),
    ) else {
        return;
    };
    tokio::time::timeout(TEST_TIMEOUT, async {
        let test = TestCluster::start(2, OVERRIDES).await;
        let bootstrap = bootstrap(&test);
        let broker = test.cluster.broker(0).unwrap();
        let kafka = broker.kafka_addr.unwrap();

        // A user, its password from stdin; a second create of the name is refused.
        let (ok, out, err) = test.cli(&["user", "create", "alice"], b"s3cret\n").await;
        assert!(ok, "{err}");
        assert!(String::from_utf8_lossy(&out).contains("user alice created"));
        let (ok, _, err) = test
            .cli(&["user", "create", "alice", "--password", "other"], b"")
            .await;
        assert!(!ok && err.contains("UserExists"), "{err}");
        let (ok, out, err) = test.cli(&["user", "list"], b"").await;
        assert!(ok, "{err}");
        assert_eq!(
            String::from_utf8_lossy(&out).trim(),
            "alice\tSCRAM-SHA-256,SCRAM-SHA-512"
        );
        // Everything on every topic and group, and on the cluster (create, idempotent writes).
        for resource in [&["--topic", "*"][..], &["--group", "*"], &["--cluster"]] {
            let mut args = vec![
                "acl",
                "add",
                "--principal",
                "User:alice",
                "--operation",
                "all",
            ];
            args.extend_from_slice(resource);
            let (ok, _, err) = test.cli(&args, b"").await;
            assert!(ok, "{err}");
        }
        // Brokers list the rules every 5 s: wait until alice may write.
        let started = Instant::now();
        while !kcat_as(
            &kcat,
            "alice",
            "s3cret",
            &["-P", "-b", &bootstrap, "-t", "probe"],
            b"p\n",
        )
        .await
        .0
        {
            assert!(
                started.elapsed() < RULES_APPLIED_WITHIN,
                "alice's rules never applied"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }

        // kcat produces and reads back with each mechanism.
        for mechanism in ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"] {
            let topic = format!("authed-{}", mechanism.to_lowercase());
            let auth = sasl(mechanism, "alice", "s3cret");
            let mut produce: Vec<String> = ["-P", "-b", &bootstrap, "-t", &topic]
                .map(str::to_owned)
                .to_vec();
            produce.extend(auth.iter().cloned());
            let produce: Vec<&str> = produce.iter().map(String::as_str).collect();
            // Each broker lists the rules on its own 5 s clock, and the probe above met one:
            // this topic's leader may be the other, not there yet. Only a refusal for want of
            // rights is waited out (nothing of it was written); anything else fails at once.
            let started = Instant::now();
            loop {
                let (ok, _, err) = kcat_status(&kcat, &produce, b"one\ntwo\nthree\n").await;
                if ok {
                    break;
                }
                assert!(
                    err.contains("authorization failed")
                        && started.elapsed() < RULES_APPLIED_WITHIN,
                    "kcat {produce:?} failed: {err}"
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            let mut consume: Vec<String> = [
                "-C",
                "-b",
                &bootstrap,
                "-t",
                &topic,
                "-o",
                "beginning",
                "-e",
                "-q",
            ]
            .map(str::to_owned)
            .to_vec();
            consume.extend(auth.iter().cloned());
            let consume: Vec<&str> = consume.iter().map(String::as_str).collect();
            let mut read: Vec<String> = run(&kcat, &consume, b"")
                .await
                .lines()
                .map(str::to_owned)
                .collect();
            read.sort();
            assert_eq!(read, ["one", "three", "two"], "{mechanism}");
        }

        // kafka-python: an idempotent producer and a group member, over SCRAM-SHA-512.
        let sasl_py = [CLIENTS_PY, "--sasl", "SCRAM-SHA-512", "alice", "s3cret"];
        let mut args = sasl_py.to_vec();
        args.extend(["produce", &bootstrap, "python-authed", "200"]);
        let acked = parse(&run(&python, &args, b"").await);
        assert_eq!(acked.len(), 200);
        let mut args = sasl_py.to_vec();
        args.extend([
            "consume",
            &bootstrap,
            "python-authed",
            "readers",
            "200",
            "10",
        ]);
        let read = parse(&run(&python, &args, b"").await);
        assert_eq!(read.len(), 200, "every record read");

        // A wrong password, an unknown user: the client's own authentication error.
        let admin = broker.admin_addr;
        let failed_before = metric(
            admin,
            "tailstream_kafka_authentications_total",
            &[("mechanism", "SCRAM-SHA-256"), ("outcome", "failed")],
        )
        .await;
        // Broker 0 alone, whose counter is read.
        let broker0 = kafka.to_string();
        for (user, password) in [("alice", "wrong"), ("mallory", "s3cret")] {
            let (ok, _, stderr) = kcat_as(
                &kcat,
                user,
                password,
                &["-L", "-b", &broker0, "-m", "5"],
                b"",
            )
            .await;
            assert!(!ok, "{user}/{password} got in");
            assert!(
                stderr.contains("Authentication failed"),
                "{user}/{password}: {stderr}"
            );
        }
        assert!(
            metric(
                admin,
                "tailstream_kafka_authentications_total",
                &[("mechanism", "SCRAM-SHA-256"), ("outcome", "failed")],
            )
            .await
                >= failed_before + 2.0
        );

        // An anonymous request is not answered: the connection is closed.
        let mut anonymous = connect_from_elsewhere(kafka).await;
        anonymous.write_all(&anonymous_metadata()).await.unwrap();
        assert!(
            read_until_closed(&mut anonymous).await.is_empty(),
            "nothing answered"
        );

        // Nor is a large request's body waited for (or given memory): a Produce that announces
        // 10 MiB is closed on its API key, long before the 10 s a body may take to arrive.
        let mut big = connect_from_elsewhere(kafka).await;
        let mut head = (10i32 << 20).to_be_bytes().to_vec();
        head.extend_from_slice(&0i16.to_be_bytes());
        big.write_all(&head).await.unwrap();
        let sent = Instant::now();
        assert!(read_until_closed(&mut big).await.is_empty());
        assert!(
            sent.elapsed() < Duration::from_secs(5),
            "closed after {:?}",
            sent.elapsed()
        );

        // ApiVersions is answered before authenticating, but does not keep a connection
        // open past the handshake timeout (1.5 s here).
        // Timed from before the connect: the server's clock starts at its accept.
        let opened = Instant::now();
        let mut lingering = connect_from_elsewhere(kafka).await;
        let mut answered = 0;
        for id in 0..40 {
            if lingering.write_all(&api_versions(id)).await.is_err() {
                break;
            }
            let mut size = [0u8; 4];
            match tokio::time::timeout(Duration::from_secs(5), lingering.read_exact(&mut size))
                .await
            {
                Ok(Ok(_)) => {
                    let mut answer = vec![0u8; i32::from_be_bytes(size) as usize];
                    lingering.read_exact(&mut answer).await.unwrap();
                    answered += 1;
                }
                _ => break,
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let lasted = opened.elapsed();
        assert!(answered >= 2, "ApiVersions answered ({answered})");
        assert!(
            lasted >= Duration::from_millis(1000) && lasted < Duration::from_secs(5),
            "closed after {lasted:?}"
        );

        // A session alice opened before she is deleted: it serves until then.
        let mut session = scram_connect(kafka, "alice", "s3cret").await;
        session.write_all(&api_versions(50)).await.unwrap();
        assert_eq!(read_answer(&mut session).await.0, 50);

        // A deleted user is refused once brokers' cached credentials expire (10 s).
        let (ok, _, err) = test.cli(&["user", "delete", "alice"], b"").await;
        assert!(ok, "{err}");
        let deleted = Instant::now();
        // Her open session ends too, at its next check (every second here) once the cache
        // has expired; nothing was asked of the client.
        read_until_closed(&mut session).await;
        assert!(
            deleted.elapsed() < Duration::from_secs(20),
            "a deleted user's session lasted {:?}",
            deleted.elapsed()
        );
        loop {
            let args = ["-L", "-b", &bootstrap, "-m", "3"];
            let (ok, _, stderr) = kcat_as(&kcat, "alice", "s3cret", &args, b"").await;
            if !ok {
                assert!(stderr.contains("Authentication failed"), "{stderr}");
                break;
            }
            assert!(
                deleted.elapsed() < Duration::from_secs(20),
                "a deleted user still authenticates"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        test.stop().await;
    })
    .await
    .expect("the authentication test finished in time");
}

/// Issue 23's connection flood: anonymous connections that fill a listener's cap used to
/// lock every client out until they idled away. On a listener that requires authentication,
/// a new connection to a full listener now closes one that has not authenticated (the oldest
/// of the address holding the most), so a client with credentials from elsewhere gets in; an
/// authenticated connection is never closed to make room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_anonymous_connections_never_locks_out_a_client_with_credentials() {
    let Some(kcat) = required(kcat(), "kcat") else {
        return;
    };
    tokio::time::timeout(TEST_TIMEOUT, async {
        // A super user may do everything, with no rule.
        let overrides = "[kafka]\nsasl_mechanisms = [\"SCRAM-SHA-256\"]\nconnections_max = 8\n\
                         super_users = [\"alice\"]\n\
                         [listeners]\nhandshake_timeout_ms = 120000\n";
        let test = TestCluster::start(1, overrides).await;
        let broker = test.cluster.broker(0).unwrap();
        let kafka = broker.kafka_addr.unwrap();
        let bootstrap = kafka.to_string();
        let (ok, _, err) = test
            .cli(&["user", "create", "alice", "--password", "s3cret"], b"")
            .await;
        assert!(ok, "{err}");

        // The listener's eight places, taken by anonymous connections that say nothing.
        let mut flood = Vec::new();
        for _ in 0..8 {
            flood.push(connect_from_elsewhere(kafka).await);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let still_open = |stream: &mut tokio::net::TcpStream| {
            let mut byte = [0u8; 1];
            matches!(stream.try_read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
        };
        // A ninth closes the oldest, and only it.
        flood.push(connect_from_elsewhere(kafka).await);
        assert!(read_until_closed(&mut flood[0]).await.is_empty());
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(flood[1..].iter_mut().all(still_open), "only the oldest closed");

        // A client with credentials gets in (making room the same way), and a long-lived
        // authenticated consumer stays while the flood goes on.
        let args = ["-L", "-b", &bootstrap, "-m", "10"];
        let (ok, _, stderr) = kcat_as(&kcat, "alice", "s3cret", &args, b"").await;
        assert!(ok, "the client with credentials got in: {stderr}");
        // An authenticated connection is never closed to make room: twenty more anonymous
        // connections (the flood's address holds the most unproven ones, so its own go).
        let mut authenticated = scram_connect(kafka, "alice", "s3cret").await;
        for _ in 0..20 {
            flood.push(connect_from_elsewhere(kafka).await);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        authenticated.write_all(&api_versions(99)).await.unwrap();
        let (correlation_id, _) = read_answer(&mut authenticated).await;
        assert_eq!(correlation_id, 99, "the authenticated connection still serves");
        assert!(
            metric(broker.admin_addr, "tailstream_connections_evicted_total", &[("listener", "kafka")]).await >= 20.0
        );
        test.stop().await;
    })
    .await
    .expect("the flood test finished in time");
}

/// kcat as `user` (SCRAM-SHA-256) with `args` and `stdin`: whether it succeeded, stdout, stderr.
async fn kcat_as(
    kcat: &PathBuf,
    user: &str,
    password: &str,
    args: &[&str],
    stdin: &[u8],
) -> (bool, String, String) {
    let mut args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    args.extend(sasl("SCRAM-SHA-256", user, password));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    kcat_status(kcat, &args, stdin).await
}

/// kcat with exactly `args`: (succeeded, stdout, stderr).
async fn kcat_status(kcat: &PathBuf, args: &[&str], stdin: &[u8]) -> (bool, String, String) {
    use std::process::Stdio;
    let mut command = tokio::process::Command::new(kcat);
    command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin).await.unwrap();
    drop(input);
    let output = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("kcat finished in 30 s")
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Issue 23's authorization: an authenticated user may do only what a rule allows (a super
/// user everything), and each refusal is Kafka's own error, which the client reports as it
/// would against Kafka: TOPIC_AUTHORIZATION_FAILED for a topic it may not write, read or see,
/// GROUP_AUTHORIZATION_FAILED for a group it may not join. Removing a rule takes effect within
/// brokers' refresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_clients_may_do_only_what_an_access_control_rule_allows() {
    let Some(kcat) = required(kcat(), "kcat") else {
        return;
    };
    tokio::time::timeout(TEST_TIMEOUT, async {
        let overrides =
            "[kafka]\nsasl_mechanisms = [\"SCRAM-SHA-256\"]\nsuper_users = [\"admin\"]\n";
        let test = TestCluster::start(1, overrides).await;
        let bootstrap = bootstrap(&test);
        for (user, password) in [("admin", "adm1n"), ("bob", "b0b")] {
            let (ok, _, err) = test
                .cli(&["user", "create", user, "--password", password], b"")
                .await;
            assert!(ok, "{err}");
        }
        let rules: [&[&str]; 3] = [
            &["--operation", "write", "--topic", "orders"],
            &["--operation", "read", "--topic", "logs-", "--prefixed"],
            &["--operation", "read", "--group", "readers"],
        ];
        for rule in rules {
            let mut args = vec!["acl", "add", "--principal", "User:bob"];
            args.extend_from_slice(rule);
            let (ok, _, err) = test.cli(&args, b"").await;
            assert!(ok, "{err}");
        }
        let (ok, out, _) = test.cli(&["acl", "list"], b"").await;
        assert!(ok);
        assert_eq!(String::from_utf8_lossy(&out).lines().count(), 3);
        // The super user makes the topics (no rule needed).
        for topic in ["orders", "logs-eu", "secret"] {
            let (ok, _, err) = kcat_as(
                &kcat,
                "admin",
                "adm1n",
                &["-P", "-b", &bootstrap, "-t", topic],
                format!("from-admin-{topic}\n").as_bytes(),
            )
            .await;
            assert!(ok, "{topic}: {err}");
        }
        let bob = |args: Vec<&'static str>, stdin: &'static [u8]| {
            let (kcat, bootstrap) = (kcat.clone(), bootstrap.clone());
            async move {
                let mut all = vec!["-b", bootstrap.as_str()];
                all.extend(args);
                kcat_as(&kcat, "bob", "b0b", &all, stdin).await
            }
        };
        let denied = |stderr: &str, what: &str| {
            assert!(
                stderr.contains(&format!("{what} authorization failed")),
                "expected {what} authorization failed: {stderr}"
            );
        };
        // Brokers list the rules every 5 s: wait until bob's apply.
        let started = Instant::now();
        while !bob(vec!["-P", "-t", "orders"], b"probe\n").await.0 {
            assert!(
                started.elapsed() < RULES_APPLIED_WITHIN,
                "bob's rules never applied"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }

        // Write on orders: produced. Not on secret, nor on a new topic (no Create either).
        let (ok, _, err) = bob(vec!["-P", "-t", "orders"], b"from-bob\n").await;
        assert!(ok, "{err}");
        let (_, _, err) = bob(vec!["-P", "-t", "secret"], b"intruder\n").await;
        denied(&err, "Topic");
        let (_, _, err) = bob(vec!["-P", "-t", "brand-new"], b"intruder\n").await;
        denied(&err, "Topic");
        // Read on logs-*: read. Not on secret, nor on orders (Write is not Read).
        let (ok, out, err) = bob(
            vec!["-C", "-t", "logs-eu", "-o", "beginning", "-e", "-q"],
            b"",
        )
        .await;
        assert!(ok, "{err}");
        assert_eq!(out.trim(), "from-admin-logs-eu");
        let (_, out, err) = bob(
            vec!["-C", "-t", "secret", "-o", "beginning", "-e", "-q"],
            b"",
        )
        .await;
        assert!(out.is_empty());
        denied(&err, "Topic");
        let (_, out, err) = bob(
            vec!["-C", "-t", "orders", "-o", "beginning", "-e", "-q"],
            b"",
        )
        .await;
        assert!(out.is_empty());
        denied(&err, "Topic");
        // A listing shows only what bob may describe.
        let (ok, out, err) = bob(vec!["-L"], b"").await;
        assert!(ok, "{err}");
        assert!(
            out.contains("\"orders\"") && out.contains("\"logs-eu\""),
            "{out}"
        );
        assert!(!out.contains("\"secret\""), "{out}");
        // The group bob may read; not another.
        let (ok, out, err) = bob(
            vec!["-G", "readers", "-o", "beginning", "-e", "-q", "logs-eu"],
            b"",
        )
        .await;
        assert!(ok, "{err}");
        assert_eq!(out.trim(), "from-admin-logs-eu");
        let (_, out, err) = bob(vec!["-G", "others", "-e", "-q", "logs-eu"], b"").await;
        assert!(out.is_empty());
        assert!(
            err.contains("not authorized to describe group \"others\""),
            "{err}"
        );
        // Nothing bob was refused was written.
        let (ok, out, err) = kcat_as(
            &kcat,
            "admin",
            "adm1n",
            &[
                "-C",
                "-b",
                &bootstrap,
                "-t",
                "secret",
                "-o",
                "beginning",
                "-e",
                "-q",
            ],
            b"",
        )
        .await;
        assert!(ok, "{err}");
        assert_eq!(out.trim(), "from-admin-secret");

        // The write rule removed: refused within the brokers' refresh.
        let (ok, _, err) = test
            .cli(
                &[
                    "acl",
                    "remove",
                    "--principal",
                    "User:bob",
                    "--operation",
                    "write",
                    "--topic",
                    "orders",
                ],
                b"",
            )
            .await;
        assert!(ok, "{err}");
        let started = Instant::now();
        loop {
            let (ok, _, err) = bob(vec!["-P", "-t", "orders"], b"again\n").await;
            if !ok {
                denied(&err, "Topic");
                break;
            }
            assert!(
                started.elapsed() < RULES_APPLIED_WITHIN,
                "the removed rule still applies"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        test.stop().await;
    })
    .await
    .expect("the authorization test finished in time");
}

/// With `security.admin_token` set, users and rules can be managed only with the token (the
/// coordinator's client port no longer lets anyone grant themselves everything), and every
/// admin HTTP route but `/healthz` answers 401 without it, the coordinator's console's calls
/// to brokers included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_token_guards_users_rules_and_the_admin_endpoints() {
    const TOKEN: &str = "0123456789abcdef-test-token";
    tokio::time::timeout(TEST_TIMEOUT, async {
        let overrides = format!(
            "[kafka]\nsasl_mechanisms = [\"SCRAM-SHA-256\"]\n[security]\nadmin_token = \"{TOKEN}\"\n"
        );
        let test = TestCluster::start(1, &overrides).await;
        // Without the token (or with a wrong one): refused, nothing changed.
        for given in ["", "0123456789abcdef-wrong-token"] {
            for args in [
                &["user", "create", "mallory", "--password", "x"][..],
                &["acl", "add", "--principal", "User:mallory", "--operation", "all", "--cluster"],
                &["user", "list"],
                &["acl", "list"],
            ] {
                let output = test
                    .cli_command(args)
                    .env("TAILSTREAM_ADMIN_TOKEN", given)
                    .output()
                    .await
                    .unwrap();
                let stderr = String::from_utf8_lossy(&output.stderr);
                assert!(!output.status.success(), "{args:?} with {given:?} succeeded");
                assert!(stderr.contains("Unauthorized"), "{args:?}: {stderr}");
            }
        }
        // With it (the CLI reads it from the configuration here): done.
        let (ok, _, err) = test
            .cli(&["user", "create", "alice", "--password", "s3cret"], b"")
            .await;
        assert!(ok, "{err}");
        let (ok, out, err) = test.cli(&["user", "list"], b"").await;
        assert!(ok, "{err}");
        assert_eq!(
            String::from_utf8_lossy(&out).trim(),
            "alice\tSCRAM-SHA-256,SCRAM-SHA-512"
        );

        let broker = test.cluster.broker(0).unwrap();
        let coordinator_admin = test.cluster.coordinator.admin_addr;
        for admin in [broker.admin_addr, coordinator_admin] {
            let status = |response: String| response.lines().next().unwrap_or("").to_owned();
            assert!(status(TestCluster::http_get(admin, "/metrics").await).contains("401"));
            assert!(status(TestCluster::http_get(admin, "/healthz").await).contains("200"));
            let with = format!("/metrics?token={TOKEN}");
            assert!(status(TestCluster::http_get(admin, &with).await).contains("200"));
        }
        // The console's view of a broker goes through the coordinator, which sends the token.
        let server = test.client().list_brokers().await.unwrap()[0].server_id.to_string();
        let view = format!("/brokers/{server}/streamlets?token={TOKEN}");
        let answer = TestCluster::http_get(coordinator_admin, &view).await;
        assert!(answer.lines().next().unwrap_or("").contains("200"), "{answer}");
        test.stop().await;
    })
    .await
    .expect("the admin token test finished in time");
}
