//! `ENoExecEvent`: a node reports that a container failed with `exec format error`.
//!
//! Created by `multiarch enoexec-daemon` in multiarch's namespace and consumed (then
//! deleted) by `multiarch enoexec-handler`, which reports the error on the pod.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Internal: one `exec format error` seen on a node. Users read the result as a Warning
/// event `ExecFormatError` on the pod.
// `printcolumn(type_ = ..)` repeated per column is kube-derive's syntax, not a mistake.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "multiarch.openshift.io",
    version = "v1beta1",
    kind = "ENoExecEvent",
    plural = "enoexecevents",
    singular = "enoexecevent",
    shortname = "enoexec",
    category = "multiarch",
    namespaced,
    status = "ENoExecEventStatus",
    derive = "PartialEq",
    doc = "ENoExecEvent records one exec format error seen on a node (internal to multiarch).",
    printcolumn(name = "NodeName", type_ = "string", json_path = ".status.nodeName"),
    printcolumn(name = "PodName", type_ = "string", json_path = ".status.podName"),
    printcolumn(
        name = "PodNamespace",
        type_ = "string",
        json_path = ".status.podNamespace"
    ),
    printcolumn(
        name = "ContainerID",
        type_ = "string",
        json_path = ".status.containerID"
    )
)]
pub struct ENoExecEventSpec {}

/// Where the error happened.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ENoExecEventStatus {
    /// The node the error happened on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub node_name: Option<String>,

    /// The pod whose container failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub pod_name: Option<String>,

    /// The namespace of that pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub pod_namespace: Option<String>,

    /// The runtime's container ID, `<runtime>://<64 hex digits>`.
    #[serde(
        rename = "containerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(regex(pattern = r"^.+://[a-f0-9]{64}$"))]
    pub container_id: Option<String>,

    /// The file the container tried to execute, as passed to exec (multiarch addition;
    /// MTO's daemon does not set it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub executable: Option<String>,

    /// Set instead when the container's program did not fail to exec but was refused by
    /// glibc's loader, which exits with status 127 (multiarch addition): the line the
    /// loader printed, as the container's log has it (`CPU ISA level is lower than
    /// required`, `Fatal glibc error: CPU does not support x86-64-v3`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub loader_error: Option<String>,
}
