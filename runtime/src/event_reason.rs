//! Every reason multiarch's events carry, in one table: the components publish only
//! these (`EventRecorder::publish` takes an [`EventReason`]), each reason has one
//! severity, and `docs/reference/events.md` is generated from the table (a test fails on
//! drift). Reasons kube-scheduler and MTO also use keep their spelling and meaning, so
//! tools that watch for them go on working.

/// Normal or Warning: what `kubectl get events --field-selector type=Warning` selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Normal,
    Warning,
}

impl Severity {
    /// The event's `type`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Normal => "Normal",
            Severity::Warning => "Warning",
        }
    }
}

/// Which component publishes a reason (its events' `reportingController`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Publisher {
    /// multiarch-scheduler (its `schedulerName`).
    Scheduler,
    /// The gate controller (`multiarch-gate-controller`), in gate mode.
    GateController,
    /// The node daemon's exec-format-error handler (`multiarch-enoexec-handler`).
    NodeDaemon,
    /// The operator (`multiarch-operator`).
    Operator,
}

impl Publisher {
    fn describe(self) -> &'static str {
        match self {
            Publisher::Scheduler => "multiarch-scheduler",
            Publisher::GateController => "gate controller",
            Publisher::NodeDaemon => "node daemon",
            Publisher::Operator => "operator",
        }
    }
}

/// Where a reason's spelling comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// kube-scheduler publishes it, with the same meaning.
    KubeScheduler,
    /// The Multiarch Tuning Operator publishes it, with the same meaning.
    Mto,
    /// multiarch's own.
    Multiarch,
}

/// The table: each reason's severity, publishers, the kind it is about, its origin and
/// meaning; its name is the variant's. Gives the enum, `EventReason::ALL` (every reason,
/// in the table's order) and `EventReason::facts`.
macro_rules! event_reasons {
    ($($reason:ident: $severity:ident, [$($publisher:ident),*], $regarding:expr, $origin:ident, $meaning:literal;)*) => {
        /// Every event reason multiarch publishes.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum EventReason {
            $($reason,)*
        }

        impl EventReason {
            pub const ALL: [EventReason; [$(stringify!($reason)),*].len()] = [$(EventReason::$reason,)*];

            /// The reason's row of the table.
            pub fn facts(self) -> ReasonFacts {
                match self {
                    $(EventReason::$reason => ReasonFacts {
                        name: stringify!($reason),
                        severity: Severity::$severity,
                        publishers: &[$(Publisher::$publisher),*],
                        regarding: $regarding,
                        origin: Origin::$origin,
                        meaning: $meaning,
                    },)*
                }
            }
        }
    };
}

const POD: &str = "Pod";
const CONFIG: &str = "ClusterPodPlacementConfig";

