//! `multiarch_leader{lease}`: whether this process leads each Lease it competes for. The
//! electors set it (`leader_election`); every role registers it (its supervisor's
//! `Tasks` carry it).

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{family::Family, gauge::Gauge},
    registry::Registry,
};

/// `multiarch_leader{lease}`: 1 while this replica holds the Lease, 0 while it waits
/// for it. Summed over a role's replicas it is 1 when the role has a leader: an alert
/// can tell a role without one (every replica up, none leading) from a role whose
/// replicas are all down (`up`).
#[derive(Clone, Debug, Default)]
pub struct LeaderGauge(Family<LeaseLabel, Gauge>);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabel {
    lease: String,
}

impl LeaderGauge {
    pub const NAME: &'static str = "multiarch_leader";

    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            Self::NAME,
            "1 while this replica holds its role's Lease, 0 while it waits for it (by lease)",
            self.0.clone(),
        );
    }

    /// The value for `lease`, or `None` when this process does not compete for it.
    pub fn value(&self, lease: &str) -> Option<i64> {
        self.0
            .get(&LeaseLabel {
                lease: lease.to_owned(),
            })
            .map(|gauge| gauge.get())
    }

    /// Sets `lease`'s value.
    pub fn set(&self, lease: &str, leading: bool) {
        self.gauge(lease).set(i64::from(leading));
    }

    /// The gauge of `lease` (the elector of that Lease keeps it current).
    pub(crate) fn gauge(&self, lease: &str) -> Gauge {
        self.0
            .get_or_create(&LeaseLabel {
                lease: lease.to_owned(),
            })
            .clone()
    }
}
