//! The end-to-end tier: multiarch installed from its image on a real cluster exactly as
//! the README tells a user, then driven with kubectl through real pods. `scripts/e2e`
//! starts a cluster from the kit (or takes yours by kubeconfig), builds and pushes the
//! image, and runs `tests/cluster.rs`, whose cases use what is here.

pub mod churn;
pub mod creator;
pub mod diagnostics;
pub mod kubectl;
pub mod pod_watch;
pub mod pods;
pub mod readme;
pub mod sig_scheduling;
pub mod tier;
pub mod wait;