event_reasons! {
    Scheduled: Normal, [Scheduler], POD, KubeScheduler,
        "The pod was bound to a node: `Successfully assigned NAMESPACE/POD to NODE`.";
    FailedScheduling: Warning, [Scheduler], POD, KubeScheduler,
        "No node fits the pod now; the note counts the nodes by why they do not (kube-scheduler's wording, plus `node(s) didn't match the pod's image architectures (images support ARCHS)`). The pod is retried when the cluster changes; its `PodScheduled` condition says the same. See [my pod is Pending](../operations.md#my-pod-is-pending).";
    Preempted: Normal, [Scheduler], POD, KubeScheduler,
        "This pod was evicted to make room for a pod of higher priority: `Preempted by pod UID on node NODE`.";
    UnreadableResourceRequest: Warning, [Scheduler], POD, Multiarch,
        "A pod bound to a node has a resource request the scheduler cannot read; it counts the node as full while the pod is there. Fix or delete the pod.";
    ArchitectureRuleOverridesImages: Warning, [Scheduler, GateController], POD, Multiarch,
        "A namespace's architecture rule (`celArchitecturePlacement`) chose architectures the pod's images do not all have; the rule wins. See [architecture rules](../architecture-rules.md).";
    ArchAwareSchedGateAdded: Normal, [GateController], POD, Mto,
        "Gate mode: the pod was admitted with the `multiarch.openshift.io/scheduling-gate` scheduling gate.";
    ArchAwareSchedGateRemovalSuccess: Normal, [GateController], POD, Mto,
        "Gate mode: the gate was removed (with the architecture constraint the other events of the pod name); the default scheduler places it now.";
    ArchAwareSchedGateRemovalFailed: Warning, [GateController], POD, Mto,
        "Gate mode: the API server refused the write that removes the gate; the pod stays gated and the write is retried with backoff. The note has the API server's answer.";
    ArchAwareGatedPodIgnored: Warning, [GateController], POD, Mto,
        "Gate mode: the gated pod changed so that it is no longer placed by architecture (for example, it now has a `kubernetes.io/arch` constraint); the gate is removed without adding one.";
    ArchAwarePredicatesConflict: Normal, [GateController], POD, Mto,
        "Gate mode: every term of the pod's required node affinity already names architectures; nothing was added.";
    ArchAwarePredicateSet: Normal, [GateController], POD, Mto,
        "Gate mode: the architectures the pod's images have were written into its required node affinity (or a preferred affinity from the configuration was).";
    ArchAwarePreferredAffinityDuplicates: Normal, [GateController], POD, Mto,
        "Gate mode: the configuration's architecture preferences were already in the pod's preferred affinity; none was added.";
    NoSupportedArchitecturesFound: Normal, [GateController], POD, Mto,
        "Gate mode: the pod's images have no architecture in common; the pod cannot run anywhere and stays Pending. Rebuild an image, or use images that share an architecture.";
    ArchAwareOperatorBundle: Normal, [GateController], POD, Multiarch,
        "Gate mode: the pod's images are operator bundles (manifests, never executed), which run on every architecture; no constraint was set. See [audit](../audit.md).";
    ArchAwareInspectionError: Warning, [GateController], POD, Mto,
        "Gate mode: the images' architectures could not be read (the note has the registry's error); retried with backoff, then the fallback architecture or none. See [image inspection](../image-inspection.md).";
    ArchAwareFallbackPredicateSet: Warning, [GateController], POD, Mto,
        "Gate mode: after the last failed inspection, the configuration's `fallbackArchitecture` was written into the pod's node affinity.";
    ArchAwareConfigurationUnreadable: Warning, [GateController], POD, Multiarch,
        "Gate mode: the placement configuration could not be read; the gate stays until it is read (the note counts the attempts).";
    ArchAwarePlacedWithoutConfiguration: Warning, [GateController], POD, Multiarch,
        "Gate mode: the placement configuration stayed unreadable for every attempt; the pod was placed by its images' architectures alone, without preferences or fallback.";
    ExecFormatError: Warning, [NodeDaemon], POD, Multiarch,
        "A container's binary is built for another architecture than its node's: it failed with `exec format error`. The note names container, image, node architecture and file. See [exec format errors](../exec-format-errors.md).";
    CPULevelTooLow: Warning, [NodeDaemon], POD, Multiarch,
        "glibc's loader refused to start a container's program on its node (exit status 127): the program needs an x86-64 level the node's CPU lacks. The note names container, image, the loader's words, the node's level and the level the image needs. See [exec format errors](../exec-format-errors.md).";
    MisplacedPodEvicted: Normal, [NodeDaemon], "Pod, and its controller", Multiarch,
        "Misplaced-pod correction: the pod runs on a node its images have no build for; it was evicted so that its controller creates one that is placed by architecture.";
    MisplacedPodNotCorrected: Warning, [NodeDaemon], "Pod, and its controller", Multiarch,
        "Misplaced-pod correction: the pod is misplaced but was not moved; the note says why (no controller to recreate it, a DaemonSet's or a Job's without retries, its own affinity pins it, no node its images run on, the eviction limit, a disruption budget, a dry run).";
    RoutingToScheduler: Normal, [Operator], CONFIG, Multiarch,
        "Scheduler mode is serving: new pods in the selected namespaces go to multiarch-scheduler.";
    RoutingToGate: Normal, [Operator], CONFIG, Multiarch,
        "Gate mode is serving: new pods in the selected namespaces are gated and given an architecture affinity.";
    RoutingOff: Warning, [Operator], CONFIG, Multiarch,
        "The mode's components are not available, so the webhook configuration was removed and new pods are admitted unchanged; the `Degraded` condition says why. See [failure behaviour](../failure-behaviour.md).";
    ArchAwareSchedGateRemovedByOperator: Warning, [Operator], POD, Multiarch,
        "A mode switch or uninstall released the pod: the gate was removed without an architecture constraint, so the default scheduler places it.";
    RecreatedForDefaultScheduler: Warning, [Operator], POD, Multiarch,
        "A mode switch or uninstall released a pod waiting for multiarch-scheduler: it was deleted for its controller to recreate, or recreated from the journal, for the default scheduler.";
    CannotRecreateForDefaultScheduler: Warning, [Operator], POD, Multiarch,
        "A pod waiting for multiarch-scheduler was left as it is: the API server would refuse to create it again (the note has its answer), so it is not deleted. Recreate it yourself once creation is allowed.";
    PodNotRecreated: Warning, [Operator], CONFIG, Multiarch,
        "A pod deleted to be recreated for the default scheduler could not be created again yet; its copy stays in the journal ConfigMap the note names and is retried. See [install](../install.md).";
}

