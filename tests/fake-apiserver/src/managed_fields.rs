//! Field ownership (`metadata.managedFields`) and server-side apply, as the real server
//! does them for one object at a time, approximated where multiarch's tests do not look:
//! a field is a path of map keys and every list is one atomic field (the real server
//! merges some lists by key). What the recorded exchanges show holds: an apply creates
//! the object and records its manager; the same apply again changes nothing (same
//! `resourceVersion`, same `managedFields`); another manager's apply of a field someone
//! else owns with a different value is a 409 naming the owner and the field, unless
//! `force=true`, which moves the field to it; fields a manager stops applying are removed
//! unless another manager owns them. Create, update and merge patches (operation
//! `Update`) take ownership of what they change, without conflicts.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

/// A field: the map keys from the object's root.
pub type Path = Vec<String>;

/// Fields no manager owns: identity, bookkeeping, and the server's own.
fn untracked(path: &[String]) -> bool {
    matches!(
        path.first().map(String::as_str),
        Some("apiVersion" | "kind")
    ) || (path.first().map(String::as_str) == Some("metadata")
        && matches!(
            path.get(1).map(String::as_str),
            Some(
                "name"
                    | "namespace"
                    | "uid"
                    | "resourceVersion"
                    | "generation"
                    | "creationTimestamp"
                    | "deletionTimestamp"
                    | "deletionGracePeriodSeconds"
                    | "managedFields"
                    | "selfLink"
            )
        ))
}

/// Every owned field of `value` (objects are walked, anything else is a field), within
/// `scope` (`status` for the status subresource, everything else otherwise).
pub fn fields(value: &Value, scope: Scope) -> BTreeSet<Path> {
    let mut out = BTreeSet::new();
    walk(value, &mut Vec::new(), &mut out);
    out.retain(|p| !untracked(p) && scope.contains(p));
    out
}

fn walk(value: &Value, at: &mut Path, out: &mut BTreeSet<Path>) {
    match value {
        Value::Object(map) if !map.is_empty() || at.is_empty() => {
            for (k, v) in map {
                at.push(k.clone());
                walk(v, at, out);
                at.pop();
            }
        }
        _ => {
            out.insert(at.clone());
        }
    }
}

/// Which part of an object a request writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The object but its status.
    Main,
    /// `status` only (the `/status` subresource).
    Status,
}

impl Scope {
    fn contains(self, path: &[String]) -> bool {
        let status = path.first().map(String::as_str) == Some("status");
        match self {
            Scope::Main => !status,
            Scope::Status => status,
        }
    }
}

fn get<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, k| v.get(k))
}

fn set(value: &mut Value, path: &[String], new: Value) {
    let mut at = value;
    for key in &path[..path.len().saturating_sub(1)] {
        if !at.get(key).is_some_and(Value::is_object) {
            at[key.as_str()] = json!({});
        }
        at = &mut at[key.as_str()];
    }
    if let Some(last) = path.last() {
        at[last.as_str()] = new;
    }
}

/// Removes the field, and the maps it leaves empty.
fn remove(value: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let Some(parent) = parents
        .iter()
        .try_fold(&mut *value, |v, k| v.get_mut(k.as_str()))
    else {
        return;
    };
    if let Some(map) = parent.as_object_mut() {
        map.remove(last);
        if map.is_empty() && !parents.is_empty() {
            remove(value, parents);
        }
    }
}

/// One entry of `metadata.managedFields`.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    pub api_version: String,
    pub time: String,
    /// The `subresource` the entry was written through (`status`), if any.
    pub subresource: Option<String>,
    pub fields: BTreeSet<Path>,
}

impl Entry {
    fn to_value(&self) -> Value {
        let mut entry = json!({
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": encode(&self.fields),
        });
        if let Some(sub) = &self.subresource {
            entry["subresource"] = json!(sub);
        }
        entry
    }
}

/// `FieldsV1`: nested maps of `f:<key>`, `{}` at each owned field.
fn encode(fields: &BTreeSet<Path>) -> Value {
    let mut root = Map::new();
    for path in fields {
        let mut at = &mut root;
        for key in path {
            let next = at
                .entry(format!("f:{key}"))
                .or_insert_with(|| Value::Object(Map::new()));
            at = match next {
                Value::Object(map) => map,
                _ => break,
            };
        }
    }
    Value::Object(root)
}

fn decode(fields: &Value, at: &mut Path, out: &mut BTreeSet<Path>) {
    let Some(map) = fields.as_object() else {
        return;
    };
    let children: Vec<(&String, &Value)> =
        map.iter().filter(|(k, _)| k.starts_with("f:")).collect();
    if children.is_empty() && !at.is_empty() {
        out.insert(at.clone());
        return;
    }
    for (k, v) in children {
        at.push(k[2..].to_owned());
        decode(v, at, out);
        at.pop();
    }
}

