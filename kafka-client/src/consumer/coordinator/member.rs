//! The membership of the configured `group.protocol`: the classic protocol's or KIP-848's,
//! used through the one [`GroupMembership`] interface.

use std::ops::{Deref, DerefMut};

use super::super::config::{ConsumerConfig, GroupProtocol};
use super::classic_protocol::ClassicMembership;
use super::kip848_protocol::Kip848Membership;
use super::membership::GroupMembership;

/// The membership of the configured `group.protocol`.
#[derive(Debug)]
pub(super) enum Member {
    Classic(ClassicMembership),
    Kip848(Kip848Membership),
}

impl Member {
    pub fn new(config: &ConsumerConfig) -> Self {
        match config.group_protocol {
            GroupProtocol::Classic => Self::Classic(ClassicMembership::new(config)),
            GroupProtocol::Consumer => Self::Kip848(Kip848Membership::new()),
        }
    }

    /// The membership of a restored process: a new member (with a new member id), of the
    /// same protocol.
    pub fn renewed(&self) -> Self {
        match self {
            Self::Classic(m) => Self::Classic(m.renewed()),
            Self::Kip848(_) => Self::Kip848(Kip848Membership::new()),
        }
    }

    pub fn classic(&mut self) -> Option<&mut ClassicMembership> {
        match self {
            Self::Classic(m) => Some(m),
            Self::Kip848(_) => None,
        }
    }

    pub fn kip848(&mut self) -> Option<&mut Kip848Membership> {
        match self {
            Self::Kip848(m) => Some(m),
            Self::Classic(_) => None,
        }
    }
}

impl Deref for Member {
    type Target = dyn GroupMembership;

    fn deref(&self) -> &Self::Target {
        match self {
            Self::Classic(m) => m,
            Self::Kip848(m) => m,
        }
    }
}

impl DerefMut for Member {
    fn deref_mut(&mut self) -> &mut Self::Target {
        match self {
            Self::Classic(m) => m,
            Self::Kip848(m) => m,
        }
    }
}