/// One row of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReasonFacts {
    pub name: &'static str,
    pub severity: Severity,
    pub publishers: &'static [Publisher],
    /// The kind of object the event is about (`regarding`).
    pub regarding: &'static str,
    pub origin: Origin,
    /// When it is published, and what to do about it.
    pub meaning: &'static str,
}

impl EventReason {
    /// The event's `reason`.
    pub fn as_str(self) -> &'static str {
        self.facts().name
    }

    pub fn severity(self) -> Severity {
        self.facts().severity
    }
}

/// `docs/reference/events.md`: every reason, who publishes it and what it means.
pub fn reference() -> String {
    let mut out = String::from(
        "<!-- Generated from runtime/src/event_reason.rs; regenerate with \
         `MULTIARCH_BLESS=1 cargo test -p multiarch-runtime --test events_reference`. -->\n\
         # Event reasons\n\n\
         Every reason multiarch's components publish (events.k8s.io/v1, shown by `kubectl \
         describe` and `kubectl get events`). A repeat of the same event within six minutes \
         folds into a series (`x3 over 2m`); a changed note is a new event. Reasons marked \
         kube-scheduler or MTO keep those tools' spelling and meaning.\n\n\
         Select the warnings of one reason with `kubectl get events -A --field-selector \
         reason=ExecFormatError,type=Warning`.\n\n\
         | Reason | Type | Published by | About | Origin | Meaning |\n\
         |---|---|---|---|---|---|\n",
    );
    for reason in EventReason::ALL {
        let facts = reason.facts();
        let publishers = facts
            .publishers
            .iter()
            .map(|p| p.describe())
            .collect::<Vec<_>>()
            .join(", ");
        let origin = match facts.origin {
            Origin::KubeScheduler => "kube-scheduler",
            Origin::Mto => "MTO",
            Origin::Multiarch => "multiarch",
        };
        out.push_str(&format!(
            "| `{}` | {} | {publishers} | {} | {origin} | {} |\n",
            facts.name,
            facts.severity.as_str(),
            facts.regarding,
            facts.meaning
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn every_reason_is_listed_once_with_a_name_of_its_own() {
        let names: HashSet<_> = EventReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(names.len(), EventReason::ALL.len());
        for reason in EventReason::ALL {
            // The variant's name is the reason: a renamed variant cannot drift from it.
            assert_eq!(format!("{reason:?}"), reason.as_str());
            assert!(!reason.facts().meaning.is_empty(), "{reason:?}");
        }
    }
}
