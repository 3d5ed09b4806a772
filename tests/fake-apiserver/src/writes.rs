//! The write verbs: create, update, patch (merge, strategic, JSON and server-side apply)
//! and delete, each through what the real server runs around a write: defaults and
//! validation, validating admission policies, `generation`, field ownership, finalizers,
//! and a write skipped when nothing changed (same `resourceVersion`, no watch event).

use std::collections::BTreeMap;

use axum::{http::HeaderMap, response::Response};
use serde_json::{Value, json};

use crate::{
    Key, Shared, Store, Target, admissionregistration, admit_custom, admit_priority,
    api_version_of, apiextensions, create_crd, json_response, kind_of, lifecycle, managed_fields,
    merge, not_found, now, status,
};

/// Who writes: `fieldManager`, else the user agent's product, as the real server derives it.
pub(crate) fn writer(
    target: &Target,
    query: &BTreeMap<String, String>,
    headers: &HeaderMap,
) -> managed_fields::Writer {
    let manager = query
        .get("fieldManager")
        .cloned()
        .or_else(|| {
            headers
                .get("user-agent")
                .and_then(|v| v.to_str().ok())
                .and_then(|ua| ua.split('/').next())
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "unknown".into());
    let scope = if target.subresource.as_deref() == Some("status") {
        managed_fields::Scope::Status
    } else {
        managed_fields::Scope::Main
    };
    managed_fields::Writer {
        manager,
        api_version: api_version_of(&target.resource),
        scope,
        now: now(),
    }
}

fn key(target: &Target, name: &str) -> Key {
    Key {
        resource: target.resource.clone(),
        namespace: target.namespace.clone(),
        name: name.into(),
    }
}

fn plural(target: &Target) -> &str {
    target.resource.rsplit('/').next().unwrap_or("")
}

fn conflict(target: &Target, name: &str) -> Response {
    let plural = plural(target);
    status(
        409,
        "Conflict",
        &format!(
            "Operation cannot be fulfilled on {plural} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
        ),
        name,
        plural,
    )
}

fn invalid(target: &Target, name: &str, errors: &[apiextensions::FieldError]) -> Response {
    let group = target.resource.split_once('/').map_or("", |(g, _)| g);
    json_response(
        422,
        &apiextensions::invalid_status(group, kind_of(&target.resource), name, errors),
    )
}

/// Schema defaults and validation of custom resources and webhook/policy objects.
fn admit(
    store: &Store,
    target: &Target,
    name: &str,
    object: Value,
    old: Option<&Value>,
) -> Result<Value, Box<Response>> {
    let mut object = admit_custom(store, target, name, object, old)
        .map_err(|refused| Box::new(json_response(422, &refused)))?;
    if let Err(errors) = admissionregistration::admit(&target.resource, &mut object) {
        return Err(Box::new(invalid(target, name, &errors)));
    }
    if let Some(old) = old
        && let Some(error) = lifecycle::finalizer_added_while_deleting(old, &object)
    {
        return Err(Box::new(invalid(target, name, &[error])));
    }
    Ok(object)
}

/// The validating admission policies bound to this write.
fn policies(
    store: &Store,
    target: &Target,
    name: &str,
    operation: &str,
    object: &Value,
    old: Option<&Value>,
) -> Result<(), Box<Response>> {
    let attributes = admissionregistration::Attributes {
        resource: &target.resource,
        operation,
        namespace: &target.namespace,
        name,
        object: Some(object),
        old_object: old,
    };
    match admissionregistration::validate(&attributes, store) {
        Some(denied) => Err(Box::new(json_response(denied.code, &denied.body))),
        None => Ok(()),
    }
}

/// Stores `new` over `old` unless nothing changed; an object whose last finalizer went
/// while it was being deleted is deleted instead.
fn store_result(
    shared: &Shared,
    store: &mut Store,
    key: Key,
    old: Option<&Value>,
    new: Value,
) -> Response {
    if lifecycle::finalized(&new) {
        store.remove(key, &shared.changes);
        return json_response(200, &new);
    }
    if let Some(old) = old
        && managed_fields::same_content(old, &new)
        && old["metadata"]["managedFields"] == new["metadata"]["managedFields"]
    {
        return json_response(200, old);
    }
    let code = if old.is_some() { 200 } else { 201 };
    let stored = store.write(key, Some(new), &shared.changes).unwrap();
    json_response(code, &stored)
}

pub(crate) fn create(
    shared: &Shared,
    target: &Target,
    mut body: Value,
    writer: &managed_fields::Writer,
    dry_run: bool,
) -> Response {
    let mut store = shared.store.lock().unwrap();
    if target.resource == "apiextensions.k8s.io/customresourcedefinitions"
        && let Some(refused) = create_crd(&mut store, &body)
    {
        return refused;
    }
    let name = match body["metadata"]["name"].as_str() {
        Some(n) => n.to_owned(),
        None => match body["metadata"]["generateName"].as_str() {
            // As the real server: a generated name must end in '-' to form a DNS name.
            Some(prefix) if prefix.ends_with('.') => {
                return status(
                    422,
                    "Invalid",
                    "metadata.generateName: Invalid value: a lowercase RFC 1123 subdomain must end with an alphanumeric character",
                    "",
                    kind_of(&target.resource),
                );
            }
            Some(prefix) => {
                store.uid += 1;
                format!("{prefix}{:05}", store.uid)
            }
            None => {
                return status(
                    422,
                    "Invalid",
                    "metadata.name: Required value: name or generateName is required",
                    "",
                    kind_of(&target.resource),
                );
            }
        },
    };
    let key = key(target, &name);
    if store.objects.contains_key(&key) {
        let plural = plural(target);
        return status(
            409,
            "AlreadyExists",
            &format!("{plural} \"{name}\" already exists"),
            &name,
            plural,
        );
    }
    // multiarch's CRDs have a status subresource: like the real server, create ignores status.
    if target.resource.starts_with("multiarch.openshift.io/")
        && let Some(object) = body.as_object_mut()
    {
        object.remove("status");
    }
    body["metadata"]["name"] = json!(name);
    if let Some(refused) = event_note_too_long(target, &name, &body) {
        return refused;
    }
    if target.resource == "namespaces" {
        namespace_defaults(&mut body, &name);
    }
    if target.resource == "pods"
        && let Err(refused) = admit_priority(&store, &name, &mut body)
    {
        return *refused;
    }
    body = match admit(&store, target, &name, body, None) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    store.uid += 1;
    body["metadata"]["uid"] = json!(format!("00000000-0000-4000-8000-{:012}", store.uid));
    body["metadata"]["creationTimestamp"] = json!(now());
    if !target.namespace.is_empty() {
        body["metadata"]["namespace"] = json!(target.namespace);
    }
    body["kind"] = json!(kind_of(&target.resource));
    body["apiVersion"] = json!(api_version_of(&target.resource));
    if let Err(denied) = policies(&store, target, &name, "CREATE", &body, None) {
        return *denied;
    }
    // ResourceQuota runs last, after every other admission check.
    if target.resource == "pods"
        && let Some(refused) = super::quota::admit_pod(&store, &target.namespace, &name)
    {
        return refused;
    }
    lifecycle::set_generation(&target.resource, None, &mut body);
    managed_fields::record_update(None, &mut body, writer);
    // `?dryRun=All`: admitted and validated as a real create, never stored.
    if dry_run {
        return json_response(201, &body);
    }
    store_result(shared, &mut store, key, None, body)
}

/// What the real server adds to every namespace.
pub(crate) fn namespace_defaults(body: &mut Value, name: &str) {
    body["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
    if body["spec"]["finalizers"].is_null() {
        body["spec"]["finalizers"] = json!(["kubernetes"]);
    }
    if body["status"]["phase"].is_null() {
        body["status"]["phase"] = json!("Active");
    }
}

pub(crate) fn update(
    shared: &Shared,
    target: &Target,
    name: &str,
    mut body: Value,
    writer: &managed_fields::Writer,
) -> Response {
    let mut store = shared.store.lock().unwrap();
    if let Some(code) = store.update_failures.pop_front() {
        let plural = plural(target);
        return status(
            code,
            "Conflict",
            &format!(
                "Operation cannot be fulfilled on {plural} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
            ),
            name,
            plural,
        );
    }
    let key = key(target, name);
    let Some(existing) = store.objects.get(&key).cloned() else {
        return not_found(target, name);
    };
    if let Some(wanted) = body["metadata"]["resourceVersion"].as_str()
        && existing["metadata"]["resourceVersion"].as_str() != Some(wanted)
    {
        return conflict(target, name);
    }
    if target.subresource.as_deref() == Some("status") {
        let mut merged = existing.clone();
        merged["status"] = body["status"].take();
        body = merged;
    }
    for field in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "resourceVersion",
    ] {
        body["metadata"][field] = existing["metadata"][field].clone();
        if body["metadata"][field].is_null()
            && let Some(meta) = body["metadata"].as_object_mut()
        {
            meta.remove(field);
        }
    }
    body["kind"] = json!(kind_of(&target.resource));
    body["apiVersion"] = json!(api_version_of(&target.resource));
    let mut body = match admit(&store, target, name, body, Some(&existing)) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    if let Err(denied) = policies(&store, target, name, "UPDATE", &body, Some(&existing)) {
        return *denied;
    }
    lifecycle::set_generation(&target.resource, Some(&existing), &mut body);
    managed_fields::record_update(Some(&existing), &mut body, writer);
    store_result(shared, &mut store, key, Some(&existing), body)
}

/// `application/json-patch+json` (RFC 6902).
fn json_patch(target: &Value, body: &Value) -> Result<Value, String> {
    let operations: Vec<json_patch::PatchOperation> =
        serde_json::from_value(body.clone()).map_err(|e| e.to_string())?;
    let mut patched = target.clone();
    json_patch::patch(&mut patched, &operations).map_err(|e| e.to_string())?;
    Ok(patched)
}

/// A JSON patch of `existing` (its status only, for the status subresource); a
/// resourceVersion it leaves on the object is a precondition, as on the real server (its
/// storage compares it with the stored one).
fn json_patched(
    existing: &Value,
    body: &Value,
    status_only: bool,
    target: &Target,
    name: &str,
) -> Result<Value, Box<Response>> {
    match json_patch(existing, body) {
        // A resourceVersion the patch leaves on the object is a precondition, as on
        // the real server (its storage compares it with the stored one).
        Ok(patched)
            if patched["metadata"]["resourceVersion"].is_string()
                && patched["metadata"]["resourceVersion"]
                    != existing["metadata"]["resourceVersion"] =>
        {
            Err(Box::new(conflict(target, name)))
        }
        Ok(patched) if status_only => {
            let mut kept = existing.clone();
            kept["status"] = patched["status"].clone();
            Ok(kept)
        }
        Ok(patched) => Ok(patched),
        Err(e) => Err(Box::new(status(
            422,
            "Invalid",
            &format!("the server rejected our request due to an error in our request: {e}"),
            name,
            plural(target),
        ))),
    }
}

/// A merge or strategic merge patch of `existing` (its status only, for the status
/// subresource), never of its resourceVersion or uid.
fn merge_patched(existing: &Value, body: &Value, strategic: bool, status_only: bool) -> Value {
    let mut patched = existing.clone();
    let mut patch = body.clone();
    if let Some(meta) = patch.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
        meta.remove("uid");
    }
    if status_only {
        merge(
            &mut patched,
            &json!({"status": patch["status"].clone()}),
            strategic,
        );
    } else {
        merge(&mut patched, &patch, strategic);
    }
    patched
}

