//! When the scheduling loop is ready: every list it schedules from is in. Two of them may
//! never come (the configuration CRD not installed, DeviceClasses unreadable): past the
//! grace period the loop goes on without them, and says so.

use std::time::Instant;

use tracing::warn;

use super::Loop;
use crate::in_cluster::inbox::Kind;

impl Loop {
    /// Takes the lists past their grace as read, and publishes the readiness.
    pub(super) fn update_readiness(&mut self, now: Instant) {
        let past_grace = now.duration_since(self.books.started) > self.options.config_grace;
        if past_grace && self.books.synced.insert(Kind::Configs) {
            warn!("no ClusterPodPlacementConfig list yet (CRD missing?); scheduling with defaults");
        }
        if past_grace && self.books.synced.insert(Kind::DeviceClasses) {
            warn!(
                "the DeviceClasses cannot be read yet (see the DeviceClass watch's log): scheduling without them; a pod asking for a name a DeviceClass maps waits as Insufficient until they are read"
            );
        }
        let ready = Kind::ALL.iter().all(|k| self.books.synced.contains(k));
        self.exports
            .ready
            .send_if_modified(|r| std::mem::replace(r, ready) != ready);
    }
}
