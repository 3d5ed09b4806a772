//! Why a pod did not fit: kube-scheduler's `FitError` message (with the image
//! architectures among the reasons) and what its PostFilter plugins appended.

use std::collections::{BTreeMap, BTreeSet};

/// kube's event note limit; longer messages are cut with " ...".
pub const MAX_MESSAGE_LEN: usize = 1024;

pub const NO_NODES: &str = "no nodes available to schedule pods";

/// What kube-scheduler 1.36 appends after a PreFilter rejection: its DynamicResources
/// PostFilter runs first and fails to read the state its own PreFilter never wrote
/// (recorded on a real API server: "…PersistentVolumeClaims. not found").
pub const AFTER_PRE_FILTER_REJECTION: &str = "not found";

/// What kube-scheduler 1.36's DynamicResources PostFilter says for a pod without resource
/// claims, before DefaultPreemption speaks.
pub const NO_CLAIMS_TO_DEALLOCATE: &str = "no new claims to deallocate";

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diagnosis {
    pub num_nodes: usize,
    /// Nodes per reason.
    pub reasons: BTreeMap<String, usize>,
    /// Set when a PreFilter rejected the pod for every node.
    pub pre_filter_message: Option<String>,
    /// Plugins that rejected the pod, for requeueing on the right events.
    pub rejectors: BTreeSet<&'static str>,
    /// Nodes (indexes) that rejected the pod for a reason removing pods could fix
    /// (`Unschedulable`, not `UnschedulableAndUnresolvable`): preemption's candidates.
    pub preemption_candidates: Vec<usize>,
    /// What PostFilter (preemption) said; `None` when it made room.
    pub post_filter_message: Option<String>,
    /// Retry on a timer, not on a cluster event (image inspection failed).
    pub retry_with_backoff: bool,
    /// A plugin failed internally: condition reason `SchedulerError`, error backoff.
    pub error: Option<String>,
}

impl Diagnosis {
    /// `0/N nodes are available: …` as kube-scheduler's `FitError.Error()` writes it:
    /// counts per reason sorted as strings, then PostFilter's message.
    pub fn fit_message(&self) -> String {
        let mut message = format!("0/{} nodes are available: ", self.num_nodes);
        match &self.pre_filter_message {
            Some(pre) => message.push_str(pre),
            None => {
                let mut parts: Vec<String> = self
                    .reasons
                    .iter()
                    .map(|(reason, count)| format!("{count} {reason}"))
                    .collect();
                parts.sort();
                message.push_str(&parts.join(", "));
            }
        }
        message.push('.');
        message
    }

    pub fn message(&self) -> String {
        if let Some(error) = &self.error {
            return truncate(error.clone());
        }
        if self.num_nodes == 0 {
            return NO_NODES.to_owned();
        }
        let mut message = self.fit_message();
        let post = if self.pre_filter_message.is_some() {
            Some(AFTER_PRE_FILTER_REJECTION)
        } else {
            self.post_filter_message.as_deref()
        };
        if let Some(post) = post {
            message.push(' ');
            message.push_str(post);
        }
        truncate(message)
    }
}

fn truncate(mut message: String) -> String {
    if message.len() <= MAX_MESSAGE_LEN {
        return message;
    }
    let mut cut = MAX_MESSAGE_LEN - 4;
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    message.truncate(cut);
    message.push_str(" ...");
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_sorted_as_strings_like_kube_scheduler() {
        let d = Diagnosis {
            num_nodes: 5,
            reasons: [
                ("node(s) didn't match the pod's image architectures (images support amd64, arm64)".to_owned(), 3),
                ("Insufficient cpu".to_owned(), 2),
            ]
            .into(),
            post_filter_message: Some(format!(
                "{NO_CLAIMS_TO_DEALLOCATE}, preemption: 0/5 nodes are available: 2 No preemption victims found for incoming pod, 3 Preemption is not helpful for scheduling."
            )),
            ..Diagnosis::default()
        };
        assert_eq!(
            d.message(),
            "0/5 nodes are available: 2 Insufficient cpu, 3 node(s) didn't match the pod's image \
             architectures (images support amd64, arm64). no new claims to deallocate, preemption: \
             0/5 nodes are available: 2 No preemption victims found for incoming pod, 3 Preemption \
             is not helpful for scheduling."
        );
    }

    /// Recorded: "0/4 nodes are available: 2 Insufficient cpu, 2 node(s) didn't match
    /// Pod's node affinity/selector." when preemption made room.
    #[test]
    fn no_suffix_when_preemption_made_room() {
        let d = Diagnosis {
            num_nodes: 4,
            reasons: [
                ("Insufficient cpu".to_owned(), 2),
                (
                    "node(s) didn't match Pod's node affinity/selector".to_owned(),
                    2,
                ),
            ]
            .into(),
            ..Diagnosis::default()
        };
        assert_eq!(
            d.message(),
            "0/4 nodes are available: 2 Insufficient cpu, 2 node(s) didn't match Pod's node \
             affinity/selector."
        );
    }

    /// Recorded: "0/4 nodes are available: pod has unbound immediate
    /// PersistentVolumeClaims. not found".
    #[test]
    fn pre_filter_rejections_and_empty_clusters() {
        let d = Diagnosis {
            num_nodes: 4,
            pre_filter_message: Some("pod has unbound immediate PersistentVolumeClaims".into()),
            ..Diagnosis::default()
        };
        assert_eq!(
            d.message(),
            "0/4 nodes are available: pod has unbound immediate PersistentVolumeClaims. not found"
        );
        assert_eq!(Diagnosis::default().message(), NO_NODES);
    }

    #[test]
    fn long_messages_are_cut_at_1024_characters() {
        let d = Diagnosis {
            num_nodes: 1,
            pre_filter_message: Some("é".repeat(2000)),
            ..Diagnosis::default()
        };
        let message = d.message();
        assert!(message.len() <= MAX_MESSAGE_LEN);
        assert!(message.ends_with(" ..."));
    }
}
