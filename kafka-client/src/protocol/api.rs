//! API keys and version negotiation.

use std::fmt;

/// The APIs this client knows by key. Others are kept as [`ApiKey::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ApiKey {
    /// Produce (0).
    Produce,
    /// Fetch (1).
    Fetch,
    /// ListOffsets (2).
    ListOffsets,
    /// Metadata (3).
    Metadata,
    /// OffsetCommit (8).
    OffsetCommit,
    /// OffsetFetch (9).
    OffsetFetch,
    /// FindCoordinator (10).
    FindCoordinator,
    /// JoinGroup (11).
    JoinGroup,
    /// Heartbeat (12).
    Heartbeat,
    /// LeaveGroup (13).
    LeaveGroup,
    /// SyncGroup (14).
    SyncGroup,
    /// DescribeGroups (15).
    DescribeGroups,
    /// ListGroups (16).
    ListGroups,
    /// ApiVersions (18).
    ApiVersions,
    /// CreateTopics (19).
    CreateTopics,
    /// DeleteTopics (20).
    DeleteTopics,
    /// DeleteRecords (21).
    DeleteRecords,
    /// InitProducerId (22).
    InitProducerId,
    /// OffsetForLeaderEpoch (23).
    OffsetForLeaderEpoch,
    /// AddPartitionsToTxn (24).
    AddPartitionsToTxn,
    /// AddOffsetsToTxn (25).
    AddOffsetsToTxn,
    /// EndTxn (26).
    EndTxn,
    /// TxnOffsetCommit (28).
    TxnOffsetCommit,
    /// DescribeConfigs (32).
    DescribeConfigs,
    /// CreatePartitions (37).
    CreatePartitions,
    /// IncrementalAlterConfigs (44).
    IncrementalAlterConfigs,
    /// OffsetDelete (47).
    OffsetDelete,
    /// DescribeCluster (60).
    DescribeCluster,
    /// DescribeProducers (61).
    DescribeProducers,
    /// DescribeTransactions (65).
    DescribeTransactions,
    /// ListTransactions (66).
    ListTransactions,
    /// ConsumerGroupHeartbeat (68).
    ConsumerGroupHeartbeat,
    /// ConsumerGroupDescribe (69).
    ConsumerGroupDescribe,
    /// Any other key.
    Other(i16),
}

impl ApiKey {
    /// The wire value.
    pub fn code(self) -> i16 {
        match self {
            ApiKey::Produce => 0,
            ApiKey::Fetch => 1,
            ApiKey::ListOffsets => 2,
            ApiKey::Metadata => 3,
            ApiKey::OffsetCommit => 8,
            ApiKey::OffsetFetch => 9,
            ApiKey::FindCoordinator => 10,
            ApiKey::JoinGroup => 11,
            ApiKey::Heartbeat => 12,
            ApiKey::LeaveGroup => 13,
            ApiKey::SyncGroup => 14,
            ApiKey::DescribeGroups => 15,
            ApiKey::ListGroups => 16,
            ApiKey::ApiVersions => 18,
            ApiKey::CreateTopics => 19,
            ApiKey::DeleteTopics => 20,
            ApiKey::DeleteRecords => 21,
            ApiKey::InitProducerId => 22,
            ApiKey::OffsetForLeaderEpoch => 23,
            ApiKey::AddPartitionsToTxn => 24,
            ApiKey::AddOffsetsToTxn => 25,
            ApiKey::EndTxn => 26,
            ApiKey::TxnOffsetCommit => 28,
            ApiKey::DescribeConfigs => 32,
            ApiKey::CreatePartitions => 37,
            ApiKey::IncrementalAlterConfigs => 44,
            ApiKey::OffsetDelete => 47,
            ApiKey::DescribeCluster => 60,
            ApiKey::DescribeProducers => 61,
            ApiKey::DescribeTransactions => 65,
            ApiKey::ListTransactions => 66,
            ApiKey::ConsumerGroupHeartbeat => 68,
            ApiKey::ConsumerGroupDescribe => 69,
            ApiKey::Other(k) => k,
        }
    }

