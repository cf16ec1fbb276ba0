//! Where a group member is in its membership, per group protocol, with the transitions each
//! protocol allows. A membership changes state only through [`StateMachine::transition`],
//! which refuses a transition its table does not list with an [`IllegalTransition`] naming
//! both states and the event; staying in a state is not a transition and always allowed.
//!
//! The names are those of Java's consumer where the role is the same: its classic
//! coordinator's (`UNJOINED`, `PREPARING_REBALANCE`, `COMPLETING_REBALANCE`, `STABLE`) and its
//! new consumer's for KIP-848 (`UNSUBSCRIBED`, `JOINING`, `RECONCILING`, `ACKNOWLEDGING`,
//! `STABLE`, `FENCED`, `LEAVING`). Not states here, though Java has them:
//! - `PREPARE_LEAVING`: what Java does in it (commit, `on_partitions_revoked`) is done before
//!   the coordinator is asked to leave (by `poll()`, the checkpoint or `close()`); the request
//!   itself ("leave when the coordinator is reachable") is the coordinator's `leave_wanted`,
//!   common to both protocols, and leaves the membership's state as it is until it is sent.
//! - `FATAL`: a fatal group error stops joins and heartbeats until the next `subscribe()` (the
//!   coordinator's `failed_subscription`), under either protocol, whatever the state.
//! - `STALE` (Java's poll timeout): the member sends its leave and loses its partitions at
//!   once (`LEAVING` then `FENCED`), then joins again once `poll()` has given them up.

use std::fmt;

/// A member state of one group protocol: its name and the transitions it allows.
pub(crate) trait MemberState: Copy + Eq + fmt::Debug {
    /// The protocol, for errors.
    const PROTOCOL: &'static str;

    /// Java's name for the state, e.g. `RECONCILING`.
    fn name(self) -> &'static str;

    /// Whether a member in `self` may move to `next` (`next != self`).
    fn allows(self, next: Self) -> bool;
}

/// A transition the protocol's state machine does not allow: a bug, or an answer from the
/// coordinator that makes no sense in the member's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IllegalTransition {
    pub protocol: &'static str,
    pub from: &'static str,
    pub to: &'static str,
    /// The event that asked for it.
    pub event: &'static str,
}

impl fmt::Display for IllegalTransition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "illegal {} member state transition {} -> {} on {:?}; the member stays {}",
            self.protocol, self.from, self.to, self.event, self.from
        )
    }
}

impl std::error::Error for IllegalTransition {}

/// A membership's current state, changed only through legal transitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StateMachine<S> {
    state: S,
}

impl<S: MemberState> StateMachine<S> {
    pub fn new(initial: S) -> Self {
        Self { state: initial }
    }

    pub fn get(&self) -> S {
        self.state
    }

    pub fn is(&self, state: S) -> bool {
        self.state == state
    }

    /// Moves to `next` if the table allows it (staying is allowed); refused otherwise, the
    /// state unchanged.
    pub fn transition(&mut self, next: S, event: &'static str) -> Result<(), IllegalTransition> {
        if next == self.state {
            return Ok(());
        }
        if !self.state.allows(next) {
            return Err(IllegalTransition {
                protocol: S::PROTOCOL,
                from: self.state.name(),
                to: next.name(),
                event,
            });
        }
        tracing::debug!(
            protocol = S::PROTOCOL,
            from = self.state.name(),
            to = next.name(),
            event,
            "member state"
        );
        self.state = next;
        Ok(())
    }

    /// [`transition`](Self::transition) for the memberships: an illegal transition is a bug,
    /// logged (and fatal in debug builds, so that tests find it); the state stays.
    pub fn enter(&mut self, next: S, event: &'static str) {
        if let Err(e) = self.transition(next, event) {
            tracing::error!(error = %e, "consumer group state machine");
            debug_assert!(false, "{e}");
        }
    }
}

