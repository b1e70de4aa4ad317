//! Which Kafka APIs the listener serves, and at which versions.
//!
//! Classic and flexible (KIP-482) versions are served, up to the newest whose meaning
//! Tailstream keeps whole (`SERVED` names where each stops): clients negotiate down to them
//! through ApiVersions, and a shape per version is what the guard walks. Produce is advertised
//! from v0 because older librdkafka turns compression off when a broker's Produce range does
//! not start there; versions below 3 (message formats before record batches) are still
//! refused. The admin APIs start where `kafka-protocol` does (CreateTopics v2, DeleteTopics
//! and DescribeConfigs v1: Kafka 4 dropped the older ones too).

/// A Kafka API this listener serves. Discriminants are Kafka's API keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i16)]
pub enum Api {
    Produce = 0,
    Fetch = 1,
    ListOffsets = 2,
    Metadata = 3,
    OffsetCommit = 8,
    OffsetFetch = 9,
    FindCoordinator = 10,
    JoinGroup = 11,
    Heartbeat = 12,
    LeaveGroup = 13,
    SyncGroup = 14,
    DescribeGroups = 15,
    ListGroups = 16,
    SaslHandshake = 17,
    ApiVersions = 18,
    CreateTopics = 19,
    DeleteTopics = 20,
    DeleteRecords = 21,
    InitProducerId = 22,
    OffsetForLeaderEpoch = 23,
    DescribeConfigs = 32,
    AlterConfigs = 33,
    CreatePartitions = 37,
    DeleteGroups = 42,
    IncrementalAlterConfigs = 44,
    OffsetDelete = 47,
    SaslAuthenticate = 36,
    DescribeCluster = 60,
}

/// Versions served: (api, advertised min, accepted min, max).
///
/// Each maximum is the newest version whose meaning Tailstream keeps whole. Where the next
/// one up would change it:
/// - Fetch v13 and Metadata's topic ids: streams have none, so Metadata answers the zero id
///   and Fetch stays at v12, which names topics; DeleteTopics v6 likewise;
/// - OffsetFetch v8 and FindCoordinator v4: several groups per request;
/// - OffsetCommit v9: KIP-848 members;
/// - DescribeGroups v6 and ListGroups v5: KIP-1043's group types and unknown-group answers;
/// - Produce v12: KIP-890 transactions;
/// - ListOffsets v8: tiered storage's offsets.
const SERVED: &[(Api, i16, i16, i16)] = &[
    (Api::Produce, 0, 3, 11),
    (Api::Fetch, 4, 4, 12),
    (Api::ListOffsets, 1, 1, 7),
    (Api::Metadata, 0, 0, 12),
    (Api::OffsetCommit, 2, 2, 8),
    (Api::OffsetFetch, 1, 1, 7),
    (Api::FindCoordinator, 0, 0, 3),
    (Api::JoinGroup, 0, 0, 9),
    (Api::Heartbeat, 0, 0, 4),
    (Api::LeaveGroup, 0, 0, 5),
    (Api::SyncGroup, 0, 0, 5),
    (Api::DescribeGroups, 0, 0, 5),
    (Api::ListGroups, 0, 0, 4),
    (Api::ApiVersions, 0, 0, 3),
    (Api::CreateTopics, 2, 2, 7),
    (Api::DeleteTopics, 1, 1, 5),
    (Api::DeleteRecords, 0, 0, 2),
    (Api::InitProducerId, 0, 0, 4),
    (Api::OffsetForLeaderEpoch, 2, 2, 4),
    (Api::DescribeConfigs, 1, 1, 4),
    (Api::AlterConfigs, 0, 0, 2),
    (Api::IncrementalAlterConfigs, 0, 0, 1),
    (Api::CreatePartitions, 0, 0, 3),
    (Api::DeleteGroups, 0, 0, 2),
    (Api::OffsetDelete, 0, 0, 0),
    // v0 handshakes send the exchange's tokens unframed; only v1 (tokens in SaslAuthenticate
    // requests, which every current client sends) is served, as Kafka 4 does. Advertised from
    // v0 all the same: librdkafka turns SASL off on a broker whose range does not start there.
    (Api::SaslHandshake, 0, 1, 1),
    (Api::SaslAuthenticate, 0, 0, 2),
    // Flexible from its first version.
    (Api::DescribeCluster, 0, 0, 1),
];

