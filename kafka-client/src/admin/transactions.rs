//! Producers and transactions (KIP-664): the active producers of a partition (at its leader),
//! the transactional ids every broker coordinates, and one transaction as its coordinator
//! sees it; what an operator looks at for a hanging transaction.

use super::io::Io;
use super::items::{at_every_broker, at_leaders, per_item};
use super::offsets::by_topic;
use super::{Admin, AdminError, Options, PerItem};
use crate::consumer::TopicPartition;
use crate::protocol::messages::describe_producers::{DescribeProducersRequest, ProducerState};
use crate::protocol::messages::describe_transactions::DescribeTransactionsRequest;
use crate::protocol::messages::list_transactions::ListTransactionsRequest;

/// `FindCoordinator` key type of a transactional id.
const TRANSACTION: i8 = 1;

/// A producer a partition's leader knows as active.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveProducer {
    /// Producer id.
    pub producer_id: i64,
    /// Epoch.
    pub producer_epoch: i32,
    /// Last sequence it wrote.
    pub last_sequence: i32,
    /// Timestamp of its last write.
    pub last_timestamp: i64,
    /// The transaction coordinator's epoch, for a transactional producer.
    pub coordinator_epoch: Option<i32>,
    /// The first offset of its open transaction, if one is open.
    pub transaction_start_offset: Option<i64>,
}

/// A transactional id in a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionListing {
    /// `transactional.id`.
    pub transactional_id: String,
    /// Its producer id.
    pub producer_id: i64,
    /// State (`Empty`, `Ongoing`, `PrepareCommit`, `CompleteCommit`, …).
    pub state: String,
}

/// A transactional id as its coordinator describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionDescription {
    /// State.
    pub state: String,
    /// Coordinator node id.
    pub coordinator: i32,
    /// `transaction.timeout.ms`.
    pub timeout_ms: i32,
    /// When the open transaction began (ms since the epoch), if one is open.
    pub start_time_ms: Option<i64>,
    /// Producer id.
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i16,
    /// The partitions of the open transaction.
    pub partitions: Vec<TopicPartition>,
}

impl Admin {
    /// The producers each partition's leader knows as active, per partition.
    pub fn describe_producers(
        &self,
        partitions: &[TopicPartition],
        opts: &Options,
    ) -> Result<PerItem<TopicPartition, Vec<ActiveProducer>>, AdminError> {
        let (call, mut s) = self.call("describe_producers", opts)?;
        per_item(
            &mut s.io,
            &call,
            partitions.to_vec(),
            |io: &mut Io, pending| {
                at_leaders(
                    io,
                    &call,
                    pending,
                    |tps| DescribeProducersRequest {
                        topics: by_topic(tps).into_iter().collect(),
                    },
                    |r| {
                        r.topics
                            .into_iter()
                            .flat_map(|(t, parts)| {
                                parts.into_iter().map(move |p| {
                                    let tp = TopicPartition::new(t.as_str(), p.partition_index);
                                    let r = AdminError::check(
                                        call.op,
                                        p.error_code,
                                        p.error_message.as_deref(),
                                    )
                                    .map(|()| p.active_producers.into_iter().map(active).collect());
                                    (tp, r)
                                })
                            })
                            .collect()
                    },
                )
            },
        )
    }

    /// Every transactional id of the cluster (each broker lists those it coordinates),
    /// optionally only those in `states`.
    pub fn list_transactions(
        &self,
        states: &[&str],
        opts: &Options,
    ) -> Result<Vec<TransactionListing>, AdminError> {
        let (call, mut s) = self.call("list_transactions", opts)?;
        let req = ListTransactionsRequest {
            state_filters: states.iter().map(|s| (*s).to_owned()).collect(),
            producer_id_filters: Vec::new(),
            duration_filter: -1,
        };
        s.io.retrying(&call, |io: &mut Io| {
            let mut out = Vec::new();
            for resp in at_every_broker(io, &call, &req)? {
                AdminError::check(call.op, resp.error_code, None)?;
                out.extend(
                    resp.transaction_states
                        .into_iter()
                        .map(|t| TransactionListing {
                            transactional_id: t.transactional_id,
                            producer_id: t.producer_id,
                            state: t.transaction_state,
                        }),
                );
            }
            out.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
            Ok(out)
        })
    }

    /// `transactional_ids` as their coordinators describe them, per id
    /// (`TRANSACTIONAL_ID_NOT_FOUND` for one that never ran).
    pub fn describe_transactions(
        &self,
        transactional_ids: &[&str],
        opts: &Options,
    ) -> Result<PerItem<String, TransactionDescription>, AdminError> {
        let (call, mut s) = self.call("describe_transactions", opts)?;
        let items = transactional_ids.iter().map(|t| (*t).to_owned()).collect();
        per_item(&mut s.io, &call, items, |io: &mut Io, pending| {
            let mut answers = Vec::new();
            for id in pending {
                let r = io.coordinator(&call, TRANSACTION, id).and_then(|node| {
                    let req = DescribeTransactionsRequest {
                        transactional_ids: vec![id.clone()],
                    };
                    let resp = io.request(&call, node, &req)?;
                    let t = resp
                        .transaction_states
                        .into_iter()
                        .find(|t| &t.transactional_id == id)
                        .ok_or_else(|| AdminError::Protocol {
                            operation: call.op,
                            reason: format!("DescribeTransactions answered without {id:?}"),
                        })?;
                    AdminError::check(call.op, t.error_code, None)?;
                    let mut partitions: Vec<TopicPartition> = t
                        .topics
                        .iter()
                        .flat_map(|(topic, ps)| {
                            ps.iter().map(|p| TopicPartition::new(topic.as_str(), *p))
                        })
                        .collect();
                    partitions.sort();
                    Ok(TransactionDescription {
                        state: t.transaction_state,
                        coordinator: node,
                        timeout_ms: t.transaction_timeout_ms,
                        start_time_ms: (t.transaction_start_time_ms >= 0)
                            .then_some(t.transaction_start_time_ms),
                        producer_id: t.producer_id,
                        producer_epoch: t.producer_epoch,
                        partitions,
                    })
                });
                answers.push((id.clone(), r));
            }
            Ok(answers)
        })
    }
}

fn active(a: ProducerState) -> ActiveProducer {
    ActiveProducer {
        producer_id: a.producer_id,
        producer_epoch: a.producer_epoch,
        last_sequence: a.last_sequence,
        last_timestamp: a.last_timestamp,
        coordinator_epoch: (a.coordinator_epoch >= 0).then_some(a.coordinator_epoch),
        transaction_start_offset: (a.current_txn_start_offset >= 0)
            .then_some(a.current_txn_start_offset),
    }
}
