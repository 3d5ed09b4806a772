//! `StorageCapacityScoring` (kube-scheduler 1.36, alpha, off unless
//! `spec.placement.storageCapacityScoring` is set): `VolumeBinding` scores a node by how
//! full the storage the pod's unbound `WaitForFirstConsumer` claims would use there
//! becomes. The volumes it would bind when it binds any (requested against the volumes'
//! capacity), else the CSIStorageCapacity each claim would be provisioned from; per
//! storage class through the shape, averaged over the classes. kube-scheduler's
//! `scorer.go`, `BuildBrokenLinearFunction` and `VolumeBinding.Score`.

use multiarch_crd::{StorageCapacityScoring, UtilizationShapePoint};

use super::{VolumeBinding, claims::ClaimsState, find_pod_volumes};
use crate::{
    framework::{CycleContext, CycleState, ScorePlugin, Status},
    model::{
        node::NodeInfo,
        storage::{StorageCapacityInfo, StorageCatalog, VolumeBindingPlan},
    },
};

/// kube-scheduler's `maxUtilization`: utilization is in percent.
const MAX_UTILIZATION: i64 = 100;
/// A shape's scores are 0..=10 (`MaxCustomPriorityScore`); a node score is 0..=100.
const SCORE_SCALE: i64 = 10;
const MAX_SHAPE_SCORE: i64 = 10;

/// The score as a function of utilization: straight lines between the shape's points,
/// flat before the first and after the last.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UtilizationScore {
    /// (utilization, node score), utilization strictly increasing, never empty.
    points: Vec<(i64, i64)>,
}

impl UtilizationScore {
    /// From the CRD's shape: empty means kube-scheduler's default (`{0, 10}`, `{100, 0}`).
    /// The points are sorted by utilization, a repeated utilization keeps its first
    /// point, and values outside the ranges are clamped into them: the CRD's rules
    /// reject all three, and an object that bypassed them (an older CRD) still gets a
    /// function that cannot overflow or divide by zero.
    pub fn new(shape: &[UtilizationShapePoint]) -> Self {
        let mut points: Vec<(i64, i64)> = shape
            .iter()
            .map(|p| {
                (
                    i64::from(p.utilization).clamp(0, MAX_UTILIZATION),
                    i64::from(p.score).clamp(0, MAX_SHAPE_SCORE) * SCORE_SCALE,
                )
            })
            .collect();
        points.sort_by_key(|&(utilization, _)| utilization);
        points.dedup_by_key(|&mut (utilization, _)| utilization);
        if points.is_empty() {
            points = vec![(0, MAX_SHAPE_SCORE * SCORE_SCALE), (MAX_UTILIZATION, 0)];
        }
        UtilizationScore { points }
    }

    /// From `spec.placement.storageCapacityScoring`; `None` when it is unset.
    pub fn configured(scoring: Option<&StorageCapacityScoring>) -> Option<Self> {
        scoring.map(|s| Self::new(&s.shape))
    }

    /// `BuildBrokenLinearFunction`, with Go's integer division (toward zero).
    fn at(&self, utilization: i64) -> i64 {
        let mut previous: Option<(i64, i64)> = None;
        for &(u, score) in &self.points {
            if utilization <= u {
                return match previous {
                    None => score,
                    // `utilization` is above the previous point's: the divisor is positive.
                    Some((pu, ps)) => ps + (score - ps) * (utilization - pu) / (u - pu),
                };
            }
            previous = Some((u, score));
        }
        self.points.last().map_or(0, |&(_, score)| score)
    }

    /// One class: no capacity, or more requested than there is, counts as full.
    fn class(&self, requested: i64, capacity: i64) -> i64 {
        if capacity <= 0 || requested > capacity {
            return self.at(MAX_UTILIZATION);
        }
        // In i128: a request of petabytes times 100 must not overflow.
        let utilization =
            i128::from(requested.max(0)) * i128::from(MAX_UTILIZATION) / i128::from(capacity);
        self.at(i64::try_from(utilization).unwrap_or(MAX_UTILIZATION))
    }

