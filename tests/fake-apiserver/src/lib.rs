//! A stateful in-memory Kubernetes API server on a loopback port, for tests of the
//! Kubernetes-facing runtime. It speaks the payloads recorded from a real 1.36 API server
//! (`shared/reference/apiserver/`): lists with `resourceVersion`, newline-delimited watch
//! streams (synthetic ADDED for watches without a version, field-selector transitions as
//! ADDED/DELETED, `410 Gone` as an ERROR event after compaction), `pods/binding` with the
//! UID precondition and the real 409/404 bodies, status subresources, merge and strategic
//! patches (conditions merged by type), JSON patches, server-side apply with field
//! managers and conflicts (`managed_fields`), optimistic concurrency on
//! `resourceVersion`, `metadata.generation`, finalizers and owner references
//! (`lifecycle`), webhook configurations and validating admission policies
//! (`admissionregistration`), events and leases.
//!
//! CustomResourceDefinitions are checked as the real server checks them before creating
//! them (`apiextensions`), multiarch's own are installed from the start, and custom
//! resources written through the API are pruned, defaulted and validated against their CRD.
//!
//! Test hooks: direct object writes (as kubelets and users, without admission), request
//! log, compaction, broken watch connections, injected binding, update and patch
//! failures, and faults on any request (`faults`: a status, a delay, a hang).
#![allow(clippy::unwrap_used, clippy::missing_panics_doc)] // test infrastructure

mod admissionregistration;
pub mod apiextensions;
mod discovery;
mod eviction;
mod faults;
mod lifecycle;
pub mod managed_fields;
mod quota;
mod writes;

pub use axum::http::Method;
pub use faults::{Effect, Fault};

use std::{
    collections::{BTreeMap, VecDeque},
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Router,
    body::{Body, Bytes},
    extract::{Query, State},
    http::{HeaderMap, StatusCode, Uri},
    response::{IntoResponse, Response},
};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::broadcast;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    resource: String,
    namespace: String,
    name: String,
}

#[derive(Clone, Debug)]
struct Change {
    rv: u64,
    resource: String,
    namespace: String,
    old: Option<Value>,
    new: Option<Value>,
}

#[derive(Clone, Debug)]
enum Message {
    Change(Change),
    /// Ends every open watch (a dropped connection).
    Break,
}

#[derive(Default)]
struct Store {
    rv: u64,
    uid: u64,
    objects: BTreeMap<Key, Value>,
    history: Vec<Change>,
    compacted: u64,
    binding_failures: VecDeque<u16>,
    update_failures: VecDeque<u16>,
    patch_failures: VecDeque<u16>,
    requests: Vec<String>,
    /// The same, with the query (`?watch=true&resourceVersion=...`).
    requests_with_query: Vec<String>,
    /// `apiserver_request_total` by its labels (verb, group, version, resource,
    /// subresource, scope, code).
    request_totals: BTreeMap<[String; 7], u64>,
    /// Installed CRDs by `group/plural`: custom resources are admitted against them.
    crds: BTreeMap<String, Value>,
    /// Every write, in the order it was stored, with who sent it.
    commits: Vec<Commit>,
}

/// A write as stored: its resourceVersion, the object, and the `User-Agent` of the
/// request that made it (`None`: the test's own `apply`/`delete`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Commit {
    pub resource_version: u64,
    pub resource: String,
    pub namespace: String,
    pub name: String,
    pub writer: Option<String>,
}

tokio::task_local! {
    /// The `User-Agent` of the request being handled, for [`Commit::writer`].
    static WRITER: Option<String>;
}

struct Shared {
    store: Mutex<Store>,
    /// While set, new watch requests wait (a network partition).
    hold_watches: std::sync::atomic::AtomicBool,
    changes: broadcast::Sender<Message>,
    faults: faults::Faults,
}

