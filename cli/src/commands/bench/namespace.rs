//! The run's namespace: created when missing, and then deleted at the end so that the
//! next run can use it, also on an API server without a namespace controller.

use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::{Event, Namespace};
use kube::{
    Api,
    api::{DeleteParams, PostParams},
};
use multiarch_runtime::rate_limit::TokenBucket;

use super::delete_labelled;

/// How long a deleted namespace is left to the namespace controller before the run
/// finalizes it itself.
const NAMESPACE_CONTROLLER_GRACE: Duration = Duration::from_secs(5);

/// Creates namespace `name`; whether this run created it (it existed: false).
pub async fn create(client: &kube::Client, name: &str) -> anyhow::Result<bool> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?;
    match namespaces.create(&PostParams::default(), &namespace).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e).context(format!("cannot create namespace {name}")),
    }
}

/// Deletes the namespace this run created. An API server without kube-controller-manager
/// (as scheduler_perf runs it, and as the docs advise) never finishes a namespace's
/// deletion: the namespace would stay Terminating and the next run could create nothing
/// in it. Everything in it is the run's own: its pods are deleted already, and its
/// events (the bench's and the scheduler's) are deleted here once the namespace is
/// Terminating (so no new one can be created); then, if it is still there after a grace,
/// the run finalizes it as the namespace controller would.
pub async fn delete(
    client: &kube::Client,
    limiter: &TokenBucket,
    name: &str,
) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .delete(name, &DeleteParams::default())
        .await
        .with_context(|| format!("cannot delete namespace {name}"))?;
    let events: Api<Event> = Api::namespaced(client.clone(), name);
    delete_labelled(&events, limiter, "")
        .await
        .with_context(|| format!("cannot delete the events of namespace {name}"))?;
    let grace = Instant::now() + NAMESPACE_CONTROLLER_GRACE;
    loop {
        let Some(mut namespace) = namespaces
            .get_opt(name)
            .await
            .with_context(|| format!("cannot read namespace {name}"))?
        else {
            return Ok(());
        };
        if Instant::now() >= grace {
            if let Some(spec) = namespace.spec.as_mut() {
                spec.finalizers = None;
            }
            return match namespaces
                .replace_subresource("finalize", name, &PostParams::default(), &namespace)
                .await
            {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                Err(e) => Err(e).with_context(|| format!("cannot finalize namespace {name}")),
            };
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