/// The entries of an object's `metadata.managedFields`.
pub fn entries(object: &Value) -> Vec<Entry> {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let mut fields = BTreeSet::new();
            decode(&e["fieldsV1"], &mut Vec::new(), &mut fields);
            Entry {
                manager: e["manager"].as_str().unwrap_or("").to_owned(),
                operation: e["operation"].as_str().unwrap_or("Update").to_owned(),
                api_version: e["apiVersion"].as_str().unwrap_or("").to_owned(),
                time: e["time"].as_str().unwrap_or("").to_owned(),
                subresource: e["subresource"].as_str().map(str::to_owned),
                fields,
            }
        })
        .collect()
}

fn store(object: &mut Value, entries: &[Entry]) {
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(Entry::to_value)
        .collect();
    if list.is_empty() {
        if let Some(meta) = object["metadata"].as_object_mut() {
            meta.remove("managedFields");
        }
    } else {
        object["metadata"]["managedFields"] = Value::Array(list);
    }
}

/// Who writes, and how.
#[derive(Clone, Debug)]
pub struct Writer {
    pub manager: String,
    pub api_version: String,
    pub scope: Scope,
    pub now: String,
}

impl Writer {
    fn subresource(&self) -> Option<String> {
        (self.scope == Scope::Status).then(|| "status".to_owned())
    }
}

/// A server-side apply refused for fields other managers own.
#[derive(Debug)]
pub struct Conflicts(pub Vec<(String, String)>);

impl Conflicts {
    /// The 409 body, in the recorded words.
    pub fn status(&self) -> Value {
        let causes: Vec<Value> = self
            .0
            .iter()
            .map(|(manager, field)| json!({"reason": "FieldManagerConflict", "message": format!("conflict with {manager:?}"), "field": field}))
            .collect();
        let listed: Vec<String> = self
            .0
            .iter()
            .map(|(manager, field)| format!("conflict with {manager:?}: {field}"))
            .collect();
        let count = self.0.len();
        let noun = if count == 1 { "conflict" } else { "conflicts" };
        let message = if count == 1 {
            format!("Apply failed with 1 conflict: {}", listed[0])
        } else {
            format!("Apply failed with {count} {noun}: {}", listed.join("\n"))
        };
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": message, "reason": "Conflict", "details": {"causes": causes}, "code": 409})
    }
}

/// `.a.b` as the real server names a field in conflicts.
fn dotted(path: &[String]) -> String {
    path.iter().map(|k| format!(".{k}")).collect()
}

