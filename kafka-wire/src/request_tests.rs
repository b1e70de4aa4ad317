//! The decoder against requests as a client's encoder makes them, at every served version.

use super::*;
use bytes::BytesMut;
use kafka_protocol::messages::create_partitions_request::{
    CreatePartitionsAssignment, CreatePartitionsTopic,
};
use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{BrokerId, GroupId, TopicName};
use kafka_protocol::protocol::{Encodable, StrBytes};

fn name(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_owned())
}

fn topic(value: &str) -> TopicName {
    TopicName(name(value))
}

/// A request of every served API with every array holding two elements, as a client
/// builds it (fields a version lacks keep their defaults, as the encoder demands).
fn sample(api: Api) -> RequestBody {
    match api {
        Api::Produce => RequestBody::Produce(
            ProduceRequest::default()
                .with_acks(-1)
                .with_topic_data(vec![
                    TopicProduceData::default()
                        .with_name(topic("a"))
                        .with_partition_data(vec![
                            PartitionProduceData::default()
                                .with_index(0)
                                .with_records(Some(Bytes::from_static(b"batch"))),
                            PartitionProduceData::default()
                                .with_index(1)
                                .with_records(None),
                        ]);
                    2
                ]),
        ),
        Api::Fetch => {
            let partition = FetchPartition::default()
                .with_fetch_offset(9)
                .with_partition_max_bytes(100);
            RequestBody::Fetch(
                FetchRequest::default()
                    .with_max_wait_ms(5)
                    .with_topics(vec![
                        FetchTopic::default()
                            .with_topic(topic("t"))
                            .with_partitions(vec![partition; 2]);
                        2
                    ]),
            )
        }
        Api::ListOffsets => {
            RequestBody::ListOffsets(ListOffsetsRequest::default().with_topics(vec![
            ListOffsetsTopic::default().with_name(topic("t")).with_partitions(vec![
                ListOffsetsPartition::default().with_timestamp(-2);
                2
            ]);
            2
        ]))
        }
        Api::Metadata => RequestBody::Metadata(MetadataRequest::default().with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(topic("x")));
            2
        ]))),
        Api::OffsetCommit => RequestBody::OffsetCommit(
            OffsetCommitRequest::default()
                .with_group_id(GroupId(name("g")))
                .with_topics(vec![
                    OffsetCommitRequestTopic::default()
                        .with_name(topic("t"))
                        .with_partitions(vec![
                                OffsetCommitRequestPartition::default()
                                    .with_committed_offset(5)
                                    .with_committed_metadata(Some(name("m")));
                                2
                            ]);
                    2
                ]),
        ),
        Api::OffsetFetch => RequestBody::OffsetFetch(
            OffsetFetchRequest::default()
                .with_group_id(GroupId(name("g")))
                .with_topics(Some(vec![
                    OffsetFetchRequestTopic::default()
                        .with_name(topic("t"))
                        .with_partition_indexes(vec![0, 1]);
                    2
                ])),
        ),
        Api::FindCoordinator => {
            RequestBody::FindCoordinator(FindCoordinatorRequest::default().with_key(name("g")))
        }
        Api::JoinGroup => RequestBody::JoinGroup(
            JoinGroupRequest::default()
                .with_group_id(GroupId(name("g")))
                .with_protocol_type(name("consumer"))
                .with_protocols(vec![
                    JoinGroupRequestProtocol::default()
                        .with_name(name("range"))
                        .with_metadata(Bytes::from_static(b"meta"));
                    2
                ]),
        ),
        Api::Heartbeat => {
            RequestBody::Heartbeat(HeartbeatRequest::default().with_group_id(GroupId(name("g"))))
        }
        Api::LeaveGroup => {
            RequestBody::LeaveGroup(LeaveGroupRequest::default().with_group_id(GroupId(name("g"))))
        }
        Api::SyncGroup => RequestBody::SyncGroup(
            SyncGroupRequest::default()
                .with_group_id(GroupId(name("g")))
                .with_assignments(vec![
                    SyncGroupRequestAssignment::default()
                        .with_member_id(name("m"))
                        .with_assignment(Bytes::from_static(b"a"));
                    2
                ]),
        ),
        Api::DescribeGroups => {
            RequestBody::DescribeGroups(DescribeGroupsRequest::default().with_groups(vec![
                GroupId(
                    name("g")
                );
                2
            ]))
        }
        Api::ListGroups => RequestBody::ListGroups(ListGroupsRequest::default()),
        Api::CreateTopics => {
            let topic = CreatableTopic::default()
                .with_name(topic("t"))
                .with_num_partitions(4)
                .with_replication_factor(-1)
                .with_assignments(vec![
                    CreatableReplicaAssignment::default()
                        .with_broker_ids(vec![BrokerId(1); 2]);
                    2
                ])
                .with_configs(vec![
                    CreatableTopicConfig::default()
                        .with_name(name("retention.ms"))
                        .with_value(Some(name("1000")));
                    2
                ]);
            RequestBody::CreateTopics(CreateTopicsRequest::default().with_topics(vec![topic; 2]))
        }
        Api::DeleteTopics => {
            RequestBody::DeleteTopics(DeleteTopicsRequest::default().with_topic_names(vec![
                topic(
                    "t"
                );
                2
            ]))
        }
        Api::DescribeConfigs => {
            RequestBody::DescribeConfigs(DescribeConfigsRequest::default().with_resources(vec![
                DescribeConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(name("t"))
                    .with_configuration_keys(Some(vec![name("retention.ms"); 2]));
                2
            ]))
        }
        Api::AlterConfigs => {
            use kafka_protocol::messages::alter_configs_request::{
                AlterConfigsResource, AlterableConfig,
            };
            let config = AlterableConfig::default()
                .with_name(name("retention.ms"))
                .with_value(Some(name("60000")));
            let unset = AlterableConfig::default().with_name(name("retention.bytes"));
            RequestBody::AlterConfigs(
                kafka_protocol::messages::AlterConfigsRequest::default()
                    .with_resources(vec![
                        AlterConfigsResource::default()
                            .with_resource_type(2)
                            .with_resource_name(name("t"))
                            .with_configs(vec![config, unset]);
                        2
                    ])
                    .with_validate_only(true),
            )
        }
        Api::IncrementalAlterConfigs => {
            use kafka_protocol::messages::incremental_alter_configs_request::{
                AlterConfigsResource, AlterableConfig,
            };
            let config = AlterableConfig::default()
                .with_name(name("retention.ms"))
                .with_config_operation(0)
                .with_value(Some(name("60000")));
            let deleted = AlterableConfig::default()
                .with_name(name("retention.bytes"))
                .with_config_operation(1);
            RequestBody::IncrementalAlterConfigs(
                kafka_protocol::messages::IncrementalAlterConfigsRequest::default()
                    .with_resources(vec![
                        AlterConfigsResource::default()
                            .with_resource_type(2)
                            .with_resource_name(name("t"))
                            .with_configs(vec![config, deleted]);
                        2
                    ])
                    .with_validate_only(true),
            )
        }
        Api::CreatePartitions => {
            let topic = CreatePartitionsTopic::default()
                .with_name(topic("t"))
                .with_count(8)
                .with_assignments(Some(vec![
                    CreatePartitionsAssignment::default()
                        .with_broker_ids(vec![BrokerId(1); 2]);
                    2
                ]));
            RequestBody::CreatePartitions(
                CreatePartitionsRequest::default()
                    .with_topics(vec![topic; 2])
                    .with_validate_only(true),
            )
        }
        Api::DeleteGroups => {
            RequestBody::DeleteGroups(DeleteGroupsRequest::default().with_groups_names(vec![
                GroupId(
                    name("g")
                );
                2
            ]))
        }
        Api::OffsetDelete => RequestBody::OffsetDelete(
            OffsetDeleteRequest::default()
                .with_group_id(GroupId(name("g")))
                .with_topics(vec![
                    OffsetDeleteRequestTopic::default()
                        .with_name(topic("t"))
                        .with_partitions(vec![
                            OffsetDeleteRequestPartition::default()
                                .with_partition_index(3);
                            2
                        ]);
                    2
                ]),
        ),
        Api::DeleteRecords => {
            use kafka_protocol::messages::delete_records_request::{
                DeleteRecordsPartition, DeleteRecordsTopic,
            };
            RequestBody::DeleteRecords(
                kafka_protocol::messages::DeleteRecordsRequest::default()
                    .with_topics(vec![
                        DeleteRecordsTopic::default()
                            .with_name(topic("t"))
                            .with_partitions(vec![
                                DeleteRecordsPartition::default()
                                    .with_partition_index(3)
                                    .with_offset(-1);
                                2
                            ]);
                        2
                    ])
                    .with_timeout_ms(30_000),
            )
        }
        Api::OffsetForLeaderEpoch => RequestBody::OffsetForLeaderEpoch(
            OffsetForLeaderEpochRequest::default().with_topics(vec![
                OffsetForLeaderTopic::default()
                    .with_topic(topic("t"))
                    .with_partitions(vec![
                        OffsetForLeaderPartition::default()
                            .with_current_leader_epoch(3)
                            .with_leader_epoch(2);
                        2
                    ]);
                2
            ]),
        ),
        Api::ApiVersions => RequestBody::ApiVersions(ApiVersionsRequest::default()),
        Api::InitProducerId => RequestBody::InitProducerId(
            // v3's producer id and epoch stay at their defaults (-1), which v0 can carry.
            InitProducerIdRequest::default().with_transaction_timeout_ms(60_000),
        ),
        Api::SaslHandshake => RequestBody::SaslHandshake(
            SaslHandshakeRequest::default().with_mechanism(name("SCRAM-SHA-256")),
        ),
        Api::DescribeCluster => RequestBody::DescribeCluster(
            DescribeClusterRequest::default().with_include_cluster_authorized_operations(true),
        ),
        Api::SaslAuthenticate => RequestBody::SaslAuthenticate(
            SaslAuthenticateRequest::default()
                .with_auth_bytes(Bytes::from_static(b"n,,n=user,r=nonce")),
        ),
    }
}

