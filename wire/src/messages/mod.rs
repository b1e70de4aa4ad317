//! Request and response bodies of every RPC, by opcode, one file per area:
//!
//! - [`acls`]: access control rules;
//! - [`cluster`]: stream settings and metadata, membership (register, heartbeat, brokers),
//!   streams (create, describe, list), producer ids, assignments;
//! - [`data`]: produce, fetch and group listings;
//! - [`groups`]: consumer groups (membership, committed offsets);
//! - [`replica`]: the backup's replica RPCs and the rdma handshake;
//! - [`recovery`]: failure reports and the order to rebuild a crashed broker's streamlet;
//! - [`users`]: users and their SCRAM credentials (never a password).
//!
//! Control-plane messages are declared with `wire_message!`. The messages whose last field is
//! a large payload (`ProduceRequest`'s record batch, `FetchResponse`'s entries,
//! `ReplicaWriteRequest`'s entries) are written by hand so the payload travels as its own
//! zero-copy part.

pub mod acls;
pub mod cluster;
pub mod data;
pub mod groups;
pub mod recovery;
pub mod replica;
pub mod users;

pub use acls::*;
pub use cluster::*;
pub use data::*;
pub use groups::*;
pub use recovery::*;
pub use replica::*;
pub use users::*;

#[cfg(test)]
use bytes::Bytes;
#[cfg(test)]
use proptest::strategy::Strategy;

/// Byte fields in generated messages.
#[cfg(test)]
fn small_bytes() -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(proptest::arbitrary::any::<u8>(), 0..64).prop_map(Bytes::from)
}

/// Nested lists in generated messages stay short, so a three-level message is not a million
/// elements (the decoders' bounds are exercised by the fuzzing tests instead).
#[cfg(test)]
fn small_vec<T: proptest::arbitrary::Arbitrary>() -> impl Strategy<Value = Vec<T>> {
    proptest::collection::vec(proptest::arbitrary::any::<T>(), 0..6)
}

