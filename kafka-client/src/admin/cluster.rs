//! The cluster: its id, controller and brokers.

use super::io::Io;
use super::{Admin, AdminError, BrokerInfo, ClusterDescription, Options};

impl Admin {
    /// The cluster's id, controller and brokers (from any broker's metadata).
    pub fn describe_cluster(&self, opts: &Options) -> Result<ClusterDescription, AdminError> {
        let (call, mut s) = self.call("describe_cluster", opts)?;
        s.io.retrying(&call, |io: &mut Io| {
            let m = io.metadata(&call, Some(Vec::new()))?;
            let mut brokers: Vec<BrokerInfo> = m
                .brokers
                .iter()
                .map(|b| BrokerInfo {
                    id: b.node_id,
                    host: b.host.clone(),
                    port: u16::try_from(b.port).unwrap_or(0),
                    rack: b.rack.clone(),
                    fenced: false,
                })
                .collect();
            brokers.sort_by_key(|b| b.id);
            Ok(ClusterDescription {
                cluster_id: m.cluster_id.clone(),
                controller: (m.controller_id >= 0).then_some(m.controller_id),
                brokers,
            })
        })
    }
}
