//! Offset commits for [`Coordinator`]: a FIFO queue (commits stay in order), one in flight.

use super::*;

impl Coordinator {
    // --- commits -----------------------------------------------------------------------------

    /// Queues a commit; `None` commits the positions of records returned so far, read when the
    /// request is sent.
    pub fn enqueue_commit(
        &mut self,
        offsets: CommitOffsets,
        timeout: Duration,
        reply: CommitReply,
    ) {
        self.next_id += 1;
        let now = Instant::now();
        self.commits.push_back(PendingCommit {
            id: self.next_id,
            offsets,
            timeout,
            deadline: crate::consumer::deadline_after(now, timeout),
            reply,
            retry_at: None,
            last_error: None,
            in_flight: false,
        });
    }

    /// Commits queued or in flight.
    pub fn pending_commits(&self) -> usize {
        self.commits.len()
    }

    pub(super) fn complete_commit(
        reply: CommitReply,
        result: Result<(), ConsumerError>,
        shared: &Shared,
    ) {
        match reply {
            CommitReply::Wait(tx) => {
                let _ = tx.send(result);
            }
            CommitReply::Async(id) => {
                shared.state.lock().async_commits_done.push((id, result));
                shared.notify();
            }
        }
    }

    pub(super) fn expire(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.commits.len() {
            let c = &self.commits[i];
            if !c.in_flight && now >= c.deadline {
                let c = self.commits.remove(i).expect("index checked");
                let e = ConsumerError::Timeout {
                    operation: "commit",
                    after: c.timeout,
                    last_error: c.last_error.clone().or_else(|| self.unreachable()),
                };
                match c.reply {
                    CommitReply::Wait(tx) => {
                        let _ = tx.send(Err(e));
                    }
                    CommitReply::Async(_) => {
                        // Unreachable in practice (async commits are not retried); keep the
                        // callback's promise anyway.
                        tracing::warn!(error = %e, "async commit expired");
                    }
                }
            } else {
                i += 1;
            }
        }
        let mut i = 0;
        while i < self.queries.len() {
            let q = &self.queries[i];
            if !q.in_flight && now >= q.deadline {
                let q = self.queries.remove(i).expect("index checked");
                let _ = q.reply.send(Err(ConsumerError::Timeout {
                    operation: "committed",
                    after: q.timeout,
                    last_error: q.last_error.or_else(|| self.unreachable()),
                }));
            } else {
                i += 1;
            }
        }
    }

    /// Why a request never went out, for timeout errors.
    pub(super) fn unreachable(&self) -> Option<Arc<str>> {
        Some(Arc::from(match self.link.node {
            None => "the group coordinator could not be found (no broker answered FindCoordinator)",
            Some(_) => "no connection to the group coordinator",
        }))
    }

    pub(super) fn maybe_commit(&mut self, net: &mut Net, shared: &Shared, node: i32, now: Instant) {
        loop {
            let (id, offsets, grouped, joining) = {
                let Some(c) = self.commits.front() else {
                    return;
                };
                if c.in_flight || c.retry_at.is_some_and(|t| now < t) {
                    return;
                }
                let st = shared.state.lock();
                let offsets = match &c.offsets {
                    CommitOffsets::App { epoch, .. } if *epoch != st.checkpoint_epoch => {
                        tracing::debug!(
                            "commit issued before a checkpoint: superseded by the checkpoint's commit"
                        );
                        Vec::new()
                    }
                    CommitOffsets::App { offsets, .. } => offsets.clone(),
                    CommitOffsets::Current => st.consumed_offsets(),
                };
                (
                    c.id,
                    offsets,
                    matches!(st.subscription, Subscription::Topics(_)),
                    matches!(st.rebalance, RebalanceStep::JoinAllowed),
                )
            };
            let rebalancing = grouped && (joining || self.rebalancing());
            if rebalancing
                && !offsets.is_empty()
                && self.rebalance_protocol == RebalanceProtocol::Cooperative
            {
                // Cooperative: the member keeps its partitions through the rebalance; the
                // commit goes out with the generation the rebalance ends in.
                return;
            }
            let refuse = if offsets.is_empty() {
                Some(Ok(()))
            } else if rebalancing {
                Some(Err(ConsumerError::RebalanceInProgress))
            } else if grouped && !self.member.is_member() {
                Some(Err(ConsumerError::CommitFailed(Arc::from(
                    "this consumer is not part of an active group generation (it left or its \
                     partitions were reassigned); poll() rejoins",
                ))))
            } else {
                None
            };
            if let Some(r) = refuse {
                let c = self.commits.pop_front().expect("front exists");
                Self::complete_commit(c.reply, r, shared);
                continue;
            }
            let (generation, member_id) = if grouped {
                (self.member.generation(), self.member.member_id().to_owned())
            } else {
                (-1, String::new())
            };
            let mut by_topic: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
            for (tp, om) in &offsets {
                by_topic
                    .entry(&tp.topic)
                    .or_default()
                    .push(OffsetCommitRequestPartition {
                        partition_index: tp.partition,
                        committed_offset: om.offset,
                        committed_leader_epoch: om.leader_epoch.unwrap_or(-1),
                        committed_metadata: Some(om.metadata.clone()),
                    });
            }
            let req = OffsetCommitRequest {
                group_id: self.link.group(),
                generation_id_or_member_epoch: generation,
                member_id,
                group_instance_id: self.link.instance_id.clone(),
                topics: by_topic
                    .into_iter()
                    .map(|(t, partitions)| OffsetCommitRequestTopic {
                        name: t.to_owned(),
                        partitions,
                    })
                    .collect(),
            };
            match net
                .client
                .send(node, &req, RequestContext::OffsetCommit(id), true, now)
            {
                Ok(_) => {
                    tracing::debug!(partitions = offsets.len(), generation, "offset commit sent");
                    if let Some(c) = self.commits.front_mut() {
                        c.in_flight = true;
                    }
                }
                Err((e, _)) => {
                    let msg: Arc<str> = Arc::from(e.to_string());
                    self.commit_failed(id, ErrorCode::NetworkException, Some(msg), shared, now);
                }
            }
            return;
        }
    }

