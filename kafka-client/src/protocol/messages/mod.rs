//! One module per message. Each has the request (encode, and decode for tests that play the
//! broker) and the response (decode, and encode for round-trip tests).

pub mod add_offsets_to_txn;
pub mod add_partitions_to_txn;
pub mod api_versions;
mod common;
pub mod consumer_group_describe;
pub mod consumer_group_heartbeat;
pub mod consumer_protocol;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_producers;
pub mod describe_transactions;
pub mod end_txn;
pub mod fetch;
pub mod find_coordinator;
pub mod heartbeat;
pub mod incremental_alter_configs;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_groups;
pub mod list_offsets;
pub mod list_transactions;
pub mod metadata;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod produce;
pub mod sasl_authenticate;
pub mod sasl_handshake;
pub mod sync_group;
#[cfg(test)]
pub(crate) mod test_support;
pub mod topic_errors;
pub mod txn_offset_commit;

pub use api_versions::{ApiVersionsRequest, ApiVersionsResponse};
pub use init_producer_id::{InitProducerIdRequest, InitProducerIdResponse};
pub use metadata::{MetadataRequest, MetadataResponse};
pub use produce::{ProduceRequest, ProduceResponse};
pub use sasl_authenticate::{SaslAuthenticateRequest, SaslAuthenticateResponse};
pub use sasl_handshake::{SaslHandshakeRequest, SaslHandshakeResponse};
