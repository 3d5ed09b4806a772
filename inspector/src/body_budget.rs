//! Memory for registry bodies being read, bounded in bytes across every inspection. Each
//! body is bounded on its own (4 MiB for a manifest), but the inspector reads many at
//! once: fifty pods naming fifty tags of a hostile registry's 3 MiB indexes would hold
//! 150 MiB. So bytes are reserved as they stream in, from the registry's share (so that
//! one registry cannot take it all; keyed by the address that answers, so that one
//! registry reached by many names still has one) and from the whole; a body that finds no room fails
//! at once, as a transient error retried with backoff, rather than wait (a hostile
//! registry's slow bodies would otherwise hold everyone's).

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The default for every registry together.
pub const TOTAL_BYTES: usize = 96 * 1024 * 1024;
/// The default for one registry.
pub const REGISTRY_BYTES: usize = 24 * 1024 * 1024;
/// Registries whose share is remembered; unused shares (nothing reserved) are dropped
/// beyond it.
const REGISTRIES_KEPT: usize = 1024;

/// Said in the error's message, so that it is told from a network failure.
pub const EXHAUSTED: &str = "memory for registry answers being read is exhausted";

/// Reservations are counted in KiB: a semaphore's permits are `u32`.
fn kib(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX)
}

pub struct BodyBudget {
    total: Arc<Semaphore>,
    total_kib: usize,
    registry_kib: u32,
    registries: Mutex<HashMap<String, Arc<Semaphore>>>,
    /// The most reserved at once so far, in KiB.
    peak_kib: AtomicUsize,
}

impl std::fmt::Debug for BodyBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BodyBudget")
            .field("free_kib", &self.total.available_permits())
            .finish()
    }
}

impl Default for BodyBudget {
    fn default() -> Self {
        BodyBudget::new(TOTAL_BYTES, REGISTRY_BYTES)
    }
}

/// What one body holds of the budget; given back when dropped.
#[derive(Default)]
pub struct Reservation {
    held: Vec<OwnedSemaphorePermit>,
}

impl BodyBudget {
    pub fn new(total_bytes: usize, registry_bytes: usize) -> Self {
        BodyBudget {
            total: Arc::new(Semaphore::new(kib(total_bytes) as usize)),
            total_kib: kib(total_bytes) as usize,
            registry_kib: kib(registry_bytes),
            registries: Mutex::default(),
            peak_kib: AtomicUsize::new(0),
        }
    }

    /// The most bytes reserved at once so far, every registry together.
    pub fn peak_bytes(&self) -> usize {
        self.peak_kib.load(Ordering::Relaxed) * 1024
    }

    fn share(&self, key: &str) -> Arc<Semaphore> {
        let mut shares = self
            .registries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(share) = shares.get(key) {
            return share.clone();
        }
        if shares.len() >= REGISTRIES_KEPT {
            let whole = self.registry_kib as usize;
            shares.retain(|_, share| share.available_permits() < whole);
        }
        let share = Arc::new(Semaphore::new(self.registry_kib as usize));
        shares.insert(key.to_owned(), share.clone());
        share
    }

    /// Adds `bytes` from the share `share` (the address a registry answers from) to
    /// `reservation`, or says why there is no room, naming `registry`.
    pub fn reserve(
        &self,
        share: &str,
        registry: &str,
        bytes: usize,
        reservation: &mut Reservation,
    ) -> Result<(), String> {
        let amount = kib(bytes);
        let from = self.share(share);
        let Ok(from_share) = from.try_acquire_many_owned(amount) else {
            return Err(format!(
                "{EXHAUSTED} for {registry} ({} MiB per registry): too many of its answers at once",
                self.registry_kib / 1024
            ));
        };
        let Ok(from_total) = self.total.clone().try_acquire_many_owned(amount) else {
            return Err(format!("{EXHAUSTED} (in all): try again"));
        };
        reservation.held.push(from_share);
        reservation.held.push(from_total);
        let in_use = self.total_kib - self.total.available_permits();
        self.peak_kib.fetch_max(in_use, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registry_gets_its_share_and_the_whole_is_shared() {
        let budget = BodyBudget::new(3 * 1024 * 1024, 2 * 1024 * 1024);
        let mut first = Reservation::default();
        budget
            .reserve("hostile", "hostile", 2 * 1024 * 1024, &mut first)
            .unwrap();
        // The same registry is out of its share; another still has room.
        let mut more = Reservation::default();
        let refused = budget
            .reserve("hostile", "hostile", 1, &mut more)
            .unwrap_err();
        assert!(
            refused.contains("for hostile (2 MiB per registry)"),
            "{refused}"
        );
        let mut healthy = Reservation::default();
        budget
            .reserve("healthy", "healthy", 1024 * 1024, &mut healthy)
            .unwrap();
        // The whole is spent: a third registry is refused until something is given back.
        let mut third = Reservation::default();
        assert!(budget.reserve("third", "third", 1024, &mut third).is_err());
        drop(first);
        budget.reserve("third", "third", 1024, &mut third).unwrap();
    }
}