    /// The node's score: every class weighs the same (kube-scheduler's alpha), the mean
    /// rounded half away from zero as Go's `math.Round`; 0 without classes.
    pub(super) fn node(&self, classes: &[ClassStorage<'_>]) -> i64 {
        if classes.is_empty() {
            return 0;
        }
        let sum: i64 = classes
            .iter()
            .map(|c| self.class(c.requested, c.capacity))
            .sum();
        #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
        // Scores are at most 100 per class and classes few: exact in f64.
        let mean = (sum as f64 / classes.len() as f64).round() as i64;
        mean
    }
}

/// What the pod's volumes would take of one storage class on a node (kube-scheduler's
/// `StorageResource` per class).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ClassStorage<'a> {
    pub(super) class: &'a str,
    pub(super) requested: i64,
    pub(super) capacity: i64,
}

fn entry<'a, 'v>(
    classes: &'v mut Vec<ClassStorage<'a>>,
    class: &'a str,
) -> &'v mut ClassStorage<'a> {
    let at = match classes.iter().position(|c| c.class == class) {
        Some(at) => at,
        None => {
            classes.push(ClassStorage {
                class,
                requested: 0,
                capacity: 0,
            });
            classes.len() - 1
        }
    };
    &mut classes[at]
}

/// The CSIStorageCapacity a claim of `class` needing `size` would be provisioned from
/// on `node` (`hasEnoughCapacity`'s pick): kube-scheduler takes the first its lister
/// returns, in no set order; here the first by name, so the same cluster always scores
/// the same.
fn provisioned_from<'a>(
    storage: &'a StorageCatalog,
    class: &str,
    size: i64,
    node: &NodeInfo,
) -> Option<&'a StorageCapacityInfo> {
    storage
        .capacities()
        .filter(|c| c.storage_class == class && c.fits(size) && c.reachable_from(node))
        .min_by(|a, b| a.key.cmp(&b.key))
}

/// The storage per class the pod would use on `node`: the volumes it would bind when
/// there are any, else the capacities it would provision from (claims of drivers that
/// publish no capacity, or without a size, count for nothing).
pub(super) fn class_storage<'a>(
    storage: &'a StorageCatalog,
    claims: &'a ClaimsState,
    node: &NodeInfo,
) -> Vec<ClassStorage<'a>> {
    let mut plan = VolumeBindingPlan::default();
    match find_pod_volumes(storage, claims, node, None, Some(&mut plan)) {
        Ok(conflicts) if conflicts == super::Conflicts::default() => {}
        // Filter rejected the node: it is not scored.
        _ => return Vec::new(),
    }
    let claim = |name: &str| claims.delayed.iter().find(|d| d.claim.name == name);
    let mut classes = Vec::new();
    if !plan.bindings.is_empty() {
        for binding in &plan.bindings {
            let (Some(volume), Some(delayed)) =
                (storage.volume(&binding.volume), claim(&binding.claim.name))
            else {
                continue;
            };
            let class = entry(&mut classes, &volume.storage_class);
            class.requested = class
                .requested
                .saturating_add(delayed.claim.request.unwrap_or(0));
            class.capacity = class.capacity.saturating_add(volume.capacity);
        }
        return classes;
    }
    for provision in &plan.provisions {
        let Some(delayed) = claim(&provision.claim.name) else {
            continue;
        };
        let (true, Some(size)) = (delayed.capacity_tracked, delayed.claim.request) else {
            continue;
        };
        let Some(capacity) = provisioned_from(storage, &delayed.claim.storage_class, size, node)
        else {
            continue;
        };
        let class = entry(&mut classes, &delayed.claim.storage_class);
        // Set, not added: two claims provisioned from one pool see the same capacity.
        class.capacity = capacity.capacity.unwrap_or(0);
        class.requested = class.requested.saturating_add(size);
    }
    classes
}

impl ScorePlugin for VolumeBinding {
    /// Off without the configuration; and a pod without unbound WaitForFirstConsumer
    /// claims scores 0 everywhere, which changes no ranking.
    fn pre_score(&self, _: &CycleContext<'_>, state: &mut CycleState, _: &[&NodeInfo]) -> Status {
        let scored = self.capacity_scoring.is_some()
            && state
                .read::<ClaimsState>()
                .is_some_and(|claims| !claims.delayed.is_empty());
        if scored {
            Status::success()
        } else {
            Status::skip()
        }
    }

    fn score(&self, ctx: &CycleContext<'_>, state: &CycleState, node: &NodeInfo) -> i64 {
        let (Some(scorer), Some(claims)) = (&self.capacity_scoring, state.read::<ClaimsState>())
        else {
            return 0;
        };
        scorer.node(&class_storage(ctx.cluster.storage(), claims, node))
    }
}

#[cfg(test)]
mod tests;