/// A running fake API server; stopped when dropped.
pub struct FakeApiServer {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The time stamps a real server writes: RFC 3339, whole seconds, UTC.
fn now() -> String {
    jiff::Timestamp::from_second(jiff::Timestamp::now().as_second())
        .map(|t| t.to_string())
        .unwrap_or_default()
}

fn kind_of(resource: &str) -> &'static str {
    match resource.rsplit('/').next().unwrap_or(resource) {
        "pods" => "Pod",
        "nodes" => "Node",
        "namespaces" => "Namespace",
        "secrets" => "Secret",
        "configmaps" => "ConfigMap",
        "serviceaccounts" => "ServiceAccount",
        "events" => "Event",
        "leases" => "Lease",
        "persistentvolumes" => "PersistentVolume",
        "persistentvolumeclaims" => "PersistentVolumeClaim",
        "storageclasses" => "StorageClass",
        "csinodes" => "CSINode",
        "csidrivers" => "CSIDriver",
        "csistoragecapacities" => "CSIStorageCapacity",
        "volumeattachments" => "VolumeAttachment",
        "poddisruptionbudgets" => "PodDisruptionBudget",
        "priorityclasses" => "PriorityClass",
        "clusterpodplacementconfigs" => "ClusterPodPlacementConfig",
        "podplacementconfigs" => "PodPlacementConfig",
        "enoexecevents" => "ENoExecEvent",
        "customresourcedefinitions" => "CustomResourceDefinition",
        "deployments" => "Deployment",
        "statefulsets" => "StatefulSet",
        "daemonsets" => "DaemonSet",
        "replicasets" => "ReplicaSet",
        "replicationcontrollers" => "ReplicationController",
        "jobs" => "Job",
        "cronjobs" => "CronJob",
        "services" => "Service",
        "clusterroles" => "ClusterRole",
        "clusterrolebindings" => "ClusterRoleBinding",
        "roles" => "Role",
        "rolebindings" => "RoleBinding",
        "networkpolicies" => "NetworkPolicy",
        "mutatingwebhookconfigurations" => "MutatingWebhookConfiguration",
        "validatingwebhookconfigurations" => "ValidatingWebhookConfiguration",
        "validatingadmissionpolicies" => "ValidatingAdmissionPolicy",
        "validatingadmissionpolicybindings" => "ValidatingAdmissionPolicyBinding",
        "servicemonitors" => "ServiceMonitor",
        "deviceclasses" => "DeviceClass",
        _ => "Unknown",
    }
}

fn api_version_of(resource: &str) -> String {
    match resource.split_once('/') {
        Some((group, _)) => format!("{group}/{}", group_version(group)),
        None => "v1".into(),
    }
}

fn group_version(group: &str) -> &'static str {
    match group {
        "multiarch.openshift.io" => "v1beta1",
        _ => "v1",
    }
}

fn status(code: u16, reason: &str, message: &str, name: &str, kind: &str) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": if code < 300 { "Success" } else { "Failure" },
        "message": message, "reason": reason,
        "details": {"name": name, "kind": kind}, "code": code,
    });
    json_response(code, &body)
}

fn json_response(code: u16, body: &Value) -> Response {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(body).unwrap()))
        .unwrap()
}

/// JSON merge patch (RFC 7386), with strategic-merge behaviour for `conditions` lists
/// (merged by `type`) when `strategic`.
fn merge(target: &mut Value, patch: &Value, strategic: bool) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else if strategic && k == "conditions" && v.is_array() {
                    let existing = t.entry(k.clone()).or_insert_with(|| json!([]));
                    if !existing.is_array() {
                        *existing = json!([]);
                    }
                    for c in v.as_array().unwrap() {
                        let list = existing.as_array_mut().unwrap();
                        match list.iter_mut().find(|e| e["type"] == c["type"]) {
                            Some(e) => merge(e, c, true),
                            None => list.push(c.clone()),
                        }
                    }
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v, strategic);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

fn lookup<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(object, |v, part| v.get(part))
}

fn field_matches(object: &Value, selector: &str) -> bool {
    selector.split(',').filter(|s| !s.is_empty()).all(|term| {
        let (path, negate, value) = match term.split_once("!=") {
            Some((p, v)) => (p, true, v),
            None => match term.split_once("==").or_else(|| term.split_once('=')) {
                Some((p, v)) => (p, false, v),
                None => return true,
            },
        };
        let actual = match path {
            // An Event's `source`, as the real server selects it: its source.component,
            // or its reportingComponent (events.k8s.io's reportingController).
            "source" if object["kind"] == "Event" => object["source"]["component"]
                .as_str()
                .filter(|c| !c.is_empty())
                .or_else(|| object["reportingComponent"].as_str())
                .unwrap_or(""),
            _ => lookup(object, path).and_then(Value::as_str).unwrap_or(""),
        };
        (actual == value) != negate
    })
}

fn label_matches(object: &Value, selector: &str) -> bool {
    let labels = object["metadata"]["labels"].as_object();
    let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    selector.split(',').filter(|s| !s.is_empty()).all(|term| {
        if let Some((k, v)) = term.split_once("!=") {
            get(k) != Some(v)
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            get(k) == Some(v)
        } else if let Some(k) = term.strip_prefix('!') {
            get(k).is_none()
        } else {
            get(term).is_some()
        }
    })
}

struct Target {
    resource: String,
    namespace: String,
    name: Option<String>,
    subresource: Option<String>,
}

fn parse_path(path: &str) -> Option<Target> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return None,
    };
    let qualify = |r: &str| {
        if group.is_empty() {
            r.to_owned()
        } else {
            format!("{group}/{r}")
        }
    };
    let target = match rest {
        ["namespaces", ns] => Target {
            resource: "namespaces".into(),
            namespace: String::new(),
            name: Some((*ns).into()),
            subresource: None,
        },
        ["namespaces", ns, resource, tail @ ..] => Target {
            resource: qualify(resource),
            namespace: (*ns).into(),
            name: tail.first().map(|s| (*s).to_owned()),
            subresource: tail.get(1).map(|s| (*s).to_owned()),
        },
        [resource, tail @ ..] => Target {
            resource: qualify(resource),
            namespace: String::new(),
            name: tail.first().map(|s| (*s).to_owned()),
            subresource: tail.get(1).map(|s| (*s).to_owned()),
        },
        [] => return None,
    };
    Some(target)
}

