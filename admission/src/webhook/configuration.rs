//! The webhook's configuration follows the cluster's placement configuration: the mode
//! and the scheduler name pods are routed to (each unless pinned on the command line:
//! a renamed scheduler must not leave pods routed to a name nobody serves), whether
//! preferences apply, and every
//! PodPlacementConfig (gate mode: one that selects a pod decides its preferred-affinity
//! label like the cluster-wide config does).

use std::sync::{Arc, RwLock};

use multiarch_crd::{AdmissionAffinity, PlacementMode, names::DEFAULT_SCHEDULER_NAME};
use multiarch_runtime::{
    device_classes::{self, DeviceClasses},
    follow::SenderGone,
    placement_config::{self, PlacementConfigs},
    supervisor::Tasks,
};
use tokio::sync::watch;
use tracing::info;

use super::decision::WebhookConfig;

/// What the command line pins instead of following the ClusterPodPlacementConfig.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pinned {
    pub mode: bool,
    pub scheduler_name: bool,
}

/// The webhook's configuration before the ClusterPodPlacementConfig is read: the pinned
/// mode and scheduler name, else the defaults; when it will be `followed` and the mode is
/// not pinned, marked unknown (the webhook is not ready until the first read).
pub fn initial(
    mode: Option<PlacementMode>,
    scheduler_name: Option<&str>,
    own_namespace: &str,
    followed: bool,
) -> Arc<RwLock<WebhookConfig>> {
    let mut config = WebhookConfig::new(
        mode.unwrap_or(PlacementMode::Scheduler),
        scheduler_name.unwrap_or(DEFAULT_SCHEDULER_NAME),
        own_namespace,
    );
    config.known = !followed || mode.is_some();
    Arc::new(RwLock::new(config))
}

/// The webhook's configuration from its command line, then, with a `client`, following the
/// ClusterPodPlacementConfig in everything the command line does not pin.
pub fn start(
    mode: Option<PlacementMode>,
    scheduler_name: Option<&str>,
    own_namespace: &str,
    client: Option<&kube::Client>,
    tasks: &Tasks,
) -> Arc<RwLock<WebhookConfig>> {
    let config = initial(mode, scheduler_name, own_namespace, client.is_some());
    if let Some(client) = client {
        let pinned = Pinned {
            mode: mode.is_some(),
            scheduler_name: scheduler_name.is_some(),
        };
        follow(
            placement_config::follow(client, tasks),
            config.clone(),
            pinned,
            tasks,
        );
        follow_device_classes(device_classes::follow(client, tasks), config.clone(), tasks);
    }
    config
}

/// Keeps the DeviceClasses' mapped names in `config` until shutdown; until the first
/// read the webhook is not ready.
fn follow_device_classes(
    classes: watch::Receiver<Arc<DeviceClasses>>,
    config: Arc<RwLock<WebhookConfig>>,
    tasks: &Tasks,
) {
    let write = move |snapshot: Arc<DeviceClasses>| {
        config
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .device_classes = snapshot;
    };
    write(classes.borrow().clone());
    let needed = SenderGone::Fail("the DeviceClass watch ended");
    tasks.follow("webhook DeviceClasses", classes, needed, write);
}

/// Applies a snapshot of the placement configuration to the webhook's.
pub fn apply(config: &mut WebhookConfig, configs: &PlacementConfigs, pinned: Pinned) {
    let spec = configs.cluster.as_ref();
    let placement = spec.map(|s| s.placement_or_default()).unwrap_or_default();
    if !pinned.mode {
        config.mode = placement.mode;
    }
    if !pinned.scheduler_name {
        config.scheduler_name = placement.scheduler_name;
    }
    config.preferences_enabled = spec
        .and_then(|s| s.plugins.as_ref())
        .and_then(|p| p.enabled_node_affinity_scoring())
        .is_some();
    config.cluster_plugins = spec.and_then(|s| s.plugins.clone());
    config.admission_affinity = spec
        .map(|s| s.placement_or_default().admission_affinity)
        .unwrap_or_default()
        == AdmissionAffinity::Enabled;
    // Shared with the snapshot: its rules were compiled when it was made, outside
    // this lock every review reads.
    config.pod_configs = configs.pod_configs.clone();
    config.architecture_rules = configs.architecture_rules.clone();
    config.known = pinned.mode || configs.synced;
}

/// Keeps `config` in step with `configs` until shutdown.
fn follow(
    configs: watch::Receiver<Arc<PlacementConfigs>>,
    config: Arc<RwLock<WebhookConfig>>,
    pinned: Pinned,
    tasks: &Tasks,
) {
    let needed = SenderGone::Fail("the configuration watch ended");
    tasks.follow("webhook configuration", configs, needed, move |snapshot| {
        let mut current = config
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (mode, scheduler_name) = (current.mode, current.scheduler_name.clone());
        apply(&mut current, &snapshot, pinned);
        if current.mode != mode {
            info!(mode = ?current.mode, "webhook mode changed by the ClusterPodPlacementConfig");
        }
        if current.scheduler_name != scheduler_name {
            info!(from = %scheduler_name, to = %current.scheduler_name, "pods are routed to the scheduler the ClusterPodPlacementConfig names");
        }
    });
}