pub(crate) struct PatchRequest<'a> {
    pub content_type: &'a str,
    pub force: bool,
    pub writer: &'a managed_fields::Writer,
}

pub(crate) fn patch(
    shared: &Shared,
    target: &Target,
    name: &str,
    body: &Value,
    request: &PatchRequest<'_>,
) -> Response {
    let mut store = shared.store.lock().unwrap();
    let key = key(target, name);
    if let Some(code) = store.patch_failures.pop_front() {
        let plural = plural(target);
        return status(
            code,
            "InternalError",
            &format!("Internal error occurred: injected failure patching {name}"),
            name,
            plural,
        );
    }
    let apply = request.content_type.starts_with("application/apply-patch");
    let found = store.objects.get(&key).cloned();
    let existing = match &found {
        Some(v) => v.clone(),
        None if apply => {
            store.uid += 1;
            let mut fresh = json!({"metadata": {"name": name, "uid": format!("00000000-0000-4000-8000-{:012}", store.uid), "creationTimestamp": now()}});
            if !target.namespace.is_empty() {
                fresh["metadata"]["namespace"] = json!(target.namespace);
            }
            fresh
        }
        None => return not_found(target, name),
    };
    // A resourceVersion in the patch is a precondition, as on the real server.
    if let Some(wanted) = body["metadata"]["resourceVersion"].as_str()
        && !existing["metadata"]["resourceVersion"].is_null()
        && existing["metadata"]["resourceVersion"].as_str() != Some(wanted)
    {
        return conflict(target, name);
    }
    // A UID in the patch must be the object's: the real server refuses to change it
    // (an immutable field), which makes it a precondition on the pod's identity.
    if !apply
        && let Some(wanted) = body["metadata"]["uid"].as_str()
        && existing["metadata"]["uid"].as_str() != Some(wanted)
    {
        return uid_immutable(target, name, wanted);
    }
    let status_only = target.subresource.as_deref() == Some("status");
    let mut patched = if apply {
        match managed_fields::apply(&existing, body, request.writer, request.force) {
            Ok(applied) => applied,
            Err(conflicts) => return json_response(409, &conflicts.status()),
        }
    } else if request.content_type.starts_with("application/json-patch") {
        match json_patched(&existing, body, status_only, target, name) {
            Ok(patched) => patched,
            Err(refused) => return *refused,
        }
    } else {
        let strategic = request
            .content_type
            .starts_with("application/strategic-merge-patch");
        merge_patched(&existing, body, strategic, status_only)
    };
    for field in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "resourceVersion",
    ] {
        if existing["metadata"][field].is_null() {
            if let Some(meta) = patched["metadata"].as_object_mut() {
                meta.remove(field);
            }
        } else {
            patched["metadata"][field] = existing["metadata"][field].clone();
        }
    }
    patched["kind"] = json!(kind_of(&target.resource));
    patched["apiVersion"] = json!(api_version_of(&target.resource));
    let old = found.as_ref();
    let mut patched = match admit(&store, target, name, patched, old) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let operation = if old.is_some() { "UPDATE" } else { "CREATE" };
    if let Err(denied) = policies(&store, target, name, operation, &patched, old) {
        return *denied;
    }
    lifecycle::set_generation(&target.resource, old, &mut patched);
    if !apply {
        managed_fields::record_update(old, &mut patched, request.writer);
    }
    store_result(shared, &mut store, key, old, patched)
}

