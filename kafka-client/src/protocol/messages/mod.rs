//! One module per message. Each has the request (encode, and decode for tests that play the
//! broker) and the response (decode, and encode for round-trip tests).

pub mod api_versions;
pub mod init_producer_id;
pub mod metadata;
pub mod produce;

pub use api_versions::{ApiVersionsRequest, ApiVersionsResponse};
pub use init_producer_id::{InitProducerIdRequest, InitProducerIdResponse};
pub use metadata::{MetadataRequest, MetadataResponse};
pub use produce::{ProduceRequest, ProduceResponse};