/// Producer epochs on the wire are Kafka's valid ones, never negative.
#[cfg(test)]
fn producer_epoch() -> impl Strategy<Value = crate::ids::ProducerEpoch> {
    (0i16..=i16::MAX).prop_map(crate::ids::ProducerEpoch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Decode, Encode};
    use crate::ids::{ServerId, StreamId, StreamletId};
    use bytes::Bytes;
    use proptest::prelude::*;

    fn round_trips<T: Encode + Decode + PartialEq + std::fmt::Debug>(value: T) {
        let bytes = value.to_bytes();
        assert_eq!(T::decode_exact(bytes.clone()).as_ref(), Ok(&value));
        // Strict prefixes are refused (or, for bodies ending in a payload, decode to a shorter
        // payload): never a panic. Large bodies are cut at ~128 points to keep this linear.
        let step = (bytes.len() / 128).max(1);
        for cut in (0..bytes.len()).step_by(step) {
            let _ = T::decode_exact(bytes.slice(..cut));
        }
    }

    macro_rules! round_trip_tests {
        ($($test:ident: $ty:ty),* $(,)?) => {
            proptest! {
                $(
                    #[test]
                    fn $test(value in any::<$ty>()) {
                        round_trips(value);
                    }
                )*
            }
        };
    }

    round_trip_tests! {
        stream_metadata: StreamMetadata,
        error_body: ErrorBody,
        register_broker_request: RegisterBrokerRequest,
        register_broker_response: RegisterBrokerResponse,
        assign_streamlets: AssignStreamletsRequest,
        heartbeat_request: BrokerHeartbeatRequest,
        heartbeat_response: BrokerHeartbeatResponse,
        allocate_producer_id_request: AllocateProducerIdRequest,
        allocate_producer_id: AllocateProducerIdResponse,
        producer_id_binding_key: ProducerIdBindingKeyResponse,
        allocate_producer_id_before_owner: AllocateProducerIdRequestBeforeOwner,
        create_stream: CreateStreamRequest,
        add_streamlets: AddStreamletsRequest,
        alter_retention: AlterRetentionRequest,
        delete_records: DeleteRecordsRequest,
        log_start: LogStart,
        describe_stream: DescribeStreamRequest,
        delete_stream: DeleteStreamRequest,
        list_recoveries: ListRecoveriesResponse,
        list_streams: ListStreamsResponse,
        list_brokers: ListBrokersResponse,
        describe_leadership: DescribeLeadershipResponse,
        produce_response: ProduceResponse,
        fetch_request: FetchRequest,
        fetch_response: FetchResponse,
        list_groups_request: ListGroupsRequest,
        locate_offset_request: LocateOffsetRequest,
        locate_offset_response: LocateOffsetResponse,
        consumer_assignment: ConsumerAssignment,
        list_groups_response: ListGroupsResponse,
        replica_open: ReplicaOpenRequest,
        buffer_descriptor: BufferDescriptor,
        replica_close: ReplicaCloseRequest,
        replica_free: ReplicaFreeRequest,
        replica_set_epoch: ReplicaSetEpochRequest,
        list_replicas_request: ListReplicasRequest,
        list_replicas_response: ListReplicasResponse,
        read_replica_request: ReadReplicaRequest,
        read_replica_response: ReadReplicaResponse,
        rdma_connect_request: RdmaConnectRequest,
        rdma_connect_response: RdmaConnectResponse,
        replica_adopt: ReplicaAdoptRequest,
        report_suspect: ReportSuspectRequest,
        report_log_bounds: ReportLogBoundsRequest,
        report_log_bounds_response: ReportLogBoundsResponse,
        recover_streamlet: RecoverStreamletRequest,
        group_join_request: GroupJoinRequest,
        group_join_response: GroupJoinResponse,
        group_sync_request: GroupSyncRequest,
        group_sync_response: GroupSyncResponse,
        group_heartbeat: GroupHeartbeatRequest,
        group_leave: GroupLeaveRequest,
        offset_commit: OffsetCommitRequest,
        offset_fetch_request: OffsetFetchRequest,
        offset_fetch_response: OffsetFetchResponse,
        describe_consumer_groups: DescribeConsumerGroupsResponse,
        describe_groups_request: DescribeGroupsRequest,
        describe_groups_response: DescribeGroupsResponse,
        delete_groups_request: DeleteGroupsRequest,
        delete_groups_response: DeleteGroupsResponse,
        offset_delete_request: OffsetDeleteRequest,
        group_removal: GroupRemoval,
        offsets_record: OffsetsRecord,
        scram_credential: ScramCredential,
        create_user: CreateUserRequest,
        delete_user: DeleteUserRequest,
        security_list: SecurityListRequest,
        list_users: ListUsersResponse,
        lookup_credentials_request: LookupCredentialsRequest,
        lookup_credentials: LookupCredentialsResponse,
        authenticate_request: AuthenticateRequest,
        authenticate_response: AuthenticateResponse,
        acl_rule: AclRule,
        acl_change: AclChangeRequest,
        list_acls: ListAclsResponse,
    }

    proptest! {
        #[test]
        fn replica_write_request(primary in any::<ServerId>(), replica in any::<ReplicaId>(),
                                 key in any::<u64>(), offset in any::<u32>(),
                                 entries in proptest::collection::vec(any::<u8>(), 0..256)) {
            round_trips(ReplicaWriteRequest { primary, replica, key, offset, entries: Bytes::from(entries) });
        }

        #[test]
        fn produce_request(stream in any::<u64>(), streamlet in any::<u32>(), epoch in any::<u32>(),
                           batch in proptest::collection::vec(any::<u8>(), 0..256)) {
            round_trips(ProduceRequest {
                stream: StreamId(stream),
                streamlet: StreamletId(streamlet),
                epoch: crate::ids::OwnershipEpoch(epoch),
                batch: Bytes::from(batch),
            });
        }
    }
}