/// The classic protocol (JoinGroup, SyncGroup, Heartbeat), as Java's classic coordinator
/// names its states. The generation is the membership's data, not part of the state: a member
/// whose rejoin failed keeps its generation (and heartbeats with it) until the next JoinGroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClassicState {
    /// No JoinGroup or SyncGroup under way, and no generation synced since the last one
    /// began: never joined, reset (error, timeout), left, or the last attempt failed.
    Unjoined,
    /// JoinGroup sent: the coordinator holds it until every member has rejoined.
    PreparingRebalance,
    /// JoinGroup answered: the leader assigns (once the metadata covers every member's
    /// topics), then SyncGroup is sent and answered with this member's assignment.
    CompletingRebalance,
    /// SyncGroup answered: the assignment is handed to `poll()`; heartbeats keep the
    /// generation.
    Stable,
}

impl MemberState for ClassicState {
    const PROTOCOL: &'static str = "classic";

    fn name(self) -> &'static str {
        match self {
            Self::Unjoined => "UNJOINED",
            Self::PreparingRebalance => "PREPARING_REBALANCE",
            Self::CompletingRebalance => "COMPLETING_REBALANCE",
            Self::Stable => "STABLE",
        }
    }

    fn allows(self, next: Self) -> bool {
        use ClassicState::*;
        matches!(
            (self, next),
            // JoinGroup sent: a first join, or a rejoin.
            (Unjoined | Stable, PreparingRebalance)
                // JoinGroup answered.
                | (PreparingRebalance, CompletingRebalance)
                // SyncGroup answered.
                | (CompletingRebalance, Stable)
                // A join failed, was lost or abandoned; a generation reset or a leave.
                | (PreparingRebalance | CompletingRebalance | Stable, Unjoined)
        )
    }
}

/// The consumer group protocol of KIP-848 (ConsumerGroupHeartbeat), as Java's new consumer
/// names its states. The member epoch follows from the state: -1 when `Unsubscribed` or
/// `Leaving`, 0 when `Joining` or `Fenced`, the coordinator's otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kip848State {
    /// Not in the group (epoch -1): a new member, one that left, or one forgotten.
    Unsubscribed,
    /// The heartbeat with epoch 0 is sent (or to be sent again: its connection was lost).
    Joining,
    /// An assignment was handed to `poll()`, which revokes and installs it.
    Reconciling,
    /// `poll()` installed it: the next heartbeat, sent at once, names what is owned now.
    Acknowledging,
    /// In the group with nothing to reconcile: heartbeats every interval.
    Stable,
    /// The member lost its place (fenced, unknown, poll timeout): its partitions are lost,
    /// and it joins again with epoch 0 once `poll()` has given them up.
    Fenced,
    /// The leave (epoch -1, or -2 for a static member) is sent, not answered yet.
    Leaving,
}

impl MemberState for Kip848State {
    const PROTOCOL: &'static str = "consumer (KIP-848)";

    fn name(self) -> &'static str {
        match self {
            Self::Unsubscribed => "UNSUBSCRIBED",
            Self::Joining => "JOINING",
            Self::Reconciling => "RECONCILING",
            Self::Acknowledging => "ACKNOWLEDGING",
            Self::Stable => "STABLE",
            Self::Fenced => "FENCED",
            Self::Leaving => "LEAVING",
        }
    }

    fn allows(self, next: Self) -> bool {
        use Kip848State::*;
        matches!(
            (self, next),
            // The heartbeat with epoch 0 is sent.
            (Unsubscribed | Fenced, Joining)
                // Answered with an epoch; `Fenced`: a heartbeat sent before the fencing (the
                // poll timeout) was answered.
                | (Joining | Fenced, Stable)
                // An assignment handed to poll() (a newer one replacing one being installed
                // or acknowledged).
                | (Stable | Acknowledging, Reconciling)
                | (Reconciling, Acknowledging)
                // The acknowledging heartbeat is sent.
                | (Acknowledging, Stable)
                // Fenced, unknown or the poll timeout (after its leave).
                | (Joining | Reconciling | Acknowledging | Stable | Leaving, Fenced)
                // The leave is sent (`Unsubscribed`: with a heartbeat still in flight).
                | (Unsubscribed | Joining | Reconciling | Acknowledging | Stable | Fenced, Leaving)
                // The leave answered or lost; the member forgotten (no leave answer in time)
                // or reset by a commit's error.
                | (Joining | Reconciling | Acknowledging | Stable | Fenced | Leaving, Unsubscribed)
        )
    }
}

