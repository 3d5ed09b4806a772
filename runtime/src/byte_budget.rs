//! Memory for bodies in flight, bounded in bytes: in all, and per share (a peer address,
//! a registry's address), so that one source cannot take it all; optionally with a
//! reserve that only small bodies may draw on once the rest is spent, so that the
//! ordinary small requests of a legitimate caller (the API server's pod reviews) still
//! find room while a tenant holds the budget with large ones. Bytes are reserved as a
//! body streams in and given back when its [`Reservation`] is dropped; a body that finds
//! no room fails at once (waiting would let a slow sender hold everyone's room).
//!
//! Used by the webhooks' request bodies (`request_body`) and the image inspector's
//! registry bodies.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Shares remembered at once; unused ones (nothing reserved) are dropped beyond it.
const SHARES_KEPT: usize = 1024;

/// Reservations are counted in KiB: a semaphore's permits are `u32`.
fn kib(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX)
}

/// Why a reservation found no room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The share (its source) holds all it may.
    Share,
    /// Every share together holds all there is.
    Total,
}

/// The small-body reserve: `bytes` that a body may draw on while what it has read is at
/// most `for_bodies_up_to`.
#[derive(Clone, Copy, Debug)]
pub struct SmallReserve {
    pub bytes: usize,
    pub for_bodies_up_to: usize,
}

pub struct ByteBudget {
    total: Arc<Semaphore>,
    total_kib: usize,
    share_kib: u32,
    shares: Mutex<HashMap<String, Arc<Semaphore>>>,
    reserve: Option<(Arc<Semaphore>, SmallReserve)>,
    /// The most reserved at once so far (the reserve included), in KiB.
    peak_kib: AtomicUsize,
}

impl std::fmt::Debug for ByteBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ByteBudget")
            .field("free_kib", &self.total.available_permits())
            .finish()
    }
}

/// What one body holds of the budget; given back when dropped.
#[derive(Default)]
pub struct Reservation {
    held: Vec<OwnedSemaphorePermit>,
    /// Bytes reserved (each reservation rounded up to KiB).
    kib: usize,
}

impl std::fmt::Debug for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation")
            .field("bytes", &self.bytes())
            .finish()
    }
}

impl Reservation {
    /// Bytes held (rounded up to KiB per reservation made).
    pub fn bytes(&self) -> usize {
        self.kib * 1024
    }
}

impl ByteBudget {
    /// `total_bytes` in all, `share_bytes` for one share.
    pub fn new(total_bytes: usize, share_bytes: usize) -> Self {
        ByteBudget {
            total: Arc::new(Semaphore::new(kib(total_bytes) as usize)),
            total_kib: kib(total_bytes) as usize,
            share_kib: kib(share_bytes),
            shares: Mutex::default(),
            reserve: None,
            peak_kib: AtomicUsize::new(0),
        }
    }

    /// Adds a reserve for small bodies beyond the total (see the module's comment).
    pub fn with_small_reserve(mut self, reserve: SmallReserve) -> Self {
        self.reserve = Some((
            Arc::new(Semaphore::new(kib(reserve.bytes) as usize)),
            reserve,
        ));
        self
    }

    /// Bytes one share may hold.
    pub fn share_bytes(&self) -> usize {
        self.share_kib as usize * 1024
    }

    /// Bytes every share together may hold, the reserve left out.
    pub fn total_bytes(&self) -> usize {
        self.total_kib * 1024
    }

    /// The most bytes reserved at once so far, every share (and the reserve) together.
    pub fn peak_bytes(&self) -> usize {
        self.peak_kib.load(Ordering::Relaxed) * 1024
    }

    fn share(&self, key: &str) -> Arc<Semaphore> {
        let mut shares = self
            .shares
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(share) = shares.get(key) {
            return share.clone();
        }
        if shares.len() >= SHARES_KEPT {
            let whole = self.share_kib as usize;
            shares.retain(|_, share| share.available_permits() < whole);
        }
        let share = Arc::new(Semaphore::new(self.share_kib as usize));
        shares.insert(key.to_owned(), share.clone());
        share
    }