impl Api {
    pub const ALL: &'static [Api] = &[
        Api::Produce,
        Api::Fetch,
        Api::ListOffsets,
        Api::Metadata,
        Api::OffsetCommit,
        Api::OffsetFetch,
        Api::FindCoordinator,
        Api::JoinGroup,
        Api::Heartbeat,
        Api::LeaveGroup,
        Api::SyncGroup,
        Api::DescribeGroups,
        Api::ListGroups,
        Api::ApiVersions,
        Api::CreateTopics,
        Api::DeleteTopics,
        Api::DeleteRecords,
        Api::InitProducerId,
        Api::OffsetForLeaderEpoch,
        Api::DescribeConfigs,
        Api::AlterConfigs,
        Api::IncrementalAlterConfigs,
        Api::CreatePartitions,
        Api::DeleteGroups,
        Api::OffsetDelete,
        Api::SaslHandshake,
        Api::SaslAuthenticate,
        Api::DescribeCluster,
    ];

    /// The API's name as Kafka spells it (metric labels, logs).
    pub fn name(self) -> &'static str {
        match self {
            Api::Produce => "Produce",
            Api::Fetch => "Fetch",
            Api::ListOffsets => "ListOffsets",
            Api::Metadata => "Metadata",
            Api::OffsetCommit => "OffsetCommit",
            Api::OffsetFetch => "OffsetFetch",
            Api::FindCoordinator => "FindCoordinator",
            Api::JoinGroup => "JoinGroup",
            Api::Heartbeat => "Heartbeat",
            Api::LeaveGroup => "LeaveGroup",
            Api::SyncGroup => "SyncGroup",
            Api::DescribeGroups => "DescribeGroups",
            Api::ListGroups => "ListGroups",
            Api::ApiVersions => "ApiVersions",
            Api::CreateTopics => "CreateTopics",
            Api::DeleteTopics => "DeleteTopics",
            Api::DeleteRecords => "DeleteRecords",
            Api::InitProducerId => "InitProducerId",
            Api::OffsetForLeaderEpoch => "OffsetForLeaderEpoch",
            Api::DescribeConfigs => "DescribeConfigs",
            Api::AlterConfigs => "AlterConfigs",
            Api::IncrementalAlterConfigs => "IncrementalAlterConfigs",
            Api::CreatePartitions => "CreatePartitions",
            Api::DeleteGroups => "DeleteGroups",
            Api::OffsetDelete => "OffsetDelete",
            Api::SaslHandshake => "SaslHandshake",
            Api::SaslAuthenticate => "SaslAuthenticate",
            Api::DescribeCluster => "DescribeCluster",
        }
    }

    pub fn from_key(key: i16) -> Option<Api> {
        Api::ALL.iter().copied().find(|api| *api as i16 == key)
    }

    fn served(self) -> (i16, i16, i16) {
        SERVED
            .iter()
            .find(|(api, ..)| *api == self)
            .map(|(_, advertised, accepted, max)| (*advertised, *accepted, *max))
            // Every `Api` has a row in SERVED (checked by a test).
            .unwrap_or((0, 0, -1))
    }

    /// The range this listener advertises in ApiVersions.
    pub fn advertised(self) -> (i16, i16) {
        let (min, _, max) = self.served();
        (min, max)
    }

    /// Whether a request of this version is served.
    pub fn accepts(self, version: i16) -> bool {
        let (_, min, max) = self.served();
        (min..=max).contains(&version)
    }

    /// Whether this version of the API is a flexible one (KIP-482: compact strings and
    /// arrays, tagged fields), from the first flexible version of each API's schema.
    pub(crate) fn flexible(self, version: i16) -> bool {
        let first = match self {
            Api::Produce => 9,
            Api::Fetch => 12,
            Api::ListOffsets => 6,
            Api::Metadata => 9,
            Api::OffsetCommit => 8,
            Api::OffsetFetch => 6,
            Api::FindCoordinator => 3,
            Api::JoinGroup => 6,
            Api::Heartbeat => 4,
            Api::LeaveGroup => 4,
            Api::SyncGroup => 4,
            Api::DescribeGroups => 5,
            Api::ListGroups => 3,
            Api::ApiVersions => 3,
            Api::CreateTopics => 5,
            Api::DeleteTopics => 4,
            Api::DeleteRecords => 2,
            Api::InitProducerId => 2,
            Api::OffsetForLeaderEpoch => 4,
            Api::DescribeConfigs => 4,
            Api::AlterConfigs => 2,
            Api::IncrementalAlterConfigs => 1,
            Api::CreatePartitions => 2,
            Api::DeleteGroups => 2,
            Api::SaslAuthenticate => 2,
            Api::DescribeCluster => 0,
            // No flexible version exists.
            Api::OffsetDelete | Api::SaslHandshake => return false,
        };
        version >= first
    }

    /// The request header version: 2 (flexible, with tagged fields) for a flexible version,
    /// 1 for every other version served.
    pub fn request_header_version(self, version: i16) -> i16 {
        if self.flexible(version) { 2 } else { 1 }
    }

    /// The response header version: 1 (with tagged fields) for a flexible version, except
    /// ApiVersions, which always answers with header v0 (so a client can read it whatever
    /// version it asked for).
    pub fn response_header_version(self, version: i16) -> i16 {
        if self.flexible(version) && self != Api::ApiVersions {
            1
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_api_is_served_and_produce_is_advertised_from_zero() {
        for api in Api::ALL {
            let (min, max) = api.advertised();
            assert!(min <= max, "{api:?}");
            assert!(api.accepts(max), "{api:?}");
            assert_eq!(Api::from_key(*api as i16), Some(*api));
        }
        assert_eq!(Api::Produce.advertised().0, 0);
        assert!(!Api::Produce.accepts(2));
        assert!(Api::Produce.accepts(3));
        assert!(
            Api::Fetch.accepts(12) && !Api::Fetch.accepts(13),
            "topic ids are not"
        );
        assert_eq!(Api::Fetch.request_header_version(12), 2);
        assert_eq!(Api::Fetch.response_header_version(12), 1);
        assert_eq!(Api::Fetch.response_header_version(11), 0);
        assert_eq!(Api::InitProducerId.request_header_version(3), 2);
        assert_eq!(Api::InitProducerId.response_header_version(3), 1);
        assert_eq!(Api::ApiVersions.response_header_version(3), 0);
        assert_eq!(Api::Metadata.response_header_version(8), 0);
        assert_eq!(Api::from_key(29), None, "DescribeAcls is not served");
        assert!(
            !Api::SaslHandshake.accepts(0),
            "v0 (unframed tokens) is not served"
        );
    }
}