impl Store {
    /// The objects of `resource` as they were at resourceVersion `rv` (not before the
    /// compaction): today's, with the changes made since undone.
    fn objects_at(&self, resource: &str, rv: u64) -> BTreeMap<Key, Value> {
        let mut objects: BTreeMap<Key, Value> = self
            .objects
            .range(
                Key {
                    resource: resource.to_owned(),
                    namespace: String::new(),
                    name: String::new(),
                }..,
            )
            .take_while(|(k, _)| k.resource == resource)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for change in self.history.iter().rev().take_while(|c| c.rv > rv) {
            if change.resource != resource {
                continue;
            }
            let Some(name) = change
                .new
                .as_ref()
                .or(change.old.as_ref())
                .and_then(|o| o["metadata"]["name"].as_str())
            else {
                continue;
            };
            let key = Key {
                resource: resource.to_owned(),
                namespace: change.namespace.clone(),
                name: name.to_owned(),
            };
            match &change.old {
                Some(old) => objects.insert(key, old.clone()),
                None => objects.remove(&key),
            };
        }
        objects
    }

    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn write(
        &mut self,
        key: Key,
        new: Option<Value>,
        changes: &broadcast::Sender<Message>,
    ) -> Option<Value> {
        let rv = self.next_rv();
        let new = new.map(|mut v| {
            v["metadata"]["resourceVersion"] = json!(rv.to_string());
            v
        });
        let old = match &new {
            Some(v) => self.objects.insert(key.clone(), v.clone()),
            None => self.objects.remove(&key),
        };
        let change = Change {
            rv,
            resource: key.resource.clone(),
            namespace: key.namespace.clone(),
            old: old.clone(),
            new: new.clone(),
        };
        self.commits.push(Commit {
            resource_version: rv,
            resource: key.resource.clone(),
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            writer: WRITER.try_with(Clone::clone).ok().flatten(),
        });
        self.history.push(change.clone());
        let _ = changes.send(Message::Change(change));
        new.or(old)
    }

    /// Deletes the object, then what it owned (the garbage collector, at once): a
    /// dependent whose last owner is gone is deleted, or marked when it has finalizers.
    fn remove(&mut self, key: Key, changes: &broadcast::Sender<Message>) -> Option<Value> {
        let removed = self.write(key, None, changes)?;
        let mut gone: Vec<String> = removed["metadata"]["uid"]
            .as_str()
            .map(|u| vec![u.to_owned()])
            .unwrap_or_default();
        while let Some(uid) = gone.pop() {
            let dependents: Vec<(Key, Value, bool)> = self
                .objects
                .iter()
                .filter_map(|(k, v)| {
                    lifecycle::without_owner(v, &uid).map(|(u, left)| (k.clone(), u, left))
                })
                .collect();
            for (key, mut updated, owners_left) in dependents {
                if owners_left {
                    self.write(key, Some(updated), changes);
                } else if lifecycle::has_finalizers(&updated) {
                    lifecycle::mark_deleted(&mut updated, &now());
                    self.write(key, Some(updated), changes);
                } else if let Some(dependent) = self.write(key, None, changes)
                    && let Some(uid) = dependent["metadata"]["uid"].as_str()
                {
                    gone.push(uid.to_owned());
                }
            }
        }
        Some(removed)
    }
}

impl admissionregistration::Lookup for Store {
    fn find(&self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        self.objects
            .get(&Key {
                resource: resource.into(),
                namespace: namespace.into(),
                name: name.into(),
            })
            .cloned()
    }

    fn all(&self, resource: &str) -> Vec<Value> {
        self.objects
            .iter()
            .filter(|(k, _)| k.resource == resource)
            .map(|(_, v)| v.clone())
            .collect()
    }

    fn resource_of(&self, api_version: &str, kind: &str) -> Option<(String, bool)> {
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        if let Some(crd) = self
            .crds
            .values()
            .find(|c| c["spec"]["group"] == group && c["spec"]["names"]["kind"] == kind)
        {
            return Some((crd_key(crd), crd["spec"]["scope"] == "Namespaced"));
        }
        match kind {
            "ConfigMap" => Some(("configmaps".into(), true)),
            "Secret" => Some(("secrets".into(), true)),
            "Namespace" => Some(("namespaces".into(), false)),
            _ => None,
        }
    }
}