    /// Adds `bytes` from `share` to `reservation`, whose body has read `read_so_far`
    /// bytes before these. While the body is small it may draw on the small reserve when
    /// its share or the whole has no room left: a caller that shares an address with a
    /// flood (the API server's reviews beside a tenant's on one node's address) still has
    /// its small requests read.
    pub fn reserve(
        &self,
        share: &str,
        bytes: usize,
        read_so_far: usize,
        reservation: &mut Reservation,
    ) -> Result<(), Refusal> {
        let amount = kib(bytes);
        let refused = match self.share(share).try_acquire_many_owned(amount) {
            Err(_) => Refusal::Share,
            Ok(from_share) => match self.total.clone().try_acquire_many_owned(amount) {
                Ok(from_total) => {
                    reservation.held.push(from_share);
                    reservation.held.push(from_total);
                    reservation.kib += amount as usize;
                    self.note_peak();
                    return Ok(());
                }
                Err(_) => Refusal::Total,
            },
        };
        match &self.reserve {
            Some((reserve, small))
                if read_so_far.saturating_add(bytes) <= small.for_bodies_up_to =>
            {
                let from_reserve = reserve
                    .clone()
                    .try_acquire_many_owned(amount)
                    .map_err(|_| refused)?;
                reservation.held.push(from_reserve);
                reservation.kib += amount as usize;
                self.note_peak();
                Ok(())
            }
            _ => Err(refused),
        }
    }

    fn note_peak(&self) {
        let reserved = self.reserve.as_ref().map_or(0, |(reserve, small)| {
            kib(small.bytes) as usize - reserve.available_permits()
        });
        let in_use = self.total_kib - self.total.available_permits() + reserved;
        self.peak_kib.fetch_max(in_use, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1024 * 1024;

    #[test]
    fn a_share_gets_its_part_and_the_whole_is_shared() {
        let budget = ByteBudget::new(3 * MIB, 2 * MIB);
        let mut first = Reservation::default();
        budget.reserve("hostile", 2 * MIB, 0, &mut first).unwrap();
        assert_eq!(first.bytes(), 2 * MIB);
        // The same share is out of room; another still has some.
        let mut more = Reservation::default();
        assert_eq!(
            budget.reserve("hostile", 1, 0, &mut more),
            Err(Refusal::Share)
        );
        let mut healthy = Reservation::default();
        budget.reserve("healthy", MIB, 0, &mut healthy).unwrap();
        // The whole is spent: a third share is refused until something is given back.
        let mut third = Reservation::default();
        assert_eq!(
            budget.reserve("third", 1024, 0, &mut third),
            Err(Refusal::Total)
        );
        drop(first);
        budget.reserve("third", 1024, 0, &mut third).unwrap();
        assert_eq!(budget.peak_bytes(), 3 * MIB);
    }

    #[test]
    fn only_small_bodies_draw_on_the_reserve_once_the_whole_is_spent() {
        let budget = ByteBudget::new(4 * MIB, 2 * MIB).with_small_reserve(SmallReserve {
            bytes: MIB,
            for_bodies_up_to: 64 * 1024,
        });
        let (mut a, mut b) = (Reservation::default(), Reservation::default());
        budget.reserve("tenant-a", 2 * MIB, 0, &mut a).unwrap();
        budget.reserve("tenant-b", 2 * MIB, 0, &mut b).unwrap();
        // A large body of a third source finds no room; a small one does, and goes on
        // drawing on the reserve while it stays small.
        let mut large = Reservation::default();
        assert_eq!(
            budget.reserve("api-server", 128 * 1024, 0, &mut large),
            Err(Refusal::Total)
        );
        let mut small = Reservation::default();
        budget
            .reserve("api-server", 32 * 1024, 0, &mut small)
            .unwrap();
        budget
            .reserve("api-server", 32 * 1024, 32 * 1024, &mut small)
            .unwrap();
        assert_eq!(
            budget.reserve("api-server", 1024, 64 * 1024, &mut small),
            Err(Refusal::Total),
            "past the small size the reserve is closed to it"
        );
        assert_eq!(budget.peak_bytes(), 4 * MIB + 64 * 1024);
        // A small body of an address whose share a flood holds is read from the reserve.
        drop(b);
        let mut neighbour = Reservation::default();
        assert_eq!(
            budget.reserve("tenant-a", 128 * 1024, 0, &mut neighbour),
            Err(Refusal::Share)
        );
        budget
            .reserve("tenant-a", 32 * 1024, 0, &mut neighbour)
            .unwrap();
        assert_eq!(neighbour.bytes(), 32 * 1024);
    }
}