/// The object after `writer` applies `applied` to `existing` (an empty skeleton for a
/// create), with ownership updated, or the conflicts.
pub fn apply(
    existing: &Value,
    applied: &Value,
    writer: &Writer,
    force: bool,
) -> Result<Value, Conflicts> {
    let wanted = fields(applied, writer.scope);
    let mut entries = entries(existing);
    let mut conflicts = Vec::new();
    for entry in &entries {
        if entry.manager == writer.manager && entry.operation == "Apply" {
            continue;
        }
        for path in entry.fields.intersection(&wanted) {
            if get(existing, path) != get(applied, path) {
                conflicts.push((entry.manager.clone(), dotted(path)));
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(Conflicts(conflicts));
    }
    let mut result = existing.clone();
    let own = entries
        .iter()
        .position(|e| e.manager == writer.manager && e.operation == "Apply");
    let previously: BTreeSet<Path> = own.map(|i| entries[i].fields.clone()).unwrap_or_default();
    for path in previously.difference(&wanted) {
        let shared = entries.iter().any(|e| {
            !(e.manager == writer.manager && e.operation == "Apply") && e.fields.contains(path)
        });
        if !shared {
            remove(&mut result, path);
        }
    }
    for path in &wanted {
        if let Some(value) = get(applied, path) {
            set(&mut result, path, value.clone());
        }
    }
    if force {
        for entry in &mut entries {
            if !(entry.manager == writer.manager && entry.operation == "Apply") {
                entry
                    .fields
                    .retain(|p| !wanted.contains(p) || get(existing, p) == get(applied, p));
            }
        }
    }
    let changed = result != *existing || previously != wanted;
    match own {
        Some(i) => {
            if changed {
                entries[i].time = writer.now.clone();
                entries[i].api_version = writer.api_version.clone();
            }
            entries[i].fields = wanted;
        }
        None => entries.push(Entry {
            manager: writer.manager.clone(),
            operation: "Apply".into(),
            api_version: writer.api_version.clone(),
            time: writer.now.clone(),
            subresource: writer.subresource(),
            fields: wanted,
        }),
    }
    store(&mut result, &entries);
    Ok(result)
}

/// Records that `writer` changed `old` into `new` by a create, update or non-apply
/// patch: it owns the fields it changed, and nobody else does any more.
pub fn record_update(old: Option<&Value>, new: &mut Value, writer: &Writer) {
    let after = fields(new, writer.scope);
    let changed: BTreeSet<Path> = after
        .iter()
        .filter(|p| old.is_none_or(|o| get(o, p) != get(new, p)))
        .cloned()
        .collect();
    let mut entries = old.map(entries).unwrap_or_default();
    for entry in &mut entries {
        // Fields that no longer exist are owned by nobody.
        entry.fields.retain(|p| get(new, p).is_some());
        if entry.manager != writer.manager || entry.operation != "Update" {
            entry.fields.retain(|p| !changed.contains(p));
        }
    }
    if !changed.is_empty() {
        match entries
            .iter_mut()
            .find(|e| e.manager == writer.manager && e.operation == "Update")
        {
            Some(entry) => {
                entry.fields.extend(changed);
                entry.time = writer.now.clone();
            }
            None => entries.push(Entry {
                manager: writer.manager.clone(),
                operation: "Update".into(),
                api_version: writer.api_version.clone(),
                time: writer.now.clone(),
                subresource: writer.subresource(),
                fields: changed,
            }),
        }
    }
    store(new, &entries);
}

/// Two objects equal but for what the server writes on every change.
pub fn same_content(a: &Value, b: &Value) -> bool {
    fn strip(v: &Value) -> Value {
        let mut v = v.clone();
        if let Some(meta) = v["metadata"].as_object_mut() {
            meta.remove("resourceVersion");
            meta.remove("managedFields");
            meta.remove("generation");
        }
        v
    }
    strip(a) == strip(b)
}

/// The managers of an object, for tests: manager → operation.
pub fn managers(object: &Value) -> BTreeMap<String, String> {
    entries(object)
        .into_iter()
        .map(|e| (e.manager, e.operation))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(manager: &str) -> Writer {
        Writer {
            manager: manager.into(),
            api_version: "v1".into(),
            scope: Scope::Main,
            now: "2026-11-23T06:28:23Z".into(),
        }
    }

    #[test]
    fn apply_owns_conflicts_and_forces() {
        let skeleton = json!({"metadata": {"name": "demo"}});
        let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "demo"}, "data": {"a": "1"}});
        let created = apply(&skeleton, &applied, &writer("op"), false).unwrap();
        assert_eq!(created["data"]["a"], "1");
        assert_eq!(
            created["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:data": {"f:a": {}}})
        );
        let again = apply(&created, &applied, &writer("op"), false).unwrap();
        assert_eq!(again, created, "the same apply changes nothing");

        let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "demo"}, "data": {"a": "2"}});
        let conflict = apply(&created, &other, &writer("someone-else"), false).unwrap_err();
        assert_eq!(
            conflict.status()["message"],
            "Apply failed with 1 conflict: conflict with \"op\": .data.a"
        );
        let forced = apply(&created, &other, &writer("someone-else"), true).unwrap();
        assert_eq!(forced["data"]["a"], "2");
        assert_eq!(managers(&forced).len(), 1, "{forced}");
        assert_eq!(
            forced["metadata"]["managedFields"][0]["manager"],
            "someone-else"
        );
    }

    #[test]
    fn fields_no_longer_applied_are_removed_unless_shared() {
        let skeleton = json!({"metadata": {"name": "demo"}});
        let both = json!({"metadata": {"name": "demo", "labels": {"a": "1", "b": "2"}}});
        let created = apply(&skeleton, &both, &writer("op"), false).unwrap();
        let only_a = json!({"metadata": {"name": "demo", "labels": {"a": "1"}}});
        let after = apply(&created, &only_a, &writer("op"), false).unwrap();
        assert_eq!(after["metadata"]["labels"], json!({"a": "1"}));

        // Someone else also sets b: it survives the operator dropping it.
        let mut shared = created.clone();
        let old = shared.clone();
        shared["metadata"]["labels"]["c"] = json!("3");
        record_update(Some(&old), &mut shared, &writer("kubectl"));
        let mut b_too = shared.clone();
        let before = b_too.clone();
        b_too["metadata"]["labels"]["b"] = json!("9");
        record_update(Some(&before), &mut b_too, &writer("kubectl"));
        let after = apply(&b_too, &only_a, &writer("op"), false).unwrap();
        assert_eq!(
            after["metadata"]["labels"],
            json!({"a": "1", "b": "9", "c": "3"})
        );
    }
}
