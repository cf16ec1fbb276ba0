//! Decoding errors and Kafka's error codes.

use std::fmt;

/// Why a frame from a broker could not be decoded. The connection that produced it is closed;
/// nothing in the client panics on bad input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The frame ended before a field did.
    #[error("truncated frame: {needed} bytes needed, {remaining} left")]
    Truncated {
        /// Bytes the field needs.
        needed: usize,
        /// Bytes left in the frame.
        remaining: usize,
    },
    /// A count larger than the bytes left could hold.
    #[error("count {count} cannot fit in the {remaining} bytes left")]
    CountTooLarge {
        /// The count read.
        count: usize,
        /// Bytes left in the frame.
        remaining: usize,
    },
    /// A negative length other than -1 (null).
    #[error("negative length {0}")]
    NegativeLength(i64),
    /// A varint longer than its type allows.
    #[error("varint too long")]
    VarintOverflow,
    /// A null where the schema forbids one.
    #[error("unexpected null {0}")]
    UnexpectedNull(&'static str),
    /// A string that is not UTF-8.
    #[error("string is not valid UTF-8")]
    InvalidUtf8,
    /// A value outside its domain.
    #[error("invalid {what}: {value}")]
    InvalidValue {
        /// Which field.
        what: &'static str,
        /// The value read.
        value: i64,
    },
    /// Bytes left after the message ended.
    #[error("{0} trailing bytes after the message")]
    TrailingBytes(usize),
    /// A record batch whose stored CRC32C does not match its contents.
    #[error("record batch CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch {
        /// The CRC in the batch header.
        stored: u32,
        /// The CRC of the bytes.
        computed: u32,
    },
    /// A record batch with a magic other than 2.
    #[error("unsupported record batch magic {0} (only v2 is supported)")]
    UnsupportedMagic(i8),
    /// Compressed records that would decompress to more than the decoder may produce: the
    /// consumer's `fetch.max.decompressed.bytes` left for this fetch response, or the bound a
    /// caller passed.
    #[error(
        "decompressed size of at least {at_least} bytes is over the bound of {max} bytes \
         (a consumer's is what fetch.max.decompressed.bytes leaves for the fetch)"
    )]
    DecompressedTooLarge {
        /// Bytes the input would produce, at least.
        at_least: usize,
        /// The bound.
        max: usize,
    },
    /// A compressed batch inflates to more than its bound for its size
    /// (`protocol::compression::inflation_bound`): a decompression
    /// bomb, refused after `max` bytes whatever the fetch's budget.
    #[error(
        "a {compressed}-byte compressed batch inflates past {max} bytes \
         (fetch.max.compression.ratio times its size, or 8 MiB)"
    )]
    InflationBound {
        /// The batch's compressed bytes.
        compressed: usize,
        /// Its bound.
        max: usize,
    },
    /// A compression codec this build cannot decode.
    #[error("unsupported compression codec {0}")]
    UnsupportedCompression(u8),
    /// The response carries another correlation id than the request.
    #[error("correlation id mismatch: expected {expected}, got {got}")]
    CorrelationMismatch {
        /// The request's id.
        expected: i32,
        /// The response's id.
        got: i32,
    },
}

macro_rules! error_codes {
    ($($variant:ident = $code:literal, $name:literal, $retriable:literal;)*) => {
        /// A Kafka error code. `None` (0) is success; codes this client does not know are kept
        /// as [`ErrorCode::Unknown`].
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ErrorCode {
            /// No error.
            None,
            $(
                #[doc = concat!("`", $name, "` (", stringify!($code), ").")]
                $variant,
            )*
            /// A code this client does not know.
            Unknown(i16),
        }

        impl ErrorCode {
            /// The code for a wire value.
            pub fn from_i16(code: i16) -> Self {
                match code {
                    0 => ErrorCode::None,
                    $($code => ErrorCode::$variant,)*
                    other => ErrorCode::Unknown(other),
                }
            }

            /// The wire value.
            pub fn code(self) -> i16 {
                match self {
                    ErrorCode::None => 0,
                    $(ErrorCode::$variant => $code,)*
                    ErrorCode::Unknown(c) => c,
                }
            }

            /// Kafka's name for the code, e.g. `NOT_LEADER_OR_FOLLOWER`.
            pub fn name(self) -> &'static str {
                match self {
                    ErrorCode::None => "NONE",
                    $(ErrorCode::$variant => $name,)*
                    ErrorCode::Unknown(_) => "UNKNOWN",
                }
            }

            /// Whether Kafka marks the error retriable: the same request may succeed later.
            pub fn is_retriable(self) -> bool {
                match self {
                    ErrorCode::None => false,
                    $(ErrorCode::$variant => $retriable,)*
                    ErrorCode::Unknown(_) => false,
                }
            }
        }
    };
}