impl Kip848State {
    /// Whether the member holds an epoch the coordinator gave (it may heartbeat, commit and
    /// reconcile with it).
    pub fn has_epoch(self) -> bool {
        matches!(self, Self::Reconciling | Self::Acknowledging | Self::Stable)
    }

    /// Whether the membership still counts for the group: joined or joining (a leave asked for
    /// now is sent).
    pub fn in_group(self) -> bool {
        matches!(
            self,
            Self::Joining | Self::Fenced | Self::Reconciling | Self::Acknowledging | Self::Stable
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLASSIC: [ClassicState; 4] = [
        ClassicState::Unjoined,
        ClassicState::PreparingRebalance,
        ClassicState::CompletingRebalance,
        ClassicState::Stable,
    ];

    const KIP848: [Kip848State; 7] = [
        Kip848State::Unsubscribed,
        Kip848State::Joining,
        Kip848State::Reconciling,
        Kip848State::Acknowledging,
        Kip848State::Stable,
        Kip848State::Fenced,
        Kip848State::Leaving,
    ];

    /// Walks `path` from its first state; every step must be legal.
    fn walk<S: MemberState>(path: &[S]) -> StateMachine<S> {
        let mut m = StateMachine::new(path[0]);
        for &next in &path[1..] {
            m.transition(next, "test")
                .unwrap_or_else(|e| panic!("{e} on {path:?}"));
            assert!(m.is(next));
        }
        m
    }

    /// Every pair not in `legal` is refused, with the state unchanged.
    fn only<S: MemberState>(all: &[S], legal: &[(S, S)]) {
        for &from in all {
            for &to in all {
                let mut m = StateMachine::new(from);
                let r = m.transition(to, "test");
                if from == to || legal.contains(&(from, to)) {
                    assert_eq!(r, Ok(()), "{from:?} -> {to:?}");
                    assert!(m.is(to));
                } else {
                    let e = r.expect_err(&format!("{from:?} -> {to:?} must be refused"));
                    assert_eq!((e.from, e.to), (from.name(), to.name()));
                    assert!(m.is(from), "a refused transition leaves the state");
                }
            }
        }
    }

    #[test]
    fn classic_joins_rejoins_and_falls_back_to_unjoined() {
        use ClassicState::*;
        // Join, sync, rejoin; a failed SyncGroup; a reset of a stable member.
        walk(&[
            Unjoined,
            PreparingRebalance,
            CompletingRebalance,
            Stable,
            PreparingRebalance,
            CompletingRebalance,
            Unjoined,
            PreparingRebalance,
            CompletingRebalance,
            Stable,
            Unjoined,
        ]);
        // A JoinGroup lost with its connection.
        walk(&[Unjoined, PreparingRebalance, Unjoined]);
    }

    #[test]
    fn classic_refuses_every_other_transition() {
        use ClassicState::*;
        only(
            &CLASSIC,
            &[
                (Unjoined, PreparingRebalance),
                (Stable, PreparingRebalance),
                (PreparingRebalance, CompletingRebalance),
                (CompletingRebalance, Stable),
                (PreparingRebalance, Unjoined),
                (CompletingRebalance, Unjoined),
                (Stable, Unjoined),
            ],
        );
        // The assignment comes only from a SyncGroup after a JoinGroup.
        let mut m = StateMachine::new(Unjoined);
        let e = m.transition(Stable, "SyncGroup answered").unwrap_err();
        assert_eq!(
            e.to_string(),
            "illegal classic member state transition UNJOINED -> STABLE on \"SyncGroup \
             answered\"; the member stays UNJOINED"
        );
    }

    #[test]
    fn kip848_joins_reconciles_acknowledges_and_leaves() {
        use Kip848State::*;
        walk(&[
            Unsubscribed,
            Joining,
            Stable,
            Reconciling,
            Acknowledging,
            Stable,
            // A newer assignment while one is installed, then while it is acknowledged.
            Reconciling,
            Reconciling,
            Acknowledging,
            Reconciling,
            Acknowledging,
            Stable,
            Leaving,
            Unsubscribed,
            Joining,
        ]);
    }

    #[test]
    fn kip848_fenced_members_lose_their_partitions_and_join_again() {
        use Kip848State::*;
        walk(&[
            Unsubscribed,
            Joining,
            Fenced,
            Joining,
            Stable,
            Fenced,
            Joining,
        ]);
        // The poll timeout: the leave is sent, then the partitions are lost.
        walk(&[Stable, Leaving, Fenced, Joining]);
        // A heartbeat sent before the poll timeout is answered after it.
        walk(&[Stable, Fenced, Stable]);
        // Forgotten after a checkpoint whose leave was not answered in time.
        walk(&[Reconciling, Unsubscribed]);
    }

    #[test]
    fn kip848_refuses_every_other_transition() {
        use Kip848State::*;
        let mut legal = vec![
            (Unsubscribed, Joining),
            (Fenced, Joining),
            (Joining, Stable),
            (Fenced, Stable),
            (Stable, Reconciling),
            (Acknowledging, Reconciling),
            (Reconciling, Acknowledging),
            (Acknowledging, Stable),
        ];
        for from in [Joining, Reconciling, Acknowledging, Stable, Leaving] {
            legal.push((from, Fenced));
        }
        for from in [
            Unsubscribed,
            Joining,
            Reconciling,
            Acknowledging,
            Stable,
            Fenced,
        ] {
            legal.push((from, Leaving));
        }
        for from in [Joining, Reconciling, Acknowledging, Stable, Fenced, Leaving] {
            legal.push((from, Unsubscribed));
        }
        only(&KIP848, &legal);
        // Among those refused: an epoch without a join, skipping the acknowledgement, joining
        // again while still owning an epoch, and anything but the answer while leaving.
        for (from, to) in [
            (Unsubscribed, Stable),
            (Unsubscribed, Reconciling),
            (Reconciling, Stable),
            (Stable, Joining),
            (Leaving, Joining),
            (Leaving, Stable),
        ] {
            assert!(!from.allows(to), "{from:?} -> {to:?}");
        }
    }

    #[test]
    fn kip848_epoch_follows_the_state() {
        use Kip848State::*;
        for s in KIP848 {
            assert_eq!(
                s.has_epoch(),
                matches!(s, Reconciling | Acknowledging | Stable),
                "{s:?}"
            );
            assert_eq!(s.in_group(), !matches!(s, Unsubscribed | Leaving), "{s:?}");
        }
    }

    #[test]
    fn enter_moves_along_legal_transitions() {
        let mut m = StateMachine::new(Kip848State::Unsubscribed);
        m.enter(Kip848State::Joining, "joining");
        m.enter(Kip848State::Joining, "sent again");
        assert!(m.is(Kip848State::Joining));
        assert_eq!(m.get().name(), "JOINING");
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(
        expected = "illegal consumer (KIP-848) member state transition LEAVING -> STABLE"
    )]
    fn enter_refuses_an_illegal_transition_loudly_in_debug_builds() {
        let mut m = StateMachine::new(Kip848State::Leaving);
        m.enter(Kip848State::Stable, "heartbeat answered");
    }
}