fn encode_body(body: &RequestBody, version: i16, out: &mut BytesMut) {
    let encoded = match body {
        RequestBody::Produce(r) => r.encode(out, version),
        RequestBody::Fetch(r) => r.encode(out, version),
        RequestBody::ListOffsets(r) => r.encode(out, version),
        RequestBody::Metadata(r) => r.encode(out, version),
        RequestBody::OffsetCommit(r) => r.encode(out, version),
        RequestBody::OffsetFetch(r) => r.encode(out, version),
        RequestBody::FindCoordinator(r) => r.encode(out, version),
        RequestBody::JoinGroup(r) => r.encode(out, version),
        RequestBody::Heartbeat(r) => r.encode(out, version),
        RequestBody::LeaveGroup(r) => r.encode(out, version),
        RequestBody::SyncGroup(r) => r.encode(out, version),
        RequestBody::DescribeGroups(r) => r.encode(out, version),
        RequestBody::ListGroups(r) => r.encode(out, version),
        RequestBody::ApiVersions(r) => r.encode(out, version),
        RequestBody::CreateTopics(r) => r.encode(out, version),
        RequestBody::DeleteTopics(r) => r.encode(out, version),
        RequestBody::InitProducerId(r) => r.encode(out, version),
        RequestBody::DescribeConfigs(r) => r.encode(out, version),
        RequestBody::AlterConfigs(r) => r.encode(out, version),
        RequestBody::IncrementalAlterConfigs(r) => r.encode(out, version),
        RequestBody::CreatePartitions(r) => r.encode(out, version),
        RequestBody::DeleteGroups(r) => r.encode(out, version),
        RequestBody::OffsetDelete(r) => r.encode(out, version),
        RequestBody::DeleteRecords(r) => r.encode(out, version),
        RequestBody::OffsetForLeaderEpoch(r) => r.encode(out, version),
        RequestBody::SaslHandshake(r) => r.encode(out, version),
        RequestBody::SaslAuthenticate(r) => r.encode(out, version),
        RequestBody::DescribeCluster(r) => r.encode(out, version),
    };
    encoded.unwrap_or_else(|e| panic!("encoding {body:?} v{version}: {e}"));
}

