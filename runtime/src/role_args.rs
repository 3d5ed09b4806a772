//! The flags every long-running role shares, flattened into each role's own: where the
//! API server is, where the operations endpoint listens, and the Lease that keeps one
//! replica at work. One definition, so each
//! role reads them, and the operator writes them, the same way.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use crate::{
    client::{self, ClientError},
    leader_election::{ElectionConfig, ElectionConfigError},
};

/// How a role reaches the API server.
#[derive(Clone, Debug, Default, PartialEq, clap::Args, serde::Serialize)]
pub struct ClientArgs {
    /// kubeconfig file; without it, KUBECONFIG, ~/.kube/config or the in-cluster config.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
}

impl ClientArgs {
    /// A client with multiarch's deadlines and retries (`client::connect`).
    pub async fn connect(&self) -> Result<kube::Client, ClientError> {
        client::connect(self.kubeconfig.as_deref()).await
    }
}

/// Where the operations endpoint (`/metrics`, `/healthz`, `/readyz`) listens.
#[derive(Clone, Debug, PartialEq, clap::Args, serde::Serialize)]
pub struct OpsArgs {
    /// Metrics and health listen address (/metrics, /healthz, /readyz).
    #[arg(long, default_value = "0.0.0.0:8080", env = "MULTIARCH_METRICS_ADDR")]
    pub metrics_addr: SocketAddr,
}

/// Leader election: one replica works, the others stand by (client-go's timing).
#[derive(Clone, Debug, PartialEq, clap::Args, serde::Serialize)]
pub struct LeaseArgs {
    /// Run leader election (needed with more than one replica).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "MULTIARCH_LEADER_ELECT")]
    pub leader_elect: bool,

    /// How long a standby waits after the leader's last renewal before it takes over.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    #[serde(serialize_with = "duration_flag")]
    pub lease_duration: Duration,

    /// How long the leader goes on failing to renew before it stops working.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    #[serde(serialize_with = "duration_flag")]
    pub renew_deadline: Duration,

    /// How often the leader renews and a standby tries.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    #[serde(serialize_with = "duration_flag")]
    pub retry_period: Duration,
}

impl Default for LeaseArgs {
    fn default() -> Self {
        LeaseArgs {
            leader_elect: true,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl LeaseArgs {
    /// `identity`'s election for the Lease `namespace/lease_name`, or `None` without
    /// `--leader-elect`; a timing that cannot keep one leader at a time is refused.
    pub fn election(
        &self,
        namespace: &str,
        lease_name: &str,
        identity: &str,
    ) -> Result<Option<ElectionConfig>, ElectionConfigError> {
        if !self.leader_elect {
            return Ok(None);
        }
        let election = ElectionConfig {
            namespace: namespace.to_owned(),
            lease_name: lease_name.to_owned(),
            identity: identity.to_owned(),
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
        };
        election.validate()?;
        Ok(Some(election))
    }
}

/// Serialises a duration as its flag reads it (`90s`, `1m 30s`: humantime's form), for
/// the operator writing a role's flags (`multiarch_flags::to_argv`).
pub fn duration_flag<S: serde::Serializer>(
    duration: &Duration,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_str(&humantime::format_duration(*duration))
}

/// This replica's name in Leases and events: its pod's name, else `role`.
pub fn replica_identity(role: &str) -> String {
    std::env::var("POD_NAME").unwrap_or_else(|_| role.to_owned())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        lease: LeaseArgs,
    }

    #[test]
    fn the_defaults_are_client_gos_and_the_flags_change_them() {
        let defaults = Flags::parse_from(["role"]).lease;
        let election = defaults.election("ns", "lease", "me").unwrap().unwrap();
        assert_eq!(
            (
                election.lease_duration,
                election.renew_deadline,
                election.retry_period
            ),
            (
                Duration::from_secs(15),
                Duration::from_secs(10),
                Duration::from_secs(2)
            )
        );
        assert_eq!(
            (election.namespace.as_str(), election.lease_name.as_str()),
            ("ns", "lease")
        );
        let off = Flags::parse_from(["role", "--leader-elect=false"]).lease;
        assert_eq!(off.election("ns", "lease", "me"), Ok(None));
        let longer = Flags::parse_from(["role", "--lease-duration=30s", "--renew-deadline=20s"]);
        let election = longer.lease.election("ns", "lease", "me").unwrap().unwrap();
        assert_eq!(election.lease_duration, Duration::from_secs(30));
    }

    #[test]
    fn a_timing_that_allows_two_leaders_is_refused() {
        let flags = Flags::parse_from(["role", "--lease-duration=10s", "--renew-deadline=10s"]);
        assert!(matches!(
            flags.lease.election("ns", "lease", "me"),
            Err(ElectionConfigError::LeaseNotLongerThanRenewDeadline { .. })
        ));
    }
}