impl FakeApiServer {
    /// Starts a server on a loopback port with multiarch's CRDs installed.
    pub async fn start() -> FakeApiServer {
        let (changes, _) = broadcast::channel(65_536);
        let mut store = Store::default();
        for crd in multiarch_crd::render::crds().unwrap() {
            let crd = serde_json::to_value(crd).unwrap();
            store.crds.insert(crd_key(&crd), crd);
        }
        let shared = Arc::new(Shared {
            store: Mutex::new(store),
            hold_watches: std::sync::atomic::AtomicBool::new(false),
            changes,
            faults: faults::Faults::default(),
        });
        let app = Router::new().fallback(counted).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeApiServer { addr, shared, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        self.shared.store.lock().unwrap()
    }

    /// Creates or replaces an object as a user or kubelet would (no admission).
    pub fn apply(&self, resource: &str, object: Value) -> Value {
        let mut store = self.store();
        let mut object = object;
        let namespace = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        let name = object["metadata"]["name"].as_str().unwrap().to_owned();
        let key = Key {
            resource: resource.into(),
            namespace,
            name,
        };
        if let Some(existing) = store.objects.get(&key) {
            object["metadata"]["uid"] = existing["metadata"]["uid"].clone();
        } else if object["metadata"]["uid"].is_null() {
            store.uid += 1;
            object["metadata"]["uid"] = json!(format!("00000000-0000-4000-8000-{:012}", store.uid));
        }
        if object["metadata"]["creationTimestamp"].is_null() {
            object["metadata"]["creationTimestamp"] = json!(now());
        }
        if resource == "namespaces" {
            let name = key.name.clone();
            writes::namespace_defaults(&mut object, &name);
        }
        object["kind"] = json!(kind_of(resource));
        object["apiVersion"] = json!(api_version_of(resource));
        store
            .write(key, Some(object), &self.shared.changes)
            .unwrap()
    }

    pub fn delete(&self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        let mut store = self.store();
        let key = Key {
            resource: resource.into(),
            namespace: namespace.into(),
            name: name.into(),
        };
        if !store.objects.contains_key(&key) {
            return None;
        }
        store.remove(key, &self.shared.changes)
    }

    pub fn get(&self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        self.store()
            .objects
            .get(&Key {
                resource: resource.into(),
                namespace: namespace.into(),
                name: name.into(),
            })
            .cloned()
    }

    pub fn list(&self, resource: &str) -> Vec<Value> {
        self.store()
            .objects
            .iter()
            .filter(|(k, _)| k.resource == resource)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Every request so far, as `METHOD path`.
    pub fn requests(&self) -> Vec<String> {
        self.store().requests.clone()
    }

    /// Every write stored so far, in order.
    pub fn commits(&self) -> Vec<Commit> {
        self.store().commits.clone()
    }

    /// Every request so far, as `METHOD path?query` (a list and a watch of the same
    /// resource differ only there).
    pub fn requests_with_query(&self) -> Vec<String> {
        self.store().requests_with_query.clone()
    }

    /// Forgets the change history: watches resuming from before now get `410 Gone`.
    pub fn compact(&self) {
        let mut store = self.store();
        store.compacted = store.rv;
        store.history.clear();
    }

    /// Drops every open watch connection.
    pub fn break_watches(&self) {
        let _ = self.shared.changes.send(Message::Break);
    }

    /// While `true`, new watches wait instead of connecting (with `break_watches`: a
    /// partition during which changes are missed).
    pub fn hold_watches(&self, hold: bool) {
        self.shared
            .hold_watches
            .store(hold, std::sync::atomic::Ordering::SeqCst);
    }

    /// The next `count` updates (PUT) fail with HTTP `code` (409: someone wrote first).
    pub fn fail_next_updates(&self, code: u16, count: usize) {
        let mut store = self.store();
        for _ in 0..count {
            store.update_failures.push_back(code);
        }
    }

    /// The next `count` bindings fail with HTTP `code` (before any other check).
    /// The next `count` PATCH requests (any resource) fail with `code`.
    pub fn fail_next_patches(&self, code: u16, count: usize) {
        let mut store = self.store();
        for _ in 0..count {
            store.patch_failures.push_back(code);
        }
    }

    /// Requests matching `fault` fail, wait or hang (see [`Fault`]).
    pub fn inject(&self, fault: Fault) {
        self.shared.faults.add(fault);
    }

    /// Removes every injected fault; hung requests go on.
    pub fn clear_faults(&self) {
        self.shared.faults.clear();
    }

    /// The kubelet confirms a terminating pod is gone: it is removed.
    pub fn finish_termination(&self, namespace: &str, name: &str) -> bool {
        self.delete("pods", namespace, name).is_some()
    }

    pub fn fail_next_bindings(&self, code: u16, count: usize) {
        let mut store = self.store();
        for _ in 0..count {
            store.binding_failures.push_back(code);
        }
    }
}

/// `apiserver_request_total`'s labels of a request, as the real server sets them.
fn request_labels(method: &Method, path: &str, watch: bool, apply: bool) -> Option<[String; 6]> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version) = match parts.as_slice() {
        ["api", version, ..] => (String::new(), (*version).to_owned()),
        ["apis", group, version, ..] => ((*group).to_owned(), (*version).to_owned()),
        _ => return None,
    };
    let target = parse_path(path)?;
    let resource = target
        .resource
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    let verb = match (method.as_str(), &target.name) {
        ("GET", Some(_)) => "GET",
        ("GET", None) if watch => "WATCH",
        ("GET", None) => "LIST",
        ("PATCH", _) if apply => "APPLY",
        (other, _) => other,
    };
    let scope = if target.name.is_some() {
        "resource"
    } else if target.namespace.is_empty() {
        "cluster"
    } else {
        "namespace"
    };
    Some([
        verb.to_owned(),
        group,
        version,
        resource,
        target.subresource.unwrap_or_default(),
        scope.to_owned(),
    ])
}

