//! Issue 23, item 3: a producer id is bound to the user who obtained it. The coordinator marks
//! each id with its owner (`tailstream_auth::producer_binding`); a broker refuses a batch under
//! an id that is not the connection's user's, whether that log has seen the id or not, and the
//! coordinator gives a new epoch of an id only to its owner. Each user speaks on a connection
//! of its own (an explicit login per connection: the process-wide login stays unset).

use crate::common;
use crate::native_auth::{OVERRIDES, ROOT, as_user};

use bytes::Bytes;
use common::{TEST_TIMEOUT, TestCluster};
use std::time::{Duration, Instant};
use tailstream_net::login::{Login, log_in};
use tailstream_net::{RpcClient, RpcClientConfig, RpcError};
use tailstream_wire::messages::{
    AllocateProducerIdRequest, AllocateProducerIdResponse, DescribeStreamRequest, ProduceRequest,
    ProduceResponse, ProducerSession, ScramMechanism, StreamMetadata,
};
use tailstream_wire::records::RecordBatchBuilder;
use tailstream_wire::{BatchSequence, Decode, Opcode, ProducerEpoch, ProducerId, Status};

/// A connection to `addr` authenticated as `user` (whose password is `user-password`).
async fn connect_as(addr: &str, user: &str) -> RpcClient {
    let client = RpcClient::connect(addr, RpcClientConfig::default())
        .await
        .unwrap();
    let login = Login::new(user, &format!("{user}-password"), ScramMechanism::Sha256);
    log_in(&client, &login).await.unwrap();
    client
}

async fn allocate(coordinator: &RpcClient, previous: Option<ProducerSession>) -> ProducerSession {
    let request = AllocateProducerIdRequest {
        previous,
        owner: Some("root".into()), // ignored on the client listener
    };
    let answer: AllocateProducerIdResponse = coordinator
        .call(Opcode::AllocateProducerId, &request)
        .await
        .unwrap();
    ProducerSession {
        producer_id: answer.producer_id,
        producer_epoch: answer.producer_epoch,
    }
}

/// Produces one record under `producer` (at `sequence`) to streamlet 0 of `stream`.
async fn produce(
    broker: &RpcClient,
    stream: &StreamMetadata,
    producer: &ProducerSession,
    sequence: u32,
) -> Result<ProduceResponse, RpcError> {
    let mut builder = RecordBatchBuilder::new(64);
    builder.push(0, None, Some(b"record"), &[]);
    let batch = builder.finish(
        producer.producer_id,
        producer.producer_epoch,
        BatchSequence(sequence),
    );
    let placement = &stream.streamlets[0];
    let request = ProduceRequest {
        stream: stream.id,
        streamlet: placement.streamlet,
        epoch: placement.epoch,
        batch: Bytes::new(),
    };
    let prefix = Bytes::copy_from_slice(&request.encode_prefix());
    let body = broker
        .call_parts(Opcode::Produce, vec![prefix, batch])
        .await?;
    Ok(ProduceResponse::decode_exact(body)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_id_is_its_owners_alone() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let test = TestCluster::start(1, OVERRIDES).await;
        for name in ["root", "alice", "mallory"] {
            let password = format!("{name}-password");
            let args = ["user", "create", name, "--password", &password];
            let (ok, _, err) = as_user(&test, None, &args, b"").await;
            assert!(ok, "{err}");
        }
        let (ok, _, err) = as_user(
            &test,
            ROOT,
            &["stream", "create", "orders", "--streamlets", "1"],
            b"",
        )
        .await;
        assert!(ok, "{err}");
        for user in ["alice", "mallory"] {
            let principal = format!("User:{user}");
            let args = [
                "acl",
                "add",
                "--principal",
                &principal,
                "--operation",
                "write",
                "--topic",
                "orders",
            ];
            let (ok, _, err) = as_user(&test, ROOT, &args, b"").await;
            assert!(ok, "{err}");
        }

        let coordinator = test.coordinator();
        let alice_at_coordinator = connect_as(&coordinator, "alice").await;
        let mallory_at_coordinator = connect_as(&coordinator, "mallory").await;
        let stream: StreamMetadata = alice_at_coordinator
            .call(
                Opcode::DescribeStream,
                &DescribeStreamRequest {
                    name: "orders".into(),
                },
            )
            .await
            .unwrap();
        let alices = allocate(&alice_at_coordinator, None).await;
        let malloys = allocate(&mallory_at_coordinator, None).await;
        assert_ne!(alices.producer_id, malloys.producer_id);

        // Mallory cannot take a new epoch of alice's id (which would fence alice): she gets
        // a fresh id of her own instead. Alice can.
        let taken = allocate(&mallory_at_coordinator, Some(alices.clone())).await;
        assert_ne!(taken.producer_id, alices.producer_id);
        assert_eq!(taken.producer_epoch, ProducerEpoch(0));
        let bumped = allocate(&alice_at_coordinator, Some(alices.clone())).await;
        assert_eq!(bumped.producer_id, alices.producer_id);
        assert_eq!(bumped.producer_epoch, ProducerEpoch(1));

        let broker_addr = test.cluster.broker(0).unwrap().rpc_addr.to_string();
        let alice = connect_as(&broker_addr, "alice").await;
        let mallory = connect_as(&broker_addr, "mallory").await;
        // The broker learns the rules (and the binding key) within a few seconds.
        let started = Instant::now();
        loop {
            match produce(&mallory, &stream, &malloys, 0).await {
                Ok(_) => break,
                Err(error) if error.status() == Some(Status::Busy) => {}
                Err(error) if error.status() == Some(Status::Forbidden) => {}
                Err(error) => panic!("mallory's own id: {error}"),
            }
            assert!(started.elapsed() < Duration::from_secs(30), "never allowed");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // Under alice's id, in a log that has not seen it yet: refused, however it is named.
        for (producer, what) in [
            (bumped.clone(), "alice's id"),
            (
                ProducerSession {
                    producer_id: ProducerId(bumped.producer_id.0 ^ 1),
                    producer_epoch: ProducerEpoch(0),
                },
                "an id next to alice's",
            ),
            (
                ProducerSession {
                    producer_id: ProducerId(42),
                    producer_epoch: ProducerEpoch(0),
                },
                "a made-up id",
            ),
        ] {
            let refused = produce(&mallory, &stream, &producer, 0).await.unwrap_err();
            assert_eq!(
                refused.status(),
                Some(Status::Forbidden),
                "{what}: {refused}"
            );
            assert!(refused.to_string().contains("not issued"), "{refused}");
        }
        // Alice writes under it; mallory still cannot, now that the log knows it.
        let first = produce(&alice, &stream, &bumped, 0).await.unwrap();
        assert!(!first.duplicate);
        let refused = produce(&mallory, &stream, &bumped, 1).await.unwrap_err();
        assert_eq!(refused.status(), Some(Status::Forbidden), "{refused}");
        let second = produce(&alice, &stream, &bumped, 1).await.unwrap();
        assert!(!second.duplicate && second.base_offset > first.base_offset);
        test.stop().await;
    })
    .await
    .expect("the producer binding test finished in time");
}
