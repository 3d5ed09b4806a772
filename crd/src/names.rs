//! User-facing names that are contracts: changing one breaks installed clusters.

/// The only accepted name of the `ClusterPodPlacementConfig` singleton.
pub const SINGLETON_NAME: &str = "cluster";

/// The scheduler name pods carry in `spec.schedulerName` when routed to multiarch.
pub const DEFAULT_SCHEDULER_NAME: &str = "multiarch-scheduler";

/// The scheduling gate added in gate mode (MTO's name).
pub const SCHEDULING_GATE: &str = "multiarch.openshift.io/scheduling-gate";

/// Annotation that carries `fallbackArchitecture` through a `v1alpha1` read (MTO's name).
pub const FALLBACK_ARCHITECTURE_ANNOTATION: &str = "multiarch.openshift.io/fallback-architecture";

/// MTO's finalizer on the ClusterPodPlacementConfig: the operands are removed in order
/// before the object goes.
pub const FINALIZER_POD_PLACEMENT: &str = "finalizers.multiarch.openshift.io/pod-placement";
/// MTO's finalizer on the ClusterPodPlacementConfig exactly while any PodPlacementConfig
/// exists (tooling and MTO's e2e read it).
pub const FINALIZER_NO_POD_PLACEMENT_CONFIG: &str =
    "finalizers.multiarch.openshift.io/no-pod-placement-config";

/// kube-scheduler's name: the `spec.schedulerName` of a pod nobody routed.
pub const KUBE_SCHEDULER_NAME: &str = "default-scheduler";

/// Label key of a node's architecture variant (`v7` of `arm`), set by multiarch's users
/// (the kubelet has none).
pub const NODE_VARIANT_LABEL: &str = "multiarch.openshift.io/arch-variant";

/// Label key of a node's CPU architecture, set by the kubelet.
pub const NODE_ARCH_LABEL: &str = "kubernetes.io/arch";

/// Label key of a node's operating system, set by the kubelet.
pub const NODE_OS_LABEL: &str = "kubernetes.io/os";

/// Per-pod opt-out of routing and gating: the pod keeps the default scheduler.
pub const OPT_OUT_LABEL: &str = "multiarch.openshift.io/scheduler";
/// The value of [`OPT_OUT_LABEL`] that opts out.
pub const OPT_OUT_VALUE: &str = "default";

/// MTO's pod labels in gate mode.
pub const LABEL_SCHEDULING_GATE: &str = "multiarch.openshift.io/scheduling-gate";
pub const LABEL_NODE_AFFINITY: &str = "multiarch.openshift.io/node-affinity";
pub const LABEL_PREFERRED_NODE_AFFINITY: &str = "multiarch.openshift.io/preferred-node-affinity";

/// The label the misplaced-pod correction puts on a pod running on a node its own images
/// have no build for (`true`); the operator counts them into the status.
pub const LABEL_MISPLACED: &str = "multiarch.openshift.io/misplaced";

/// The namespace multiarch is installed in by default (`manifests/`).
pub const DEFAULT_NAMESPACE: &str = "multiarch";

/// The operator's Service: it serves the conversion webhook of the
/// ClusterPodPlacementConfig CRD and the validating webhooks.
pub const OPERATOR_SERVICE: &str = "multiarch-operator";

/// Where the operator serves `ConversionReview`s.
pub const CONVERSION_PATH: &str = "/convert";

/// Node label no node carries: requiring it keeps a pod with no common architecture pending
/// (MTO's name).
pub const NO_SUPPORTED_ARCH: &str = "multiarch.openshift.io/no-supported-arch";

/// The annotation that records on a pod which rule decided its architectures:
/// `PodPlacementConfig-<name>/<rule>`, or `PodPlacementConfig-<name>/fallback`.
pub const ANNOTATION_ARCHITECTURE_RULE: &str = "multiarch.openshift.io/architecture-rule";

/// MTO's gate-mode pod label: the images could not be inspected.
pub const LABEL_INSPECT_ERROR: &str = "multiarch.openshift.io/image-inspect-error";

/// MTO's gate-mode pod label: how many times inspection failed.
pub const LABEL_INSPECT_ERROR_COUNT: &str = "multiarch.openshift.io/image-inspect-error-count";

/// MTO's gate-mode pod label: the fallback architecture was used.
pub const LABEL_FALLBACK: &str = "multiarch.openshift.io/fallback-arch";

/// MTO's gate-mode pod annotation: why inspection failed.
pub const ANNOTATION_INSPECT_ERROR: &str = "multiarch.openshift.io/image-inspect-error";

/// Pod annotation naming where each preferred architecture came from (MTO's name).
pub const ANNOTATION_SOURCES: &str = "multiarch.openshift.io/preferred-affinity-sources";

/// The label the ENoExec handler puts on a pod whose container failed with
/// `exec format error`: users (and alerts) select on it.
pub const EXEC_FORMAT_ERROR_LABEL: &str = "multiarch.openshift.io/exec-format-error";

/// Label on every `ENoExecEvent` the daemon writes: the node it came from.
pub const LABEL_ENOEXEC_NODE: &str = "multiarch.openshift.io/node";

/// Annotation on a recreated pod: the UID of the pod it replaces.
pub const RECREATED_FROM: &str = "multiarch.openshift.io/recreated-from";

/// The Deployment's annotation listing the names the scheduler placed before a rename
/// (most recent first): pods may still wait under them, and are recreated once the
/// renamed scheduler runs.
pub const PREVIOUS_SCHEDULER_NAMES: &str = "multiarch.openshift.io/previous-scheduler-names";

/// The condition the scheduler writes on its own pod: whether it reaches the image
/// inspector (`True`), or why not (`False`, reason `InspectorUnreachable` or
/// `InspectorNotReached`). The operator reads it into the ClusterPodPlacementConfig.
pub const CONDITION_INSPECTOR_REACHABLE: &str = "multiarch.openshift.io/inspector-reachable";
pub const REASON_INSPECTOR_REACHABLE: &str = "InspectorReachable";
pub const REASON_INSPECTOR_UNREACHABLE: &str = "InspectorUnreachable";
/// Not reached since the scheduler started (fewer failed probes than make an outage).
pub const REASON_INSPECTOR_NOT_REACHED: &str = "InspectorNotReached";