impl ErrorCode {
    /// Whether this is success.
    pub fn is_ok(self) -> bool {
        self == ErrorCode::None
    }

    /// `Ok(())` for success, the code otherwise.
    pub fn into_result(self) -> Result<(), ErrorCode> {
        if self.is_ok() { Ok(()) } else { Err(self) }
    }

    /// Whether the error means the client's view of leaders is stale and metadata must be
    /// refreshed before retrying.
    pub fn invalidates_metadata(self) -> bool {
        matches!(
            self,
            ErrorCode::NotLeaderOrFollower
                | ErrorCode::LeaderNotAvailable
                | ErrorCode::UnknownTopicOrPartition
                | ErrorCode::FencedLeaderEpoch
                | ErrorCode::UnknownLeaderEpoch
                | ErrorCode::KafkaStorageError
                | ErrorCode::NotController
                | ErrorCode::UnknownTopicId
                | ErrorCode::BrokerNotAvailable
        )
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.code())
    }
}

impl std::error::Error for ErrorCode {}

error_codes! {
    UnknownServerError = -1, "UNKNOWN_SERVER_ERROR", false;
    OffsetOutOfRange = 1, "OFFSET_OUT_OF_RANGE", false;
    CorruptMessage = 2, "CORRUPT_MESSAGE", true;
    UnknownTopicOrPartition = 3, "UNKNOWN_TOPIC_OR_PARTITION", true;
    InvalidFetchSize = 4, "INVALID_FETCH_SIZE", false;
    LeaderNotAvailable = 5, "LEADER_NOT_AVAILABLE", true;
    NotLeaderOrFollower = 6, "NOT_LEADER_OR_FOLLOWER", true;
    RequestTimedOut = 7, "REQUEST_TIMED_OUT", true;
    BrokerNotAvailable = 8, "BROKER_NOT_AVAILABLE", false;
    ReplicaNotAvailable = 9, "REPLICA_NOT_AVAILABLE", true;
    MessageTooLarge = 10, "MESSAGE_TOO_LARGE", false;
    StaleControllerEpoch = 11, "STALE_CONTROLLER_EPOCH", false;
    OffsetMetadataTooLarge = 12, "OFFSET_METADATA_TOO_LARGE", false;
    NetworkException = 13, "NETWORK_EXCEPTION", true;
    CoordinatorLoadInProgress = 14, "COORDINATOR_LOAD_IN_PROGRESS", true;
    CoordinatorNotAvailable = 15, "COORDINATOR_NOT_AVAILABLE", true;
    NotCoordinator = 16, "NOT_COORDINATOR", true;
    InvalidTopic = 17, "INVALID_TOPIC_EXCEPTION", false;
    RecordListTooLarge = 18, "RECORD_LIST_TOO_LARGE", false;
    NotEnoughReplicas = 19, "NOT_ENOUGH_REPLICAS", true;
    NotEnoughReplicasAfterAppend = 20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", true;
    InvalidRequiredAcks = 21, "INVALID_REQUIRED_ACKS", false;
    IllegalGeneration = 22, "ILLEGAL_GENERATION", false;
    InconsistentGroupProtocol = 23, "INCONSISTENT_GROUP_PROTOCOL", false;
    InvalidGroupId = 24, "INVALID_GROUP_ID", false;
    UnknownMemberId = 25, "UNKNOWN_MEMBER_ID", false;
    InvalidSessionTimeout = 26, "INVALID_SESSION_TIMEOUT", false;
    RebalanceInProgress = 27, "REBALANCE_IN_PROGRESS", false;
    InvalidCommitOffsetSize = 28, "INVALID_COMMIT_OFFSET_SIZE", false;
    TopicAuthorizationFailed = 29, "TOPIC_AUTHORIZATION_FAILED", false;
    GroupAuthorizationFailed = 30, "GROUP_AUTHORIZATION_FAILED", false;
    ClusterAuthorizationFailed = 31, "CLUSTER_AUTHORIZATION_FAILED", false;
    InvalidTimestamp = 32, "INVALID_TIMESTAMP", false;
    UnsupportedSaslMechanism = 33, "UNSUPPORTED_SASL_MECHANISM", false;
    IllegalSaslState = 34, "ILLEGAL_SASL_STATE", false;
    UnsupportedVersion = 35, "UNSUPPORTED_VERSION", false;
    TopicAlreadyExists = 36, "TOPIC_ALREADY_EXISTS", false;
    InvalidPartitions = 37, "INVALID_PARTITIONS", false;
    InvalidReplicationFactor = 38, "INVALID_REPLICATION_FACTOR", false;
    InvalidReplicaAssignment = 39, "INVALID_REPLICA_ASSIGNMENT", false;
    InvalidConfig = 40, "INVALID_CONFIG", false;
    NotController = 41, "NOT_CONTROLLER", true;
    InvalidRequest = 42, "INVALID_REQUEST", false;
    UnsupportedForMessageFormat = 43, "UNSUPPORTED_FOR_MESSAGE_FORMAT", false;
    PolicyViolation = 44, "POLICY_VIOLATION", false;
    OutOfOrderSequenceNumber = 45, "OUT_OF_ORDER_SEQUENCE_NUMBER", false;
    DuplicateSequenceNumber = 46, "DUPLICATE_SEQUENCE_NUMBER", false;
    InvalidProducerEpoch = 47, "INVALID_PRODUCER_EPOCH", false;
    InvalidTxnState = 48, "INVALID_TXN_STATE", false;
    InvalidProducerIdMapping = 49, "INVALID_PRODUCER_ID_MAPPING", false;
    InvalidTransactionTimeout = 50, "INVALID_TRANSACTION_TIMEOUT", false;
    ConcurrentTransactions = 51, "CONCURRENT_TRANSACTIONS", true;
    TransactionCoordinatorFenced = 52, "TRANSACTION_COORDINATOR_FENCED", false;
    TransactionalIdAuthorizationFailed = 53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", false;
    SecurityDisabled = 54, "SECURITY_DISABLED", false;
    OperationNotAttempted = 55, "OPERATION_NOT_ATTEMPTED", false;
    KafkaStorageError = 56, "KAFKA_STORAGE_ERROR", true;
    LogDirNotFound = 57, "LOG_DIR_NOT_FOUND", false;
    SaslAuthenticationFailed = 58, "SASL_AUTHENTICATION_FAILED", false;
    UnknownProducerId = 59, "UNKNOWN_PRODUCER_ID", false;
    ReassignmentInProgress = 60, "REASSIGNMENT_IN_PROGRESS", false;
    DelegationTokenAuthDisabled = 61, "DELEGATION_TOKEN_AUTH_DISABLED", false;
    DelegationTokenNotFound = 62, "DELEGATION_TOKEN_NOT_FOUND", false;
    DelegationTokenOwnerMismatch = 63, "DELEGATION_TOKEN_OWNER_MISMATCH", false;
    DelegationTokenRequestNotAllowed = 64, "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED", false;
    DelegationTokenAuthorizationFailed = 65, "DELEGATION_TOKEN_AUTHORIZATION_FAILED", false;
    DelegationTokenExpired = 66, "DELEGATION_TOKEN_EXPIRED", false;
    InvalidPrincipalType = 67, "INVALID_PRINCIPAL_TYPE", false;
    NonEmptyGroup = 68, "NON_EMPTY_GROUP", false;
    GroupIdNotFound = 69, "GROUP_ID_NOT_FOUND", false;
    FetchSessionIdNotFound = 70, "FETCH_SESSION_ID_NOT_FOUND", true;
    InvalidFetchSessionEpoch = 71, "INVALID_FETCH_SESSION_EPOCH", true;
    ListenerNotFound = 72, "LISTENER_NOT_FOUND", true;
    TopicDeletionDisabled = 73, "TOPIC_DELETION_DISABLED", false;
    FencedLeaderEpoch = 74, "FENCED_LEADER_EPOCH", true;
    UnknownLeaderEpoch = 75, "UNKNOWN_LEADER_EPOCH", true;
    UnsupportedCompressionType = 76, "UNSUPPORTED_COMPRESSION_TYPE", false;
    StaleBrokerEpoch = 77, "STALE_BROKER_EPOCH", false;
    OffsetNotAvailable = 78, "OFFSET_NOT_AVAILABLE", true;
    MemberIdRequired = 79, "MEMBER_ID_REQUIRED", false;
    PreferredLeaderNotAvailable = 80, "PREFERRED_LEADER_NOT_AVAILABLE", true;
    GroupMaxSizeReached = 81, "GROUP_MAX_SIZE_REACHED", false;
    FencedInstanceId = 82, "FENCED_INSTANCE_ID", false;
    EligibleLeadersNotAvailable = 83, "ELIGIBLE_LEADERS_NOT_AVAILABLE", true;
    ElectionNotNeeded = 84, "ELECTION_NOT_NEEDED", true;
    NoReassignmentInProgress = 85, "NO_REASSIGNMENT_IN_PROGRESS", false;
    GroupSubscribedToTopic = 86, "GROUP_SUBSCRIBED_TO_TOPIC", false;
    InvalidRecord = 87, "INVALID_RECORD", false;
    UnstableOffsetCommit = 88, "UNSTABLE_OFFSET_COMMIT", true;
    ThrottlingQuotaExceeded = 89, "THROTTLING_QUOTA_EXCEEDED", true;
    ProducerFenced = 90, "PRODUCER_FENCED", false;
    ResourceNotFound = 91, "RESOURCE_NOT_FOUND", false;
    DuplicateResource = 92, "DUPLICATE_RESOURCE", false;
    UnacceptableCredential = 93, "UNACCEPTABLE_CREDENTIAL", false;
    InconsistentVoterSet = 94, "INCONSISTENT_VOTER_SET", false;
    InvalidUpdateVersion = 95, "INVALID_UPDATE_VERSION", false;
    FeatureUpdateFailed = 96, "FEATURE_UPDATE_FAILED", false;
    PrincipalDeserializationFailure = 97, "PRINCIPAL_DESERIALIZATION_FAILURE", false;
    SnapshotNotFound = 98, "SNAPSHOT_NOT_FOUND", false;
    PositionOutOfRange = 99, "POSITION_OUT_OF_RANGE", false;
    UnknownTopicId = 100, "UNKNOWN_TOPIC_ID", true;
    DuplicateBrokerRegistration = 101, "DUPLICATE_BROKER_REGISTRATION", false;
    BrokerIdNotRegistered = 102, "BROKER_ID_NOT_REGISTERED", false;
    InconsistentTopicId = 103, "INCONSISTENT_TOPIC_ID", true;
    InconsistentClusterId = 104, "INCONSISTENT_CLUSTER_ID", false;
    TransactionalIdNotFound = 105, "TRANSACTIONAL_ID_NOT_FOUND", false;
    FetchSessionTopicIdError = 106, "FETCH_SESSION_TOPIC_ID_ERROR", true;
    IneligibleReplica = 107, "INELIGIBLE_REPLICA", false;
    NewLeaderElected = 108, "NEW_LEADER_ELECTED", false;
    OffsetMovedToTieredStorage = 109, "OFFSET_MOVED_TO_TIERED_STORAGE", false;
    FencedMemberEpoch = 110, "FENCED_MEMBER_EPOCH", false;
    UnreleasedInstanceId = 111, "UNRELEASED_INSTANCE_ID", false;
    UnsupportedAssignor = 112, "UNSUPPORTED_ASSIGNOR", false;
    StaleMemberEpoch = 113, "STALE_MEMBER_EPOCH", false;
    MismatchedEndpointType = 114, "MISMATCHED_ENDPOINT_TYPE", false;
    UnsupportedEndpointType = 115, "UNSUPPORTED_ENDPOINT_TYPE", false;
    UnknownControllerId = 116, "UNKNOWN_CONTROLLER_ID", false;
    UnknownSubscriptionId = 117, "UNKNOWN_SUBSCRIPTION_ID", false;
    TelemetryTooLarge = 118, "TELEMETRY_TOO_LARGE", false;
    InvalidRegistration = 119, "INVALID_REGISTRATION", false;
    TransactionAbortable = 120, "TRANSACTION_ABORTABLE", false;
}

#[cfg(test)]
mod tests {
    use super::ErrorCode;

    #[test]
    fn codes_roundtrip() {
        for c in -5i16..200 {
            assert_eq!(ErrorCode::from_i16(c).code(), c);
        }
        assert_eq!(ErrorCode::from_i16(6), ErrorCode::NotLeaderOrFollower);
        assert!(ErrorCode::NotLeaderOrFollower.is_retriable());
        assert!(ErrorCode::NotLeaderOrFollower.invalidates_metadata());
        assert!(!ErrorCode::MessageTooLarge.is_retriable());
        assert_eq!(
            ErrorCode::from_i16(45).name(),
            "OUT_OF_ORDER_SEQUENCE_NUMBER"
        );
        assert_eq!(ErrorCode::from_i16(999), ErrorCode::Unknown(999));
        assert!(ErrorCode::None.is_ok());
    }
}
