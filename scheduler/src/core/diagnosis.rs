//! Why a pod did not fit: kube-scheduler's `FitError` message, extended with the image
//! architectures, and honest about preemption.

use std::collections::{BTreeMap, BTreeSet};

/// kube's event note limit; longer messages are cut with " ...".
pub const MAX_MESSAGE_LEN: usize = 1024;

pub const NO_NODES: &str = "no nodes available to schedule pods";
pub const NO_PREEMPTION: &str =
    "preemption: not attempted, multiarch-scheduler does not evict lower-priority pods.";

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diagnosis {
    pub num_nodes: usize,
    /// Nodes per reason.
    pub reasons: BTreeMap<String, usize>,
    /// Set when a PreFilter rejected the pod for every node.
    pub pre_filter_message: Option<String>,
    /// Plugins that rejected the pod, for requeueing on the right events.
    pub rejectors: BTreeSet<&'static str>,
    /// Some node rejected the pod for a reason preemption could remove (resources, ports).
    pub preemption_could_help: bool,
    /// Retry on a timer, not on a cluster event (image inspection failed).
    pub retry_with_backoff: bool,
    /// A plugin failed internally: condition reason `SchedulerError`, error backoff.
    pub error: Option<String>,
}

impl Diagnosis {
    pub fn message(&self) -> String {
        if let Some(error) = &self.error {
            return truncate(error.clone());
        }
        if self.num_nodes == 0 {
            return NO_NODES.to_owned();
        }
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
        if self.preemption_could_help {
            message.push(' ');
            message.push_str(NO_PREEMPTION);
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
            preemption_could_help: true,
            ..Diagnosis::default()
        };
        assert_eq!(
            d.message(),
            "0/5 nodes are available: 2 Insufficient cpu, 3 node(s) didn't match the pod's image \
             architectures (images support amd64, arm64). preemption: not attempted, \
             multiarch-scheduler does not evict lower-priority pods."
        );
    }

    #[test]
    fn pre_filter_rejections_and_empty_clusters() {
        let d = Diagnosis {
            num_nodes: 3,
            pre_filter_message: Some("the pod's images have no architecture in common".into()),
            ..Diagnosis::default()
        };
        assert_eq!(
            d.message(),
            "0/3 nodes are available: the pod's images have no architecture in common."
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
