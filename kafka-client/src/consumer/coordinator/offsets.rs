//! Committed offsets for [`Coordinator`]: the positions of newly assigned partitions
//! (OffsetFetch) and `committed()` queries.

use super::super::assignor::group_by_topic;
use super::*;

impl Coordinator {
    // --- committed offsets -----------------------------------------------------------------

    /// Without a group, positions come from `auto.offset.reset` alone.
    pub(super) fn init_positions_without_group(&mut self, shared: &Shared) {
        let mut st = shared.state.lock();
        if st.checkpointing {
            return;
        }
        let policy = self.link.config.auto_offset_reset;
        let mut errors = Vec::new();
        for (tp, p) in st.assignment.iter_mut() {
            if p.position.is_none() && p.reset.is_none() && !p.blocked {
                if policy == AutoOffsetReset::None {
                    p.blocked = true;
                    errors.push(ConsumerError::NoOffset(tp.clone()));
                } else {
                    p.reset = Some(policy);
                }
            }
        }
        if !errors.is_empty() {
            st.errors.extend(errors);
            drop(st);
            shared.notify();
        }
    }

    pub(super) fn maybe_fetch_positions(
        &mut self,
        net: &mut Net,
        shared: &Shared,
        node: i32,
        now: Instant,
    ) {
        if self.link.suspended
            || self.positions_in_flight
            || self.positions_retry_at.is_some_and(|t| now < t)
        {
            return;
        }
        let wanted: Vec<TopicPartition> = {
            let mut st = shared.state.lock();
            if st.checkpointing || matches!(st.rebalance, RebalanceStep::Assigned(_)) {
                return;
            }
            let mut v = Vec::new();
            for (tp, p) in st.assignment.iter_mut() {
                if p.position.is_none() && p.reset.is_none() && !p.blocked && !p.committed_requested
                {
                    p.committed_requested = true;
                    v.push(tp.clone());
                }
            }
            v
        };
        if wanted.is_empty() {
            return;
        }
        let req = offset_fetch(
            self.link.group_id.as_deref(),
            &wanted,
            self.link.config.isolation_level,
        );
        match net
            .client
            .send(node, &req, RequestContext::OffsetFetch(None), true, now)
        {
            Ok(_) => self.positions_in_flight = true,
            Err((e, _)) => {
                tracing::warn!(error = %e, "OffsetFetch not sent");
                self.positions_failed(shared, now);
            }
        }
    }

    pub(super) fn positions_failed(&mut self, shared: &Shared, now: Instant) {
        self.positions_in_flight = false;
        self.positions_retry_at = Some(now + self.backoff());
        let mut st = shared.state.lock();
        for p in st.assignment.values_mut() {
            if p.position.is_none() {
                p.committed_requested = false;
            }
        }
    }