/// A whole frame (without its length prefix) as the crate's client half encodes it.
pub(crate) fn frame(api: Api, version: i16, body: &RequestBody) -> Bytes {
    let mut out = BytesMut::new();
    let header = kafka_protocol::messages::RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(77)
        .with_client_id(Some(name("test-client")));
    header
        .encode(&mut out, api.request_header_version(version))
        .unwrap();
    encode_body(body, version, &mut out);
    out.freeze()
}

#[test]
fn every_request_a_client_encodes_at_a_served_version_walks_to_its_last_byte() {
    for api in Api::ALL {
        let (_, max) = api.advertised();
        for version in 0..=max {
            if !api.accepts(version) {
                continue;
            }
            let sample = sample(*api);
            // The walk reads every byte the crate's encoder wrote (the decoder ignores what
            // follows the last field, so this is where a shape that stops short shows).
            let mut body = BytesMut::new();
            encode_body(&sample, version, &mut body);
            let walked = crate::guard::check_body(
                crate::shapes::request_shape(*api),
                version,
                api.flexible(version),
                &body.freeze(),
            );
            assert_eq!(
                walked,
                Ok(0),
                "{api:?} v{version}: the walk ends at the last byte"
            );
            let frame = frame(*api, version, &sample);
            match decode_request(frame) {
                Ok(Decoded::Request {
                    header, api: got, ..
                }) => {
                    assert_eq!(got, *api);
                    assert_eq!(header.correlation_id, 77);
                    assert_eq!(header.client_id.as_deref(), Some("test-client"));
                }
                other => panic!("{api:?} v{version}: {other:?}"),
            }
        }
    }
}