    /// The key for a wire value.
    pub fn from_code(code: i16) -> Self {
        match code {
            0 => ApiKey::Produce,
            1 => ApiKey::Fetch,
            2 => ApiKey::ListOffsets,
            3 => ApiKey::Metadata,
            8 => ApiKey::OffsetCommit,
            9 => ApiKey::OffsetFetch,
            10 => ApiKey::FindCoordinator,
            11 => ApiKey::JoinGroup,
            12 => ApiKey::Heartbeat,
            13 => ApiKey::LeaveGroup,
            14 => ApiKey::SyncGroup,
            15 => ApiKey::DescribeGroups,
            16 => ApiKey::ListGroups,
            18 => ApiKey::ApiVersions,
            19 => ApiKey::CreateTopics,
            20 => ApiKey::DeleteTopics,
            21 => ApiKey::DeleteRecords,
            22 => ApiKey::InitProducerId,
            23 => ApiKey::OffsetForLeaderEpoch,
            24 => ApiKey::AddPartitionsToTxn,
            25 => ApiKey::AddOffsetsToTxn,
            26 => ApiKey::EndTxn,
            28 => ApiKey::TxnOffsetCommit,
            32 => ApiKey::DescribeConfigs,
            37 => ApiKey::CreatePartitions,
            44 => ApiKey::IncrementalAlterConfigs,
            47 => ApiKey::OffsetDelete,
            60 => ApiKey::DescribeCluster,
            61 => ApiKey::DescribeProducers,
            65 => ApiKey::DescribeTransactions,
            66 => ApiKey::ListTransactions,
            68 => ApiKey::ConsumerGroupHeartbeat,
            69 => ApiKey::ConsumerGroupDescribe,
            k => ApiKey::Other(k),
        }
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiKey::Other(k) => write!(f, "api {k}"),
            k => write!(f, "{k:?} ({})", k.code()),
        }
    }
}

/// An inclusive range of versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VersionRange {
    /// Lowest version.
    pub min: i16,
    /// Highest version.
    pub max: i16,
}

impl VersionRange {
    /// The highest version in both ranges, if they overlap.
    pub fn highest_common(self, other: VersionRange) -> Option<i16> {
        let hi = self.max.min(other.max);
        (hi >= self.min.max(other.min)).then_some(hi)
    }
}

impl fmt::Display for VersionRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..={}", self.min, self.max)
    }
}

/// No version both sides support.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no common version of {api}: client speaks {client}, broker {broker}")]
pub struct NoCommonVersion {
    /// The API.
    pub api: ApiKey,
    /// What this client speaks.
    pub client: VersionRange,
    /// What the broker supports (`None`: the broker does not list the API).
    pub broker: BrokerRange,
}

/// A broker's range for an API, or its absence, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrokerRange(pub Option<VersionRange>);

impl fmt::Display for BrokerRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(r) => write!(f, "{r}"),
            None => f.write_str("none (API not supported)"),
        }
    }
}

/// What a broker said it supports in its ApiVersions response.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiVersionsTable {
    ranges: Vec<(i16, VersionRange)>,
}

impl ApiVersionsTable {
    /// A table from `(api key, range)` pairs.
    pub fn new(ranges: impl IntoIterator<Item = (i16, VersionRange)>) -> Self {
        Self {
            ranges: ranges.into_iter().collect(),
        }
    }

    /// The broker's range for `api`.
    pub fn get(&self, api: ApiKey) -> Option<VersionRange> {
        self.ranges
            .iter()
            .find(|(k, _)| *k == api.code())
            .map(|(_, r)| *r)
    }

    /// The highest version of `api` both this client (`client`) and the broker support.
    pub fn negotiate(&self, api: ApiKey, client: VersionRange) -> Result<i16, NoCommonVersion> {
        let broker = self.get(api);
        broker
            .and_then(|b| b.highest_common(client))
            .ok_or(NoCommonVersion {
                api,
                client,
                broker: BrokerRange(broker),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_picks_highest_common() {
        let t = ApiVersionsTable::new([(0, VersionRange { min: 3, max: 12 })]);
        assert_eq!(
            t.negotiate(ApiKey::Produce, VersionRange { min: 3, max: 11 }),
            Ok(11)
        );
        assert_eq!(
            t.negotiate(ApiKey::Produce, VersionRange { min: 3, max: 13 }),
            Ok(12)
        );
        let e = t
            .negotiate(ApiKey::Produce, VersionRange { min: 0, max: 2 })
            .unwrap_err();
        assert!(
            e.to_string().contains("client speaks 0..=2, broker 3..=12"),
            "{e}"
        );
        let e = t
            .negotiate(ApiKey::Metadata, VersionRange { min: 4, max: 12 })
            .unwrap_err();
        assert!(e.to_string().contains("not supported"), "{e}");
        for k in -1..80 {
            assert_eq!(ApiKey::from_code(k).code(), k);
        }
    }
}