/// An event whose note (events.k8s.io) or message (core/v1) is over 1024 bytes
/// (`NoteLengthLimit`) is refused, as kube-apiserver 1.36.2 refuses it
/// (`tests/fixtures/apiserver/event-note-too-long.json`; both name the field `message`).
fn event_note_too_long(target: &Target, name: &str, body: &Value) -> Option<Response> {
    const NOTE_LENGTH_LIMIT: usize = 1024;
    let note = match target.resource.as_str() {
        "events.k8s.io/events" => body["note"].as_str(),
        "events" => body["message"].as_str(),
        _ => None,
    }?;
    (note.len() > NOTE_LENGTH_LIMIT).then(|| {
        // Validated as the core Event whatever the group: `Event "NAME" is invalid`.
        let error = apiextensions::FieldError::invalid(
            "message",
            Some("\"\"".into()),
            format!("can have at most {NOTE_LENGTH_LIMIT} characters"),
        );
        json_response(
            422,
            &apiextensions::invalid_status("", "Event", name, &[error]),
        )
    })
}

/// `422 Invalid` for a write that would change `metadata.uid`, as kube-apiserver 1.36.2
/// answers it (`tests/fixtures/apiserver/pod-status-patch-uid-mismatch.json`: the cause
/// is listed twice there too).
fn uid_immutable(target: &Target, name: &str, wanted: &str) -> Response {
    let error = apiextensions::FieldError::invalid(
        "metadata.uid",
        Some(format!("{wanted:?}")),
        "field is immutable",
    );
    invalid(target, name, &[error.clone(), error])
}

