//! The admin client as a CRaC resource: before the image its connections close (a call under
//! way finishes first; calls made meanwhile wait for the checkpoint's end, within their own
//! time); after a restore, or a checkpoint that did not happen, it bootstraps again (the
//! restorer's `crac.bootstrap.servers.var` is read then), since the cluster may have moved
//! while the process was an image.

use crac_api::{Context, Resource, ResourceError};

use super::AdminInner;

impl Resource for AdminInner {
    fn before_checkpoint(&self, _: &Context) -> Result<(), ResourceError> {
        let _span = tracing::info_span!("kafka_admin_checkpoint", client_id = %self.config.common.client_id).entered();
        let mut s = self.state.lock();
        s.checkpointing = true;
        s.io.close_all();
        Ok(())
    }

    fn after_restore(&self, _: &Context) -> Result<(), ResourceError> {
        let _span =
            tracing::info_span!("kafka_admin_restore", client_id = %self.config.common.client_id)
                .entered();
        let mut s = self.state.lock();
        s.io.rebootstrap();
        s.checkpointing = false;
        self.resumed.notify_all();
        Ok(())
    }

    fn name(&self) -> String {
        format!("kafka admin client {}", self.config.common.client_id)
    }
}
