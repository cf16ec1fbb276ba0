//! What the coordinator talks to for group membership: the [`GroupMembership`] interface each
//! group protocol implements (`classic_protocol`, `kip848_protocol`; held as a `Member`,
//! `member.rs`), and what a membership may use of the coordinator for one call ([`Cx`],
//! [`GroupLink`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::super::config::ConsumerConfig;
use super::super::error::ConsumerError;
use super::super::net::{Net, RequestContext};
use super::super::shared::{Membership, Shared};
use crate::protocol::ErrorCode;

/// What the coordinator keeps of its link to the group that a membership reads or changes.
#[derive(Debug)]
pub(super) struct GroupLink {
    pub config: Arc<ConsumerConfig>,
    pub group_id: Option<String>,
    /// `group.instance.id` in use.
    pub instance_id: Option<String>,
    /// The coordinator's node in the `NetworkClient`, once found.
    pub node: Option<i32>,
    /// Checkpoint or close in progress: no joins, no position lookups, no poll-timeout check.
    pub suspended: bool,
    /// A non-retriable group error was reported; no rejoin until the next `subscribe()`.
    pub failed_subscription: Option<u64>,
    /// A leave is wanted (checkpoint, close, unsubscribe), with its reason: sent once the
    /// coordinator can take it.
    pub leave_wanted: Option<String>,
    pub leave_in_flight: bool,
    /// The release of a restored image's static member is in flight.
    pub release_in_flight: bool,
    /// A membership found the coordinator gone (it moved or failed): the coordinator looks it
    /// up again once the membership's call returns.
    pub unknown: Option<&'static str>,
}

impl GroupLink {
    pub fn new(config: Arc<ConsumerConfig>) -> Self {
        Self {
            group_id: config.group_id.clone(),
            instance_id: config.group_instance_id.clone(),
            config,
            node: None,
            suspended: false,
            failed_subscription: None,
            leave_wanted: None,
            leave_in_flight: false,
            release_in_flight: false,
            unknown: None,
        }
    }

    pub fn backoff(&self) -> Duration {
        self.config.common.retry_backoff
    }

    /// `group.id`, for requests (there is one whenever a membership sends anything).
    pub fn group(&self) -> String {
        self.group_id.clone().unwrap_or_default()
    }

    /// Asks the coordinator to look its node up again, once the current call returns.
    pub fn coordinator_unknown(&mut self, why: &'static str) {
        self.unknown = Some(why);
    }

    /// Reports a non-retriable group error to `poll()`; the member does not join again until
    /// the subscription changes.
    pub fn report_fatal(&mut self, shared: &Shared, e: ConsumerError) {
        tracing::error!(error = %e, "consumer group error");
        let mut st = shared.state.lock();
        self.failed_subscription = Some(st.subscription_version);
        st.errors.push_back(e);
        drop(st);
        shared.notify();
    }

    /// Who the member is: what an assignment it installs is recorded with, for
    /// `group_metadata()` (KIP-447).
    pub fn membership(&self, member_id: &str, generation: i32) -> Membership {
        Membership {
            member_id: member_id.to_owned(),
            generation_id: generation,
            group_instance_id: self.instance_id.clone(),
        }
    }

    /// Publishes the membership of now to the shared state.
    pub fn publish(&self, shared: &Shared, member_id: &str, generation: i32) {
        shared.state.lock().membership = self.membership(member_id, generation);
    }
}

/// What a membership may use for one call: the connections, the state shared with `poll()`,
/// and the coordinator's link to the group.
pub(super) struct Cx<'a> {
    pub net: &'a mut Net,
    pub shared: &'a Shared,
    pub link: &'a mut GroupLink,
}

impl Cx<'_> {
    /// The coordinator's node if its connection can take a request now.
    pub fn ready_node(&self) -> Option<i32> {
        self.link.node.filter(|&n| self.net.client.is_ready(n))
    }

    pub fn report_fatal(&mut self, e: ConsumerError) {
        self.link.report_fatal(self.shared, e);
    }

    pub fn publish(&self, member_id: &str, generation: i32) {
        self.link.publish(self.shared, member_id, generation);
    }
}

/// Group membership under one group protocol, as the coordinator drives it. Answers to the
/// protocol's own requests go to the protocol's type (see [`Member`]).
pub(super) trait GroupMembership: std::fmt::Debug {
    /// The member id (empty when the classic coordinator has not given one).
    fn member_id(&self) -> &str;

    /// The classic generation or the KIP-848 member epoch, as requests and
    /// `group_metadata()` carry it (-1: none).
    fn generation(&self) -> i32;

    /// Whether the member holds a generation or epoch it may heartbeat and commit with.
    fn is_member(&self) -> bool;

    /// Whether there is a membership to keep up or end (joined, or joining).
    fn in_group(&self) -> bool;

    /// Whether a JoinGroup or SyncGroup is under way (the classic protocol).
    fn rebalancing(&self) -> bool;

    /// Each turn, before the coordinator's connection is needed: the protocol's own checks
    /// and the rebalance steps handed to `poll()`.
    fn prepare(&mut self, cx: &mut Cx<'_>, now: Instant);

    /// Each turn with the coordinator's connection ready (and no release pending): joins and
    /// heartbeats.
    fn drive(&mut self, cx: &mut Cx<'_>, node: i32, now: Instant);

    /// The application has not called `poll()` for `max.poll.interval.ms`: leave (if the
    /// coordinator is reachable) and give the partitions up as lost.
    fn poll_timeout(&mut self, cx: &mut Cx<'_>, now: Instant);

    /// Sends the leave asked for (`in_group()` holds), or leaves without a request where the
    /// protocol says so.
    fn leave(&mut self, cx: &mut Cx<'_>, node: i32, now: Instant, reason: &str);

    /// A leave is asked for during a rebalance, whose requests were dropped with their
    /// connection: the rebalance is over.
    fn abandon_rebalance(&mut self);

    /// Removes a restored image's static member for good (see `Coordinator::maybe_release`).
    fn send_release(
        &mut self,
        cx: &mut Cx<'_>,
        node: i32,
        now: Instant,
        member: String,
        instance: String,
    );

    /// A request of this membership will not be answered (its connection closed).
    fn request_lost(&mut self, link: &mut GroupLink, ctx: RequestContext, now: Instant);

    /// The member is forgotten without a leave answered (the coordinator was unreachable).
    fn forget(&mut self);

    /// The coordinator says the group is rebalancing (a commit's answer).
    fn rebalance_in_progress(&mut self, shared: &Shared, from: &str);

    /// An OffsetCommit answered with an error about this member: the membership's reaction,
    /// and the error the commit fails with (`None`: not a membership error here).
    fn commit_error(&mut self, cx: &mut Cx<'_>, code: ErrorCode) -> Option<ConsumerError>;

    /// The longest this membership may wait for its next turn.
    fn next_due(&self, now: Instant) -> Duration;

    /// Shifts deadlines by `by` (a restore whose monotonic clock jumped).
    fn rebase(&mut self, by: Duration);
}
