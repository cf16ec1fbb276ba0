//! What the producer's requests in flight carry: the batches of a Produce request, or which
//! metadata, producer id or transaction request it was. The sender and its transaction side
//! both hold them in the one `Net`.

use std::sync::Arc;

use super::accumulator::ProducerBatch;
use crate::network::MetadataContext;

/// A partition of a transaction.
pub(crate) type Partition = (Arc<str>, i32);

/// What a transactional request in flight was.
#[derive(Debug)]
pub(crate) enum TxnCall {
    /// For the transaction coordinator (`group: None`) or a group's.
    FindCoordinator {
        group: Option<String>,
    },
    InitProducerId,
    AddPartitions(Vec<Partition>),
    AddOffsets,
    TxnOffsetCommit,
    EndTxn {
        commit: bool,
    },
}

/// What an in-flight request was.
#[derive(Debug)]
pub(crate) enum RequestContext {
    Produce(Vec<ProducerBatch>),
    Metadata,
    InitProducerId,
    /// A request of the transaction (to a coordinator).
    Txn(TxnCall),
}

impl MetadataContext for RequestContext {
    fn metadata() -> Self {
        Self::Metadata
    }
}
