//! Memory for registry bodies being read, bounded in bytes across every inspection. Each
//! body is bounded on its own (4 MiB for a manifest), but the inspector reads many at
//! once: fifty pods naming fifty tags of a hostile registry's 3 MiB indexes would hold
//! 150 MiB. So bytes are reserved as they stream in, from the registry's share (so that
//! one registry cannot take it all; keyed by the address that answers, so that one
//! registry reached by many names still has one) and from the whole; a body that finds no room fails
//! at once, as a transient error retried with backoff, rather than wait (a hostile
//! registry's slow bodies would otherwise hold everyone's).

use multiarch_runtime::byte_budget::{ByteBudget, Refusal, Reservation};

/// The default for every registry together.
pub const TOTAL_BYTES: usize = 96 * 1024 * 1024;
/// The default for one registry.
pub const REGISTRY_BYTES: usize = 24 * 1024 * 1024;

/// Said in the error's message, so that it is told from a network failure.
pub const EXHAUSTED: &str = "memory for registry answers being read is exhausted";

#[derive(Debug)]
pub struct BodyBudget(ByteBudget);

impl Default for BodyBudget {
    fn default() -> Self {
        BodyBudget::new(TOTAL_BYTES, REGISTRY_BYTES)
    }
}

impl BodyBudget {
    pub fn new(total_bytes: usize, registry_bytes: usize) -> Self {
        BodyBudget(ByteBudget::new(total_bytes, registry_bytes))
    }

    /// The most bytes reserved at once so far, every registry together.
    pub fn peak_bytes(&self) -> usize {
        self.0.peak_bytes()
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
        self.0
            .reserve(share, bytes, 0, reservation)
            .map_err(|refusal| match refusal {
                Refusal::Share => format!(
                    "{EXHAUSTED} for {registry} ({} MiB per registry): too many of its answers at once",
                    self.0.share_bytes() / 1024 / 1024
                ),
                Refusal::Total => format!("{EXHAUSTED} (in all): try again"),
            })
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