/// `DELETE`: a UID precondition is checked; an object with finalizers is only marked
/// (`deletionTimestamp`) until they are removed; a pod bound to a node with a grace
/// period is only marked, as the real server does until the kubelet confirms (no kubelet
/// runs here: [`crate::FakeApiServer::finish_termination`] plays its part). Whatever the
/// deleted object owned goes with it.
pub(crate) fn delete(shared: &Shared, target: &Target, name: &str, body: &Value) -> Response {
    let mut store = shared.store.lock().unwrap();
    let key = key(target, name);
    let Some(object) = store.objects.get(&key).cloned() else {
        return not_found(target, name);
    };
    let uid = object["metadata"]["uid"].as_str().unwrap_or("").to_owned();
    if let Some(wanted) = body["preconditions"]["uid"].as_str()
        && wanted != uid
    {
        let plural = plural(target);
        return status(
            409,
            "Conflict",
            &format!(
                "Operation cannot be fulfilled on {plural} \"{name}\": Precondition failed: UID in precondition: {wanted}, UID in object meta: {uid}"
            ),
            name,
            plural,
        );
    }
    let version = object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    if let Some(wanted) = body["preconditions"]["resourceVersion"].as_str()
        && wanted != version
    {
        let plural = plural(target);
        return status(
            409,
            "Conflict",
            &format!(
                "Operation cannot be fulfilled on {plural} \"{name}\": Precondition failed: ResourceVersion in precondition: {wanted}, ResourceVersion in object meta: {version}"
            ),
            name,
            plural,
        );
    }
    let bound = object["spec"]["nodeName"]
        .as_str()
        .is_some_and(|n| !n.is_empty());
    let grace = body["gracePeriodSeconds"]
        .as_i64()
        .or_else(|| object["spec"]["terminationGracePeriodSeconds"].as_i64())
        .unwrap_or(30);
    if target.resource == "pods" && bound && grace > 0 {
        if lifecycle::deleting(&object) {
            return json_response(200, &object);
        }
        let mut terminating = object;
        terminating["metadata"]["deletionTimestamp"] = json!(now());
        terminating["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
        let stored = store
            .write(key, Some(terminating), &shared.changes)
            .unwrap();
        return json_response(200, &stored);
    }
    if lifecycle::has_finalizers(&object) {
        if lifecycle::deleting(&object) {
            return json_response(200, &object);
        }
        let mut marked = object;
        lifecycle::mark_deleted(&mut marked, &now());
        let stored = store.write(key, Some(marked), &shared.changes).unwrap();
        return json_response(200, &stored);
    }
    store.remove(key, &shared.changes);
    json_response(200, &object)
}
