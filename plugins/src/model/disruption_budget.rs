//! PodDisruptionBudgets as preemption reads them: which pods they protect and how many
//! more disruptions they allow.

use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use super::pod::PodInfo;
use multiarch_policy::selectors::LabelSelector;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DisruptionBudget {
    pub namespace: String,
    pub name: String,
    /// `None`: no selector, which selects nothing.
    pub selector: Option<LabelSelector>,
    /// `status.disruptionsAllowed` (0 until the disruption controller computes it).
    pub disruptions_allowed: i32,
    /// Pods the API server already counted as disrupted (`status.disruptedPods`).
    pub disrupted: Vec<String>,
}

impl DisruptionBudget {
    pub fn from_api(pdb: &PodDisruptionBudget) -> Self {
        let status = pdb.status.as_ref();
        DisruptionBudget {
            namespace: pdb.metadata.namespace.clone().unwrap_or_default(),
            name: pdb.metadata.name.clone().unwrap_or_default(),
            selector: pdb
                .spec
                .as_ref()
                .and_then(|s| s.selector.as_ref())
                .map(LabelSelector::from),
            disruptions_allowed: status.and_then(|s| s.disruptions_allowed).unwrap_or(0),
            disrupted: status
                .and_then(|s| s.disrupted_pods.as_ref())
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default(),
        }
    }

    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Whether the budget covers the pod (a nil or empty selector covers none, as
    /// kube-scheduler's preemption reads it).
    pub fn covers(&self, pod: &PodInfo) -> bool {
        *pod.namespace == *self.namespace
            && !pod.labels.is_empty()
            && self
                .selector
                .as_ref()
                .is_some_and(|s| !s.is_empty() && s.matches(&pod.labels))
    }
}

/// `filterPodsWithPDBViolation`: splits `pods` (most important first) into those whose
/// eviction would exceed a budget and those it would not, spending the budgets in order.
pub fn split_by_violation<'a, T: AsRef<PodInfo>>(
    pods: &'a [T],
    budgets: &[&DisruptionBudget],
) -> (Vec<&'a T>, Vec<&'a T>) {
    let mut allowed: Vec<i32> = budgets.iter().map(|b| b.disruptions_allowed).collect();
    let mut violating = Vec::new();
    let mut not_violating = Vec::new();
    for pod in pods {
        let info = pod.as_ref();
        let mut violated = false;
        for (i, budget) in budgets.iter().enumerate() {
            if !budget.covers(info) || budget.disrupted.contains(&info.name) {
                continue;
            }
            allowed[i] -= 1;
            if allowed[i] < 0 {
                violated = true;
            }
        }
        if violated {
            violating.push(pod);
        } else {
            not_violating.push(pod);
        }
    }
    (violating, not_violating)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::pod::PodBuilder;

    fn budget(allowed: i32) -> DisruptionBudget {
        DisruptionBudget {
            namespace: "ns".into(),
            name: "pdb".into(),
            selector: Some(LabelSelector::from_labels(
                &[("app".to_owned(), "db".to_owned())].into(),
            )),
            disruptions_allowed: allowed,
            disrupted: vec![],
        }
    }

    #[test]
    fn budgets_are_spent_in_order() {
        let pods: Vec<Arc<PodInfo>> = ["a", "b", "c"]
            .iter()
            .map(|n| Arc::new(PodBuilder::new("ns", n).label("app", "db").info()))
            .chain(std::iter::once(Arc::new(
                PodBuilder::new("ns", "web").label("app", "web").info(),
            )))
            .collect();
        let one = budget(1);
        let (violating, fine) = split_by_violation(&pods, &[&one]);
        let names = |v: &[&Arc<PodInfo>]| v.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&violating), ["b", "c"]);
        assert_eq!(names(&fine), ["a", "web"]);
        let mut counted = budget(0);
        counted.disrupted = vec!["a".into()];
        let (violating, _) = split_by_violation(&pods[..1], &[&counted]);
        assert!(
            violating.is_empty(),
            "already disrupted pods are not charged"
        );
    }

    #[test]
    fn empty_selectors_and_other_namespaces_cover_nothing() {
        let pod = PodBuilder::new("ns", "a").label("app", "db").info();
        let mut empty = budget(0);
        empty.selector = Some(LabelSelector::default());
        assert!(!empty.covers(&pod));
        let mut none = budget(0);
        none.selector = None;
        assert!(!none.covers(&pod));
        let elsewhere = PodBuilder::new("other", "a").label("app", "db").info();
        assert!(!budget(0).covers(&elsewhere));
        assert!(budget(0).covers(&pod));
        assert!(!budget(0).covers(&PodBuilder::new("ns", "bare").info()));
    }
}