/// `GET /metrics`: the request counter in the real server's exposition format.
fn metrics(shared: &Shared) -> Response {
    let store = shared.store.lock().unwrap();
    let mut text = String::from(
        "# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.\n# TYPE apiserver_request_total counter\n",
    );
    for ([verb, group, version, resource, subresource, scope, code], n) in &store.request_totals {
        text.push_str(&format!(
            "apiserver_request_total{{code=\"{code}\",component=\"apiserver\",dry_run=\"\",group=\"{group}\",resource=\"{resource}\",scope=\"{scope}\",subresource=\"{subresource}\",verb=\"{verb}\",version=\"{version}\"}} {n}\n"
        ));
    }
    Response::builder()
        .status(200)
        .header("content-type", "text/plain; version=0.0.4; charset=utf-8")
        .body(Body::from(text))
        .unwrap()
}

/// Every request, counted by `apiserver_request_total`'s labels once answered.
async fn counted(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    query: Query<BTreeMap<String, String>>,
    body: Bytes,
) -> Response {
    if method == Method::GET && uri.path() == "/metrics" {
        return metrics(&shared);
    }
    let watch = matches!(query.get("watch").map(String::as_str), Some("1" | "true"));
    let apply = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/apply-patch"));
    let labels = request_labels(&method, uri.path(), watch, apply);
    let writer = headers
        .get("user-agent")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let response = WRITER
        .scope(
            writer,
            handle(State(shared.clone()), method, uri, headers, query, body),
        )
        .await;
    if let Some([verb, group, version, resource, subresource, scope]) = labels {
        let code = response.status().as_u16().to_string();
        *shared
            .store
            .lock()
            .unwrap()
            .request_totals
            .entry([verb, group, version, resource, subresource, scope, code])
            .or_default() += 1;
    }
    response
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Query(query): Query<BTreeMap<String, String>>,
    body: Bytes,
) -> Response {
    {
        let mut store = shared.store.lock().unwrap();
        // A metadata-only read of one object is told apart: it reads no data.
        let metadata = if wants_metadata_only(&headers) && method == Method::GET {
            " (metadata)"
        } else {
            ""
        };
        store
            .requests
            .push(format!("{method} {}{metadata}", uri.path()));
        store.requests_with_query.push(format!("{method} {uri}"));
    }
    if let Some(code) = shared.faults.apply(&method, uri.path()).await {
        return status(
            code,
            faults::reason(code),
            &faults::message(code, uri.path()),
            "",
            "",
        );
    }
    if let Some(answer) = discovery::answer(&shared.store.lock().unwrap().objects, uri.path()) {
        return answer;
    }
    let Some(target) = parse_path(uri.path()) else {
        return status(
            404,
            "NotFound",
            &format!(
                "the server could not find the requested resource ({})",
                uri.path()
            ),
            "",
            "",
        );
    };
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let writer = writes::writer(&target, &query, &headers);
    let body: Value = if body.is_empty() {
        Value::Null
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => return status(400, "BadRequest", &format!("invalid JSON: {e}"), "", ""),
        }
    };
    match (method, target.name.clone(), target.subresource.as_deref()) {
        (Method::GET, None, _) => {
            if matches!(query.get("watch").map(String::as_str), Some("1" | "true")) {
                while shared
                    .hold_watches
                    .load(std::sync::atomic::Ordering::SeqCst)
                {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                watch(shared, target, query, wants_metadata_only(&headers))
            } else {
                list(&shared, &target, &query, wants_metadata_only(&headers))
            }
        }
        (Method::GET, Some(name), _) => get(&shared, &target, &name, wants_metadata_only(&headers)),
        (Method::POST, None, _) => {
            let dry_run = query.get("dryRun").is_some_and(|d| d == "All");
            writes::create(&shared, &target, body, &writer, dry_run)
        }
        (Method::POST, Some(name), Some("binding")) => bind(&shared, &target, &name, &body),
        (Method::POST, Some(name), Some("eviction")) if target.resource == "pods" => {
            eviction::evict(&shared, &target, &name, &body)
        }
        (Method::PUT, Some(name), _) => writes::update(&shared, &target, &name, body, &writer),
        (Method::PATCH, Some(name), _) => {
            let request = writes::PatchRequest {
                content_type: &content_type,
                force: matches!(query.get("force").map(String::as_str), Some("true" | "1")),
                writer: &writer,
            };
            writes::patch(&shared, &target, &name, &body, &request)
        }
        (Method::DELETE, Some(name), _) => writes::delete(&shared, &target, &name, &body),
        _ => status(405, "MethodNotAllowed", "method not allowed", "", ""),
    }
}