    /// A commit attempt failed with a retriable cause: retried (sync) or reported (async).
    pub(super) fn commit_failed(
        &mut self,
        id: u64,
        code: ErrorCode,
        detail: Option<Arc<str>>,
        shared: &Shared,
        now: Instant,
    ) {
        let Some(idx) = self.commits.iter().position(|c| c.id == id) else {
            return;
        };
        let c = &mut self.commits[idx];
        c.in_flight = false;
        c.last_error = Some(detail.unwrap_or_else(|| Arc::from(code.to_string())));
        match c.reply {
            CommitReply::Wait(_) => c.retry_at = Some(now + self.link.config.common.retry_backoff),
            CommitReply::Async(_) => {
                let c = self.commits.remove(idx).expect("index checked");
                Self::complete_commit(
                    c.reply,
                    Err(ConsumerError::Broker {
                        operation: "commit",
                        code,
                        message: c.last_error,
                    }),
                    shared,
                );
            }
        }
    }

    pub fn on_offset_commit(
        &mut self,
        net: &mut Net,
        id: u64,
        resp: OffsetCommitResponse,
        shared: &Shared,
    ) {
        let now = Instant::now();
        let code = resp
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .map(|p| p.error_code)
            .find(|c| !c.is_ok())
            .unwrap_or(ErrorCode::None);
        let finish = |this: &mut Self, r: Result<(), ConsumerError>| {
            if let Some(i) = this.commits.iter().position(|c| c.id == id) {
                let c = this.commits.remove(i).expect("index checked");
                Self::complete_commit(c.reply, r, shared);
            }
        };
        match code {
            ErrorCode::None => {
                tracing::debug!(id, "offsets committed");
                finish(self, Ok(()));
            }
            ErrorCode::RebalanceInProgress => {
                // Java: the generation stays, the member rejoins; the caller may retry after.
                self.member.rebalance_in_progress(shared, "OffsetCommit");
                let waits = matches!(
                    self.commits.iter().find(|c| c.id == id).map(|c| &c.reply),
                    Some(CommitReply::Wait(_))
                );
                if waits && self.rebalance_protocol == RebalanceProtocol::Cooperative {
                    // The partitions stay this member's: sent again in the new generation.
                    self.commit_failed(id, code, None, shared, now);
                } else {
                    finish(self, Err(ConsumerError::RebalanceInProgress));
                }
            }
            ErrorCode::StaleMemberEpoch => {
                // KIP-848: the epoch moved on since the commit was sent; Java retries a
                // synchronous commit with the new one (an asynchronous one fails).
                self.commit_failed(id, code, None, shared, now);
            }
            code if coordinator_error(code) || code == ErrorCode::RequestTimedOut => {
                if code != ErrorCode::CoordinatorLoadInProgress {
                    self.coordinator_unknown(net, shared, code.name());
                }
                self.commit_failed(id, code, None, shared, now);
            }
            code => {
                // An error about this member (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, ...): its
                // protocol reacts and says what the commit fails with.
                let e = self
                    .with_member(net, shared, |m, cx| m.commit_error(cx, code))
                    .unwrap_or(ConsumerError::Broker {
                        operation: "commit",
                        code,
                        message: None,
                    });
                finish(self, Err(e));
            }
        }
    }
}
