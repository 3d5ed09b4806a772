//! The webhook's metrics: `multiarch_webhook_*`, and MTO's names for its dashboards.

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, histogram::Histogram},
    registry::Registry,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReviewResultLabel {
    pub result: &'static str,
}

/// MTO's webhook metric names are kept for its dashboards (gate mode); ours are
/// `multiarch_webhook_*`.
#[derive(Clone, Debug)]
pub struct WebhookMetrics {
    pub reviews: Family<ReviewResultLabel, Counter>,
    /// Routed pods by what admission did about the architecture constraint.
    pub admission_affinity: Family<ReviewResultLabel, Counter>,
    pub seconds: Histogram,
    pub mto_processed: Counter,
    pub mto_gated: Counter,
    pub mto_seconds: Histogram,
}

impl Default for WebhookMetrics {
    fn default() -> Self {
        let buckets = [
            0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9,
            1.0, 2.0, 4.0,
        ];
        WebhookMetrics {
            reviews: Family::default(),
            admission_affinity: Family::default(),
            seconds: Histogram::new(buckets),
            mto_processed: Counter::default(),
            mto_gated: Counter::default(),
            mto_seconds: Histogram::new(buckets),
        }
    }
}

impl WebhookMetrics {
    pub fn register(&self, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("multiarch_webhook");
        sub.register(
            "reviews",
            "Admission reviews by result (routed, gated, exempt, ignored, error)",
            self.reviews.clone(),
        );
        // From the start, at 0: the first failed review is an increase an alert sees.
        for result in ["routed", "gated", "exempt", "ignored", "error"] {
            let _ = self.reviews.get_or_create(&ReviewResultLabel { result });
        }
        sub.register(
            "admission_affinity",
            "Routed pods by whether the architecture constraint was written at admission (set, unsatisfiable, user_pinned) or not (timed_out, failed, busy)",
            self.admission_affinity.clone(),
        );
        sub.register(
            "review_duration_seconds",
            "Time to answer an admission review",
            self.seconds.clone(),
        );
        registry.register(
            "mto_ppo_wh_pods_processed",
            "Pods processed by the webhook (MTO name)",
            self.mto_processed.clone(),
        );
        registry.register(
            "mto_ppo_wh_pods_gated",
            "Pods gated by the webhook (MTO name)",
            self.mto_gated.clone(),
        );
        registry.register(
            "mto_ppo_wh_response_time_seconds",
            "Webhook response time (MTO name)",
            self.mto_seconds.clone(),
        );
    }
}
