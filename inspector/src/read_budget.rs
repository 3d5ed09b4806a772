//! What one read of an image's binaries may cost (`BinaryLimits`) and where it stands
//! (`ReadState`): the bytes fetched and unpacked so far, counted by every stream of the
//! read (`layer_reads`), and whether the read was abandoned.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use crate::executable_lookup::LookupLimits;

/// What reading one image's binaries may cost.
#[derive(Clone, Copy, Debug)]
pub struct BinaryLimits {
    /// Layer bytes fetched, as stored (compressed), over every pass.
    pub fetched_bytes: u64,
    /// Tar bytes unpacked from them: what a decompression bomb would inflate.
    pub unpacked_bytes: u64,
    /// The whole read.
    pub deadline: Duration,
    pub lookup: LookupLimits,
}

impl Default for BinaryLimits {
    /// A 2 GB image is read whole about three times (links, program, loader).
    fn default() -> Self {
        BinaryLimits {
            fetched_bytes: 8 << 30,
            unpacked_bytes: 24 << 30,
            deadline: Duration::from_secs(600),
            lookup: LookupLimits::default(),
        }
    }
}

/// Where one read stands: bytes fetched and unpacked, and whether it was abandoned.
pub(crate) struct ReadState {
    pub limits: BinaryLimits,
    pub fetched: AtomicU64,
    pub unpacked: AtomicU64,
    pub abandoned: AtomicBool,
    /// The registry's stream failed (not the image): a transient failure.
    pub network_failed: AtomicBool,
}

/// Stops the read's streams when the read is dropped (deadline, caller gone).
pub(crate) struct AbandonOnDrop(pub Arc<ReadState>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        self.0.abandoned.store(true, Ordering::SeqCst);
    }
}