/// Priority admission for a created pod naming a PriorityClass: its value and preemption
/// policy, or the real server's 403.
fn admit_priority(store: &Store, name: &str, body: &mut Value) -> Result<(), Box<Response>> {
    let Some(class_name) = body["spec"]["priorityClassName"]
        .as_str()
        .map(str::to_owned)
    else {
        return Ok(());
    };
    let class = store.objects.get(&Key {
        resource: "scheduling.k8s.io/priorityclasses".into(),
        namespace: String::new(),
        name: class_name.clone(),
    });
    let Some(class) = class else {
        return Err(Box::new(status(
            403,
            "Forbidden",
            &format!(
                "pods \"{name}\" is forbidden: no PriorityClass with name {class_name} was found"
            ),
            name,
            "pods",
        )));
    };
    let value = class["value"].as_i64().unwrap_or(0);
    if let Some(given) = body["spec"]["priority"].as_i64()
        && given != value
    {
        return Err(Box::new(status(
            403,
            "Forbidden",
            &format!(
                "pods \"{name}\" is forbidden: the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {value} from the given PriorityClass name"
            ),
            name,
            "pods",
        )));
    }
    body["spec"]["priority"] = json!(value);
    body["spec"]["preemptionPolicy"] = class
        .get("preemptionPolicy")
        .cloned()
        .unwrap_or_else(|| json!("PreemptLowerPriority"));
    Ok(())
}

fn not_found(target: &Target, name: &str) -> Response {
    let plural = target.resource.rsplit('/').next().unwrap_or("");
    status(
        404,
        "NotFound",
        &format!("{plural} \"{name}\" not found"),
        name,
        plural,
    )
}

/// `Accept: application/json;as=PartialObjectMetadata...`: the client asks for names and
/// versions only (`Api<PartialObjectMeta<K>>`), as the real server answers them.
fn wants_metadata_only(headers: &HeaderMap) -> bool {
    headers
        .get("accept")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("as=PartialObjectMetadata"))
}

fn metadata_only(object: &Value) -> Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": object["metadata"]})
}