#[cfg(test)]
mod tests {
    use multiarch_crd::{ClusterPodPlacementConfigSpec, PlacementSpec};

    use super::*;

    const MODE_PINNED: Pinned = Pinned {
        mode: true,
        scheduler_name: false,
    };

    fn webhook_config() -> WebhookConfig {
        WebhookConfig::new(PlacementMode::Scheduler, "multiarch-scheduler", "multiarch")
    }

    fn gate_mode() -> PlacementConfigs {
        PlacementConfigs {
            cluster: Some(ClusterPodPlacementConfigSpec {
                placement: Some(PlacementSpec {
                    mode: PlacementMode::SchedulingGate,
                    ..PlacementSpec::default()
                }),
                ..ClusterPodPlacementConfigSpec::default()
            }),
            synced: true,
            ..PlacementConfigs::default()
        }
    }

    #[test]
    fn the_mode_follows_the_cluster_config_unless_pinned() {
        let mut config = webhook_config();
        apply(&mut config, &gate_mode(), Pinned::default());
        assert_eq!(config.mode, PlacementMode::SchedulingGate);
        // Deleting the cluster config brings the default mode back.
        apply(&mut config, &PlacementConfigs::default(), Pinned::default());
        assert_eq!(config.mode, PlacementMode::Scheduler);
        apply(&mut config, &gate_mode(), MODE_PINNED);
        assert_eq!(config.mode, PlacementMode::Scheduler);
    }

    #[test]
    fn the_mode_is_known_once_the_configuration_is_read_or_pinned() {
        let mut config = webhook_config();
        let mut unread = gate_mode();
        unread.synced = false;
        apply(&mut config, &unread, Pinned::default());
        assert!(!config.known);
        apply(&mut config, &unread, MODE_PINNED);
        assert!(config.known, "a pinned mode needs no configuration");
        apply(&mut config, &gate_mode(), Pinned::default());
        assert!(config.known);
        assert_eq!(config.mode, PlacementMode::SchedulingGate);
    }

    #[test]
    fn before_the_first_read_the_pins_or_the_defaults_hold_and_an_unpinned_mode_is_unknown() {
        let read = |config: Arc<RwLock<WebhookConfig>>| {
            let config = config.read().unwrap();
            (config.mode, config.scheduler_name.clone(), config.known)
        };
        assert_eq!(
            read(initial(None, None, "multiarch", true)),
            (
                PlacementMode::Scheduler,
                "multiarch-scheduler".into(),
                false
            )
        );
        assert_eq!(
            read(initial(
                Some(PlacementMode::SchedulingGate),
                Some("s"),
                "m",
                true
            )),
            (PlacementMode::SchedulingGate, "s".into(), true)
        );
        assert_eq!(
            read(initial(None, None, "multiarch", false)),
            (PlacementMode::Scheduler, "multiarch-scheduler".into(), true),
            "not followed: the defaults are the configuration"
        );
    }

    #[test]
    fn the_scheduler_name_follows_the_cluster_config_unless_pinned() {
        let renamed = |name: &str| PlacementConfigs {
            cluster: Some(ClusterPodPlacementConfigSpec {
                placement: Some(PlacementSpec {
                    scheduler_name: name.into(),
                    ..PlacementSpec::default()
                }),
                ..ClusterPodPlacementConfigSpec::default()
            }),
            synced: true,
            ..PlacementConfigs::default()
        };
        let mut config = webhook_config();
        apply(&mut config, &renamed("arch-aware"), Pinned::default());
        assert_eq!(config.scheduler_name, "arch-aware");
        // Without a cluster config, the default name again.
        apply(&mut config, &PlacementConfigs::default(), Pinned::default());
        assert_eq!(config.scheduler_name, "multiarch-scheduler");
        let pinned = Pinned {
            mode: false,
            scheduler_name: true,
        };
        apply(&mut config, &renamed("arch-aware"), pinned);
        assert_eq!(config.scheduler_name, "multiarch-scheduler");
    }

    #[test]
    fn architecture_rules_follow_the_pod_placement_configs() {
        let config: multiarch_crd::PodPlacementConfig = serde_json::from_value(serde_json::json!({
            "apiVersion": "multiarch.openshift.io/v1beta1", "kind": "PodPlacementConfig",
            "metadata": {"name": "tiers", "namespace": "shop"},
            "spec": {"plugins": {"celArchitecturePlacement": {"enabled": true,
                "fallbackArchitectures": ["arm64"], "rules": []}}}
        }))
        .unwrap();
        let with = PlacementConfigs::compiled(
            None,
            multiarch_policy::pod_configs::NamespacedConfigs::owned([config]),
            multiarch_policy::architecture_rules::ArchitectureRules::none(),
            true,
        );
        let mut webhook = webhook_config();
        apply(&mut webhook, &with, Pinned::default());
        assert!(webhook.architecture_rules.governs_namespace("shop"));
        apply(
            &mut webhook,
            &PlacementConfigs::default(),
            Pinned::default(),
        );
        assert!(webhook.architecture_rules.is_empty());
    }
}