    pub fn on_offset_fetch(
        &mut self,
        net: &mut Net,
        query: Option<u64>,
        resp: OffsetFetchResponse,
        shared: &Shared,
    ) {
        let now = Instant::now();
        let group = resp.groups.into_iter().next();
        let group_error = group
            .as_ref()
            .map_or(ErrorCode::CoordinatorNotAvailable, |g| g.error_code);
        if !group_error.is_ok() {
            if coordinator_error(group_error) && group_error != ErrorCode::CoordinatorLoadInProgress
            {
                self.coordinator_unknown(net, shared, group_error.name());
            }
            match query {
                None => self.positions_failed(shared, now),
                Some(id) => self.query_failed(id, group_error, now),
            }
            return;
        }
        let mut answers: BTreeMap<TopicPartition, (ErrorCode, Option<OffsetAndMetadata>)> =
            BTreeMap::new();
        for t in group.into_iter().flat_map(|g| g.topics) {
            let topic: Arc<str> = Arc::from(t.name.as_str());
            for p in t.partitions {
                let om = (p.committed_offset >= 0).then(|| OffsetAndMetadata {
                    offset: p.committed_offset,
                    leader_epoch: (p.committed_leader_epoch >= 0)
                        .then_some(p.committed_leader_epoch),
                    metadata: p.metadata.unwrap_or_default(),
                });
                answers.insert(
                    TopicPartition::new(topic.clone(), p.partition_index),
                    (p.error_code, om),
                );
            }
        }
        match query {
            Some(id) => {
                if let Some(code) = answers.values().map(|a| a.0).find(|c| !c.is_ok()) {
                    if code.is_retriable() {
                        self.query_failed(id, code, now);
                        return;
                    }
                    if let Some(i) = self.queries.iter().position(|q| q.id == id) {
                        let q = self.queries.remove(i).expect("index checked");
                        let _ = q.reply.send(Err(ConsumerError::Broker {
                            operation: "committed",
                            code,
                            message: None,
                        }));
                    }
                    return;
                }
                if let Some(i) = self.queries.iter().position(|q| q.id == id) {
                    let q = self.queries.remove(i).expect("index checked");
                    let map = q
                        .partitions
                        .iter()
                        .map(|tp| (tp.clone(), answers.get(tp).and_then(|a| a.1.clone())))
                        .collect();
                    let _ = q.reply.send(Ok(map));
                }
            }
            None => {
                self.positions_in_flight = false;
                let policy = self.link.config.auto_offset_reset;
                let mut st = shared.state.lock();
                let mut errors = Vec::new();
                let mut retry = false;
                for (tp, p) in st.assignment.iter_mut() {
                    if !p.committed_requested {
                        continue;
                    }
                    p.committed_requested = false;
                    if p.position.is_some() || p.reset.is_some() {
                        continue; // the application sought meanwhile
                    }
                    match answers.get(tp) {
                        Some((ErrorCode::None, Some(om))) => {
                            tracing::debug!(partition = %tp, offset = om.offset, "resuming from the committed offset");
                            p.position = Some(om.offset);
                            p.leader_epoch = om.leader_epoch;
                            // The log may have been truncated under it since (KIP-320).
                            p.awaiting_validation = om.leader_epoch.is_some();
                        }
                        Some((ErrorCode::None, None)) => match policy {
                            AutoOffsetReset::None => {
                                p.blocked = true;
                                errors.push(ConsumerError::NoOffset(tp.clone()));
                            }
                            reset => p.reset = Some(reset),
                        },
                        Some((code, _)) if code.is_retriable() => retry = true,
                        Some((code, _)) => errors.push(ConsumerError::Broker {
                            operation: "OffsetFetch",
                            code: *code,
                            message: Some(Arc::from(tp.to_string())),
                        }),
                        None => retry = true,
                    }
                }
                st.errors.extend(errors);
                drop(st);
                shared.notify();
                if retry {
                    self.positions_retry_at = Some(now + self.backoff());
                }
            }
        }
    }

    /// Queues a `committed()` query.
    pub fn enqueue_query(
        &mut self,
        partitions: Vec<TopicPartition>,
        timeout: Duration,
        reply: CommittedReply,
    ) {
        if self.link.group_id.is_none() {
            let _ = reply.send(Err(ConsumerError::NoGroupId("committed()")));
            return;
        }
        self.next_id += 1;
        let now = Instant::now();
        self.queries.push_back(CommittedQuery {
            id: self.next_id,
            partitions,
            timeout,
            deadline: crate::consumer::deadline_after(now, timeout),
            reply,
            retry_at: None,
            last_error: None,
            in_flight: false,
        });
    }

    pub(super) fn query_failed(&mut self, id: u64, code: ErrorCode, now: Instant) {
        if let Some(q) = self.queries.iter_mut().find(|q| q.id == id) {
            q.in_flight = false;
            q.retry_at = Some(now + self.link.config.common.retry_backoff);
            q.last_error = Some(Arc::from(code.to_string()));
        }
    }

    pub(super) fn maybe_answer_query(&mut self, net: &mut Net, node: i32, now: Instant) {
        let Some(q) = self.queries.front_mut() else {
            return;
        };
        if q.in_flight || q.retry_at.is_some_and(|t| now < t) {
            return;
        }
        let req = offset_fetch(
            self.link.group_id.as_deref(),
            &q.partitions,
            self.link.config.isolation_level,
        );
        let id = q.id;
        match net
            .client
            .send(node, &req, RequestContext::OffsetFetch(Some(id)), true, now)
        {
            Ok(_) => q.in_flight = true,
            Err((e, _)) => {
                q.retry_at = Some(now + self.link.config.common.retry_backoff);
                q.last_error = Some(Arc::from(e.to_string()));
            }
        }
    }
}

/// The OffsetFetch of the group's committed offsets for `partitions`.
fn offset_fetch(
    group_id: Option<&str>,
    partitions: &[TopicPartition],
    isolation: IsolationLevel,
) -> OffsetFetchRequest {
    OffsetFetchRequest::group(
        group_id.unwrap_or_default().to_owned(),
        Some(
            group_by_topic(partitions)
                .into_iter()
                .map(|t| OffsetFetchRequestTopics {
                    name: t.topic,
                    partition_indexes: t.partitions,
                })
                .collect(),
        ),
        isolation == IsolationLevel::ReadCommitted,
    )
}