fn metadata_only_line(line: Bytes) -> Bytes {
    let Ok(mut event) = serde_json::from_slice::<Value>(&line) else {
        return line;
    };
    if event["type"] == "ERROR" {
        return line;
    }
    event["object"] = metadata_only(&event["object"]);
    let mut bytes = serde_json::to_vec(&event).unwrap();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

fn list(
    shared: &Shared,
    target: &Target,
    query: &BTreeMap<String, String>,
    metadata: bool,
) -> Response {
    let store = shared.store.lock().unwrap();
    let fields = query.get("fieldSelector").cloned().unwrap_or_default();
    let labels = query.get("labelSelector").cloned().unwrap_or_default();
    // Paging as the real server pages: `limit` items, then an opaque `continue` token
    // that names where the next page starts (here: the last key served) and the
    // resourceVersion of the first page: every page is read at that version (etcd's
    // snapshot), so a list and the watch started from its version miss nothing.
    let (after, at): (Option<Key>, u64) = match query.get("continue") {
        Some(token) => match continue_key(token) {
            Some((key, rv)) => (Some(key), rv),
            None => {
                return status(
                    400,
                    "BadRequest",
                    "continue key is not valid: illegal base64 data at input byte 0",
                    "",
                    "",
                );
            }
        },
        None => (None, store.rv),
    };
    if at < store.compacted {
        return status(
            410,
            "Expired",
            "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
            "",
            "",
        );
    }
    let limit = query
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    let snapshot = store.objects_at(&target.resource, at);
    let matching: Vec<(&Key, &Value)> = snapshot
        .iter()
        .filter(|(k, _)| {
            (target.namespace.is_empty() || k.namespace == target.namespace)
                && after.as_ref().is_none_or(|a| *k > a)
        })
        .filter(|(_, v)| field_matches(v, &fields) && label_matches(v, &labels))
        .collect();
    let served = limit.map_or(matching.len(), |l| l.min(matching.len()));
    let items: Vec<Value> = matching[..served]
        .iter()
        .map(|(_, v)| (*v).clone())
        .collect();
    let remaining = matching.len() - served;
    let last = served.checked_sub(1).map(|i| matching[i].0);
    let mut list_metadata = json!({"resourceVersion": at.to_string()});
    if remaining > 0
        && let Some(last) = last
    {
        list_metadata["continue"] = json!(continue_token(last, at));
        list_metadata["remainingItemCount"] = json!(remaining);
    }
    let (kind, api_version, items) = if metadata {
        (
            "PartialObjectMetadataList".to_owned(),
            "meta.k8s.io/v1".to_owned(),
            items.iter().map(metadata_only).collect(),
        )
    } else {
        (
            format!("{}List", kind_of(&target.resource)),
            api_version_of(&target.resource),
            items,
        )
    };
    json_response(
        200,
        &json!({
            "kind": kind,
            "apiVersion": api_version,
            "metadata": list_metadata,
            "items": items,
        }),
    )
}

fn continue_token(key: &Key, rv: u64) -> String {
    use base64::Engine;
    let raw = json!([key.resource, key.namespace, key.name, rv.to_string()]).to_string();
    base64::engine::general_purpose::STANDARD.encode(raw)
}

/// Where the next page starts, and the resourceVersion every page is read at.
fn continue_key(token: &str) -> Option<(Key, u64)> {
    use base64::Engine;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(token)
        .ok()?;
    let [resource, namespace, name, rv]: [String; 4] = serde_json::from_slice(&raw).ok()?;
    Some((
        Key {
            resource,
            namespace,
            name,
        },
        rv.parse().ok()?,
    ))
}

/// One object, or (`metadata_only`) its PartialObjectMetadata, as the real server
/// answers `Api<PartialObjectMeta<K>>::get_metadata`: no data.
fn get(shared: &Shared, target: &Target, name: &str, metadata_only_wanted: bool) -> Response {
    let store = shared.store.lock().unwrap();
    let key = Key {
        resource: target.resource.clone(),
        namespace: target.namespace.clone(),
        name: name.into(),
    };
    match store.objects.get(&key) {
        Some(v) if metadata_only_wanted => json_response(200, &metadata_only(v)),
        Some(v) => json_response(200, v),
        None => not_found(target, name),
    }
}

/// `group/plural` of a CRD, the key its custom resources are found by.
fn crd_key(crd: &Value) -> String {
    format!(
        "{}/{}",
        crd["spec"]["group"].as_str().unwrap_or(""),
        crd["spec"]["names"]["plural"].as_str().unwrap_or("")
    )
}

/// A custom resource as the API server would store it, or the body of its 422.
fn admit_custom(
    store: &Store,
    target: &Target,
    name: &str,
    object: Value,
    old: Option<&Value>,
) -> Result<Value, Value> {
    let Some(crd) = store.crds.get(&target.resource) else {
        return Ok(object);
    };
    apiextensions::custom_resource::admit(crd, object, old).map_err(|errors| {
        let group = target.resource.split('/').next().unwrap_or("");
        apiextensions::invalid_status(group, kind_of(&target.resource), name, &errors)
    })
}

/// `POST customresourcedefinitions`: refused with the API server's 422 unless it would
/// be created.
fn create_crd(store: &mut Store, body: &Value) -> Option<Response> {
    let errors = apiextensions::check_crd(body).errors;
    if errors.is_empty() {
        store.crds.insert(crd_key(body), body.clone());
        return None;
    }
    let name = body["metadata"]["name"].as_str().unwrap_or("");
    Some(json_response(
        422,
        &apiextensions::invalid_status(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            name,
            &errors,
        ),
    ))
}

fn bind(shared: &Shared, target: &Target, name: &str, body: &Value) -> Response {
    let mut store = shared.store.lock().unwrap();
    if let Some(code) = store.binding_failures.pop_front() {
        return status(
            code,
            "InternalError",
            &format!("Internal error occurred: injected failure binding {name}"),
            name,
            "pods/binding",
        );
    }
    let key = Key {
        resource: "pods".into(),
        namespace: target.namespace.clone(),
        name: name.into(),
    };
    let Some(pod) = store.objects.get(&key).cloned() else {
        return status(
            404,
            "NotFound",
            &format!("pods \"{name}\" not found"),
            name,
            "pods",
        );
    };
    let pod_uid = pod["metadata"]["uid"].as_str().unwrap_or("").to_owned();
    if let Some(wanted) = body["metadata"]["uid"].as_str()
        && wanted != pod_uid
    {
        return status(
            409,
            "Conflict",
            &format!(
                "Operation cannot be fulfilled on pods \"{name}\": StorageError: invalid object, Code: 4, Key: /registry/pods/{}/{name}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: {wanted}, UID in object meta: {pod_uid}",
                target.namespace
            ),
            name,
            "pods",
        );
    }
    let conflict = |why: String| {
        status(
            409,
            "Conflict",
            &format!("Operation cannot be fulfilled on pods/binding \"{name}\": {why}"),
            name,
            "pods/binding",
        )
    };
    if !pod["metadata"]["deletionTimestamp"].is_null() {
        return conflict(format!(
            "pod {name} is being deleted, cannot be assigned to a host"
        ));
    }
    if let Some(node) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
        return conflict(format!("pod {name} is already assigned to node \"{node}\""));
    }
    if pod["spec"]["schedulingGates"]
        .as_array()
        .is_some_and(|g| !g.is_empty())
    {
        return conflict(format!("pod {name} has non-empty .spec.schedulingGates"));
    }
    let node = body["target"]["name"].as_str().unwrap_or("").to_owned();
    let mut bound = pod;
    bound["spec"]["nodeName"] = json!(node);
    merge(
        &mut bound,
        &json!({"status": {"conditions": [{"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-22T00:00:01Z"}]}}),
        true,
    );
    // ClearingNominatedNodeNameAfterBinding (beta, on by default since 1.35): a bound
    // pod's nomination is over.
    if let Some(status) = bound["status"].as_object_mut() {
        status.remove("nominatedNodeName");
    }
    store.write(key, Some(bound), &shared.changes);
    json_response(
        201,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    )
}

fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap();
    line.push(b'\n');
    Bytes::from(line)
}

fn watch(
    shared: Arc<Shared>,
    target: Target,
    query: BTreeMap<String, String>,
    metadata: bool,
) -> Response {
    // Subscribe before reading the store, so no change falls between the two.
    let receiver = shared.changes.subscribe();
    let fields = query.get("fieldSelector").cloned().unwrap_or_default();
    let labels = query.get("labelSelector").cloned().unwrap_or_default();
    let selected = move |v: &Option<Value>| {
        v.as_ref()
            .is_some_and(|v| field_matches(v, &fields) && label_matches(v, &labels))
    };
    let in_scope = {
        let resource = target.resource.clone();
        let namespace = target.namespace.clone();
        move |c: &Change| {
            c.resource == resource && (namespace.is_empty() || c.namespace == namespace)
        }
    };
    let (mut initial, start_rv) = {
        let store = shared.store.lock().unwrap();
        let requested = query
            .get("resourceVersion")
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|v| *v > 0);
        match requested {
            Some(rv) if rv < store.compacted => {
                let gone = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": format!("too old resource version: {rv} ({})", store.compacted), "reason": "Expired", "code": 410});
                let body = Body::from(event_line("ERROR", &gone));
                return Response::builder()
                    .status(200)
                    .header("content-type", "application/json")
                    .body(body)
                    .unwrap();
            }
            Some(rv) => {
                let replay: Vec<Bytes> = store
                    .history
                    .iter()
                    .filter(|c| c.rv > rv && in_scope(c))
                    .filter_map(|c| transition(c, &selected))
                    .collect();
                (replay, store.rv)
            }
            None => {
                // No version: synthetic ADDED for the current state.
                let added: Vec<Bytes> = store
                    .objects
                    .iter()
                    .filter(|(k, v)| {
                        k.resource == target.resource
                            && (target.namespace.is_empty() || k.namespace == target.namespace)
                            && selected(&Some((*v).clone()))
                    })
                    .map(|(_, v)| event_line("ADDED", v))
                    .collect();
                (added, store.rv)
            }
        }
    };
    initial.reverse();
    let stream = futures_util::stream::unfold((initial, receiver), move |(mut pending, mut rx)| {
        let in_scope = in_scope.clone();
        let selected = selected.clone();
        async move {
            if let Some(line) = pending.pop() {
                return Some((Ok::<Bytes, std::io::Error>(line), (pending, rx)));
            }
            loop {
                match tokio::time::timeout(Duration::from_secs(300), rx.recv()).await {
                    Ok(Ok(Message::Change(c))) if c.rv > start_rv && in_scope(&c) => {
                        if let Some(line) = transition(&c, &selected) {
                            return Some((Ok(line), (pending, rx)));
                        }
                    }
                    Ok(Ok(Message::Change(_)))
                    | Ok(Err(broadcast::error::RecvError::Lagged(_))) => {}
                    Ok(Ok(Message::Break) | Err(broadcast::error::RecvError::Closed)) | Err(_) => {
                        return None;
                    }
                }
            }
        }
    });
    let stream = stream.map(move |line| {
        if metadata {
            line.map(metadata_only_line)
        } else {
            line
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(Body::from_stream(stream.boxed()))
        .unwrap()
        .into_response()
}

/// ADDED/MODIFIED/DELETED as seen through the watch's selectors.
fn transition(c: &Change, selected: &impl Fn(&Option<Value>) -> bool) -> Option<Bytes> {
    match (selected(&c.old), selected(&c.new)) {
        (true, true) => Some(event_line("MODIFIED", c.new.as_ref()?)),
        (false, true) => Some(event_line("ADDED", c.new.as_ref()?)),
        (true, false) => {
            let mut last = c.new.clone().or_else(|| c.old.clone())?;
            last["metadata"]["resourceVersion"] = json!(c.rv.to_string());
            Some(event_line("DELETED", &last))
        }
        (false, false) => None,
    }
}
