//! The names the scheduler's Deployment places pods under, for a rename
//! (`spec.placement.schedulerName` changed) that strands no pod. The webhook routes new
//! pods to the new name as soon as it reads the change; pods already routed (or routed by
//! a replica that had not read it yet) name the old one, which the renamed scheduler does
//! not place. The Deployment remembers the names it placed before
//! (`PREVIOUS_SCHEDULER_NAMES`, the last few), and once the renamed scheduler is rolled
//! out, every pod still pending under one of them is recreated (`decide`), as a mode
//! switch's drain recreates pods. Admission then routes it to the new name.

use k8s_openapi::api::apps::v1::Deployment;
use multiarch_flags::{SchedulerArgs, parse_known_argv};
use serde_json::Value;
use tracing::warn;

use crate::install::{MAX_PREVIOUS_SCHEDULER_NAMES, SCHEDULER};
use multiarch_crd::names::PREVIOUS_SCHEDULER_NAMES;

/// The scheduler Deployment as it is now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeployedScheduler {
    /// The name it places (`--scheduler-name`).
    pub name: String,
    /// The names it placed before, most recent first.
    pub previous: Vec<String>,
}

impl DeployedScheduler {
    /// The names `deployment` places and placed.
    pub fn of(deployment: &Deployment) -> DeployedScheduler {
        read(&serde_json::to_value(deployment).unwrap_or(Value::Null))
    }
}

/// The scheduler Deployment's names in `namespace`, `None` without one (the webhooks,
/// which every replica serves, read it on their own).
pub async fn deployed_in(
    client: &kube::Client,
    namespace: &str,
) -> Result<Option<DeployedScheduler>, kube::Error> {
    let api = kube::Api::<Deployment>::namespaced(client.clone(), namespace);
    Ok(api
        .get_opt(SCHEDULER)
        .await?
        .as_ref()
        .map(DeployedScheduler::of))
}

fn read(deployment: &Value) -> DeployedScheduler {
    let args: Vec<&str> = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    // Read as the scheduler reads it; flags another version wrote and this one does not
    // know are left out, not a reason to lose the name.
    let name = match parse_known_argv::<SchedulerArgs>(&args) {
        Ok(flags) => flags.scheduler_name,
        Err(error) => {
            warn!(%error, "cannot read the scheduler Deployment's args: taking the default scheduler name");
            multiarch_crd::names::DEFAULT_SCHEDULER_NAME.to_owned()
        }
    };
    let previous = deployment["metadata"]["annotations"][PREVIOUS_SCHEDULER_NAMES]
        .as_str()
        .unwrap_or_default()
        .split(',')
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect();
    DeployedScheduler { name, previous }
}

/// The names to remember when the scheduler is to place `wanted`: the deployed name if it
/// differs, then those remembered already; never `wanted`, each once, the last few.
pub fn previous_names(deployed: Option<&DeployedScheduler>, wanted: &str) -> Vec<String> {
    let Some(deployed) = deployed else {
        return Vec::new();
    };
    let mut names: Vec<String> = Vec::new();
    for name in std::iter::once(&deployed.name).chain(&deployed.previous) {
        if name != wanted && !names.contains(name) {
            names.push(name.clone());
        }
    }
    names.truncate(MAX_PREVIOUS_SCHEDULER_NAMES);
    names
}

/// Every name pods waiting for the scheduler may carry: `wanted`, the deployed one and
/// those it placed before, each once.
pub fn every_name(deployed: Option<&DeployedScheduler>, wanted: &str) -> Vec<String> {
    let mut names = vec![wanted.to_owned()];
    names.extend(previous_names(deployed, wanted));
    names
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn deployment(args: &[&str], previous: Option<&str>) -> Value {
        let mut d = json!({"spec": {"template": {"spec": {"containers": [{"args": args}]}}}});
        if let Some(p) = previous {
            d["metadata"]["annotations"][PREVIOUS_SCHEDULER_NAMES] = json!(p);
        }
        d
    }

    #[test]
    fn the_names_placed_before_are_remembered_most_recent_first() {
        let fresh = read(&deployment(&["scheduler", "--scheduler-name=a"], None));
        assert_eq!(fresh.name, "a");
        assert!(previous_names(Some(&fresh), "a").is_empty(), "no rename");
        assert_eq!(previous_names(Some(&fresh), "b"), ["a"]);
        let renamed = read(&deployment(&["scheduler", "--scheduler-name=b"], Some("a")));
        assert_eq!(previous_names(Some(&renamed), "b"), ["a"]);
        assert_eq!(previous_names(Some(&renamed), "c"), ["b", "a"]);
        // Back to an old name: it is no longer a previous one.
        assert_eq!(previous_names(Some(&renamed), "a"), ["b"]);
        let many = read(&deployment(
            &["scheduler", "--scheduler-name=f"],
            Some("e,d,c,b,a"),
        ));
        assert_eq!(previous_names(Some(&many), "g"), ["f", "e", "d", "c"]);
        assert!(previous_names(None, "a").is_empty());
        // Without the flag, the default name.
        assert_eq!(
            read(&deployment(&["scheduler"], None)).name,
            "multiarch-scheduler"
        );
        // Written by another version, with a flag this one does not know.
        let other_version = ["scheduler", "--a-later-flag=1", "--scheduler-name=later"];
        assert_eq!(read(&deployment(&other_version, None)).name, "later");
    }
}
