//! What authenticating a Kafka connection costs the broker, side by side: a SCRAM exchange
//! (the server's two steps: parse, HMACs, hash; no derivation, the client does that) per
//! mechanism, and a PLAIN check (one PBKDF2 derivation at the default 4096 iterations, which
//! is why PLAIN checks run a few at a time). Per connection, not per request: an
//! authenticated connection's requests pay only the access check.
//! `cargo bench -p tailstream-bench --bench auth`.

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use tailstream_auth::scram::{
    ClientExchange, ITERATIONS_DEFAULT, ServerExchange, derive, parse_client_first,
    password_matches,
};
use tailstream_wire::messages::ScramMechanism;

fn authenticate(c: &mut Criterion) {
    let mut group = c.benchmark_group("authenticate one connection (broker side)");
    for mechanism in [ScramMechanism::Sha256, ScramMechanism::Sha512] {
        let stored = derive(mechanism, "s3cret", b"0123456789abcdef", ITERATIONS_DEFAULT);
        // The client's messages are made once (its derivation is the client's cost).
        let client = ClientExchange::new(mechanism, "alice", "s3cret");
        let first = client.first_message();
        let parsed = parse_client_first(&first).expect("a client first message");
        // One server nonce, so the client's final message (made once) checks out each time.
        let nonce = "fixed-for-the-benchmark";
        let (_, server_first) =
            ServerExchange::start_with_nonce(mechanism, &parsed, Some(stored.clone()), b"d", nonce);
        let (last, _) = client
            .final_message(&server_first)
            .expect("a final message");
        group.bench_function(mechanism.sasl_name(), |b| {
            b.iter(|| {
                let parsed = parse_client_first(black_box(&first)).expect("parses");
                let (server, _) = ServerExchange::start_with_nonce(
                    mechanism,
                    &parsed,
                    Some(stored.clone()),
                    b"d",
                    nonce,
                );
                let server_final = server
                    .finish(black_box(&last))
                    .expect("the password is right");
                black_box(server_final)
            })
        });
    }
    let stored = derive(
        ScramMechanism::Sha256,
        "s3cret",
        b"0123456789abcdef",
        ITERATIONS_DEFAULT,
    );
    group.bench_function("PLAIN (4096 iterations)", |b| {
        b.iter(|| black_box(password_matches(&stored, black_box("s3cret"))))
    });
    group.finish();
}

criterion_group!(benches, authenticate);
criterion_main!(benches);