#[test]
fn a_cut_short_request_is_refused_at_every_length() {
    for api in Api::ALL {
        let (_, max) = api.advertised();
        let frame = frame(*api, max, &sample(*api));
        for cut in 0..frame.len() {
            assert!(
                decode_request(frame.slice(..cut)).is_err(),
                "{api:?} v{max} cut at {cut} of {}",
                frame.len()
            );
        }
    }
}

#[test]
fn unserved_versions_and_apis_are_told_apart() {
    let old_produce = frame(Api::Produce, 8, &sample(Api::Produce));
    let mut raw = BytesMut::from(&old_produce[..]);
    raw[2..4].copy_from_slice(&2i16.to_be_bytes());
    assert!(matches!(
        decode_request(raw.freeze()),
        Err(DecodeError::UnsupportedVersion { version: 2, .. })
    ));
    let mut future = BytesMut::from(&frame(Api::ApiVersions, 3, &sample(Api::ApiVersions))[..]);
    future[2..4].copy_from_slice(&9i16.to_be_bytes());
    assert!(matches!(
        decode_request(future.freeze()),
        Ok(Decoded::ApiVersionsFallback { header }) if header.api_version == 9
    ));
    let mut unknown = BytesMut::from(&old_produce[..]);
    unknown[0..2].copy_from_slice(&29i16.to_be_bytes());
    assert!(matches!(
        decode_request(unknown.freeze()),
        Err(DecodeError::UnknownApi { key: 29, .. })
    ));
}
