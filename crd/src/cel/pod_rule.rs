//! The checks a `celArchitecturePlacement` rule's expression passes before the operator's
//! webhook admits it, which the API server cannot make itself (CEL inside a CEL string):
//! it parses, reads only the pod's metadata, type-checks to a bool and stays within the
//! cost budget of one evaluation. The evaluation binds `self` to exactly what is declared
//! here, so a rule that passes reads nothing else.

use std::{
    collections::BTreeSet,
    sync::{Arc, LazyLock},
};

use kube_cel::cel::{
    Program,
    common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue, MapExpr, StructExpr, operators},
};
use serde_json::json;

use super::{
    check::{CelType, CheckError, check},
    cost::estimate,
    decl::{Decl, DeclKind},
    patterns::{CompiledPatterns, compile_patterns},
};

/// The metadata fields a rule may read.
pub const READABLE_FIELDS: [&str; 4] = ["name", "namespace", "labels", "annotations"];

/// The API server's budget for one CEL evaluation (`PerCallLimit`): no rule may be
/// estimated above it.
pub const RULE_COST_LIMIT: u64 = 1_000_000;
/// The budget of one config's rules together (`StaticEstimatedCostLimit`): what one pod's
/// evaluation may cost at most when no rule matches.
pub const CONFIG_COST_LIMIT: u64 = 10_000_000;

/// What `self` is to a rule: the pod's name, namespace, labels and annotations, with the
/// sizes the API server allows them (names 253 and 63 characters, label values 63,
/// annotations 256 KiB together).
static POD_METADATA: LazyLock<Arc<Decl>> = LazyLock::new(|| {
    let schema = json!({
        "type": "object",
        "properties": {"metadata": {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 253},
            "namespace": {"type": "string", "maxLength": 63},
            "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 63}},
            "annotations": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 262_144}},
        }}},
    });
    // The schema above always declares: an object of strings and maps of strings.
    let mut decl = Decl::of(&schema, false).unwrap_or_else(|| unreachable!("a declared schema"));
    // A CRD's CEL escapes `namespace` (a CEL reserved word) as `__namespace__`; a rule
    // sees the pod as admission policies do, where it is `namespace`.
    if let DeclKind::Object(fields) = &mut decl.kind
        && let Some(metadata) = fields.get_mut("metadata")
    {
        let mut inner = (**metadata).clone();
        if let DeclKind::Object(meta) = &mut inner.kind
            && let Some(namespace) = meta.remove("__namespace__")
        {
            meta.insert("namespace".to_owned(), namespace);
        }
        *metadata = Arc::new(inner);
    }
    Arc::new(decl)
});

/// A rule that passed: its estimated cost of one evaluation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckedRule {
    pub cost: u64,
}

/// Checks one expression. The error reads as the API server's CEL errors do
/// (`ERROR: <input>:line:column: ...`), with the place of the problem where it has one.
pub fn check_rule(expression: &str) -> Result<CheckedRule, String> {
    check_and_compile(expression).map(|(checked, _)| checked)
}

/// [`check_rule`], and the rule's `matches()` patterns compiled, for evaluating it.
pub fn check_and_compile(expression: &str) -> Result<(CheckedRule, CompiledPatterns), String> {
    let program = Program::compile(expression).map_err(|e| e.to_string())?;
    let expr = program.expression();
    if let Err(outside) = metadata_reads(expr) {
        return Err(format!(
            "ERROR: <input>:{}: {outside}: a rule may read only self.metadata.name, self.metadata.namespace, self.metadata.labels and self.metadata.annotations",
            position(expression, &outside)
        ));
    }
    let checked = check(expr, &POD_METADATA).map_err(|errors| {
        errors
            .iter()
            .map(|e| match e {
                CheckError::Invalid(message) => {
                    format!("ERROR: <input>:{}: {message}", position(expression, message))
                }
                CheckError::Unmodelled(function) => format!(
                    "ERROR: <input>:{}: function '{function}' is not available to architecture rules",
                    position(expression, function)
                ),
            })
            .collect::<Vec<_>>()
            .join("\n")
    })?;
    if checked.uses_old_self {
        return Err(format!(
            "ERROR: <input>:{}: oldSelf is not available to architecture rules: a rule sees one pod",
            position(expression, "oldSelf")
        ));
    }
    if checked.result != CelType::Bool && !checked.result.is_dyn() {
        return Err(format!(
            "ERROR: <input>:1:1: the expression must return a bool, not {}",
            checked.result
        ));
    }
    // Each pattern compiled once, now: evaluation matches with what this compiles (and
    // the compilation is charged).
    let mut patterns = CompiledPatterns::new();
    let compile_cost = compile_patterns(expr, &mut patterns)
        .map_err(|e| format!("ERROR: <input>:{}: {e}", position(expression, "matches")))?;
    let cost = estimate(expr, &checked, &POD_METADATA)
        .cost
        .max
        .saturating_add(compile_cost);
    if cost > RULE_COST_LIMIT {
        return Err(format!(
            "ERROR: <input>:1:1: the estimated cost of one evaluation, {cost}, is over the limit of {RULE_COST_LIMIT}: look labels and annotations up by key instead of iterating over them"
        ));
    }
    Ok((CheckedRule { cost }, patterns))
}

/// What rules read of one of the pod's metadata maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MapReads {
    /// Only these keys, each looked up by a constant (`'k' in m`, `m['k']`, `m.k`,
    /// `has(m.k)`).
    Keys(BTreeSet<String>),
    /// The map as a whole (iterated, compared, indexed by a computed key...).
    Whole,
}

/// What rules read of the pod: what a decision depends on, so that a caller can cache
/// decisions by exactly that.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetadataReads {
    pub name: bool,
    pub namespace: bool,
    pub labels: Option<MapReads>,
    pub annotations: Option<MapReads>,
}

impl MetadataReads {
    /// What `self` and `other` read together.
    pub fn merge(&mut self, other: MetadataReads) {
        self.name |= other.name;
        self.namespace |= other.namespace;
        merge_map(&mut self.labels, other.labels);
        merge_map(&mut self.annotations, other.annotations);
    }

    fn map(&mut self, field: &str) -> &mut Option<MapReads> {
        if field == "labels" {
            &mut self.labels
        } else {
            &mut self.annotations
        }
    }

    fn key(&mut self, field: &str, key: &str) {
        let map = self.map(field);
        match map {
            Some(MapReads::Whole) => {}
            Some(MapReads::Keys(keys)) => {
                keys.insert(key.to_owned());
            }
            None => *map = Some(MapReads::Keys(BTreeSet::from([key.to_owned()]))),
        }
    }
}

fn merge_map(into: &mut Option<MapReads>, other: Option<MapReads>) {
    *into = match (into.take(), other) {
        (None, other) | (other, None) => other,
        (Some(MapReads::Keys(mut a)), Some(MapReads::Keys(b))) => {
            a.extend(b);
            Some(MapReads::Keys(a))
        }
        _ => Some(MapReads::Whole),
    };
}

/// What an expression reads of the pod's metadata, or the first place it uses `self`
/// other than as `self.metadata.<readable field>`, as the text of that use.
pub fn metadata_reads(expr: &IdedExpr) -> Result<MetadataReads, String> {
    let mut reads = MetadataReads::default();
    collect_reads(expr, &mut reads)?;
    Ok(reads)
}

/// `self.metadata.labels` or `self.metadata.annotations`: which.
fn metadata_map(e: &IdedExpr) -> Option<&'static str> {
    match &e.expr {
        Expr::Select(select) if !select.test && is_self_metadata(&select.operand) => {
            ["labels", "annotations"]
                .into_iter()
                .find(|f| *f == select.field)
        }
        _ => None,
    }
}

fn is_self_metadata(e: &IdedExpr) -> bool {
    matches!(&e.expr, Expr::Select(inner) if is_self(&inner.operand) && inner.field == "metadata" && !inner.test)
}

fn string_literal(e: &IdedExpr) -> Option<&str> {
    match &e.expr {
        Expr::Literal(LiteralValue::String(s)) => Some(s.inner()),
        _ => None,
    }
}

fn collect_reads(e: &IdedExpr, reads: &mut MetadataReads) -> Result<(), String> {
    // A map's key looked up by a constant: only that key matters.
    match &e.expr {
        Expr::Call(call) if call.func_name == operators::IN && call.args.len() == 2 => {
            if let (Some(key), Some(map)) =
                (string_literal(&call.args[0]), metadata_map(&call.args[1]))
            {
                reads.key(map, key);
                return Ok(());
            }
        }
        Expr::Call(call) if call.func_name == operators::INDEX && call.args.len() == 2 => {
            if let (Some(map), Some(key)) =
                (metadata_map(&call.args[0]), string_literal(&call.args[1]))
            {
                reads.key(map, key);
                return Ok(());
            }
        }
        Expr::Select(select) => {
            if let Some(map) = metadata_map(&select.operand) {
                reads.key(map, &select.field);
                return Ok(());
            }
        }
        _ => {}
    }
    let children: Vec<&IdedExpr> = match &e.expr {
        Expr::Select(select) => {
            if is_self_metadata(&select.operand) {
                return match select.field.as_str() {
                    "name" => {
                        reads.name = true;
                        Ok(())
                    }
                    "namespace" => {
                        reads.namespace = true;
                        Ok(())
                    }
                    field @ ("labels" | "annotations") => {
                        *reads.map(field) = Some(MapReads::Whole);
                        Ok(())
                    }
                    other => Err(format!("self.metadata.{other}")),
                };
            }
            if is_self(&select.operand) {
                return Err(format!("self.{}", select.field));
            }
            vec![&select.operand]
        }
        Expr::Ident(name) if name == "self" => return Err("self".to_owned()),
        Expr::Call(call) => call
            .target
            .iter()
            .map(|t| t.as_ref())
            .chain(&call.args)
            .collect(),
        Expr::Comprehension(c) => vec![
            &c.iter_range,
            &c.accu_init,
            &c.loop_cond,
            &c.loop_step,
            &c.result,
        ],
        Expr::List(list) => list.elements.iter().collect(),
        Expr::Map(MapExpr { entries }) | Expr::Struct(StructExpr { entries, .. }) => entries
            .iter()
            .flat_map(|entry| match &entry.expr {
                EntryExpr::MapEntry(m) => vec![&m.key, &m.value],
                EntryExpr::StructField(f) => vec![&f.value],
            })
            .collect(),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => Vec::new(),
    };
    children
        .into_iter()
        .try_for_each(|child| collect_reads(child, reads))
}

fn is_self(e: &IdedExpr) -> bool {
    matches!(&e.expr, Expr::Ident(name) if name == "self")
}

/// `line:column` (from 1) of the first quoted name in `message` (or of `message` itself)
/// in the source; 1:1 when it is not found. The checker reports no positions, so the
/// problem's own words locate it.
fn position(source: &str, message: &str) -> String {
    let needle = message
        .split('\'')
        .nth(1)
        .filter(|n| !n.is_empty())
        .unwrap_or(message);
    let needle = needle.strip_prefix("self.").map_or(needle, |rest| {
        // `self.spec`: point at the field, which is where `self` went wrong.
        rest.rsplit('.').next().unwrap_or(rest)
    });
    let Some(offset) = source.find(needle) else {
        return "1:1".to_owned();
    };
    let before = &source[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!("{line}:{column}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_rules_pass_with_their_cost() {
        for rule in [
            "self.metadata.labels['app'] == 'db'",
            "'tier' in self.metadata.labels && self.metadata.labels['tier'] == 'db'",
            "self.metadata.name.startsWith('redis-')",
            "has(self.metadata.annotations.team) && self.metadata.namespace == 'shop'",
            "self.metadata.name.matches('^db-[0-9]+$') || self.metadata.labels.app in ['a', 'b']",
            "self.metadata.labels['app'].lowerAscii() == 'db'",
        ] {
            let checked = check_rule(rule).unwrap_or_else(|e| panic!("{rule}: {e}"));
            assert!(
                checked.cost > 0 && checked.cost <= RULE_COST_LIMIT,
                "{rule}"
            );
        }
    }

    #[test]
    fn anything_beyond_the_metadata_is_refused_with_its_place() {
        for (rule, says) in [
            ("self.spec.nodeName == ''", "<input>:1:6: self.spec"),
            ("self['spec'] == {}", "<input>:1:1: self:"),
            ("self.all(k, k == 'spec')", "<input>:1:1: self:"),
            ("has(self.status)", "<input>:1:10: self.status"),
            (
                "self.metadata.ownerReferences.size() > 0",
                "<input>:1:15: self.metadata.ownerReferences",
            ),
            ("self.metadata['labels'].size() > 0", "self.metadata"),
            ("[self][0].spec == null", "self:"),
            ("self.metadata.labels.exists(self, self == 'x')", "self:"),
            (
                "\n  self.status.phase == 'Running'",
                "<input>:2:8: self.status",
            ),
        ] {
            let error = check_rule(rule).expect_err(rule);
            assert!(error.contains(says), "{rule}: {error}");
            assert!(
                error.contains("may read only self.metadata.name"),
                "{rule}: {error}"
            );
        }
    }

    #[test]
    fn what_a_rule_reads_is_known_down_to_the_keys() {
        let reads = |rule: &str| metadata_reads(Program::compile(rule).unwrap().expression());
        let keys = |k: &[&str]| Some(MapReads::Keys(k.iter().map(|s| (*s).to_owned()).collect()));
        let read = reads(
            "'a' in self.metadata.labels && self.metadata.labels['a'] == 'b' && self.metadata.labels.c == 'd' && has(self.metadata.annotations.e)",
        )
        .unwrap();
        assert_eq!(read.labels, keys(&["a", "c"]));
        assert_eq!(read.annotations, keys(&["e"]));
        assert!(!read.name && !read.namespace);
        let read =
            reads("self.metadata.name.startsWith('x') || self.metadata.labels.exists(k, k == 'y')")
                .unwrap();
        assert!(read.name);
        assert_eq!(read.labels, Some(MapReads::Whole));
        assert_eq!(read.annotations, None);
        // A key computed from the pod is not a constant: the whole map.
        let read = reads("self.metadata.labels[self.metadata.name] == 'x'").unwrap();
        assert_eq!(read.labels, Some(MapReads::Whole));
        assert_eq!(reads("true").unwrap(), MetadataReads::default());
        assert_eq!(reads("self.spec == null"), Err("self.spec".to_owned()));
        let mut merged = reads("'a' in self.metadata.labels").unwrap();
        merged.merge(reads("self.metadata.labels['b'] == 'x'").unwrap());
        assert_eq!(merged.labels, keys(&["a", "b"]));
        merged.merge(reads("size(self.metadata.labels) > 2").unwrap());
        assert_eq!(merged.labels, Some(MapReads::Whole));
    }

    #[test]
    fn syntax_type_and_unknown_names_are_refused_with_their_place() {
        let syntax = check_rule("self.metadata.name ==").expect_err("syntax");
        assert!(syntax.starts_with("ERROR: <input>:1:"), "{syntax}");
        let not_bool = check_rule("self.metadata.name").expect_err("string");
        assert_eq!(
            not_bool,
            "ERROR: <input>:1:1: the expression must return a bool, not string"
        );
        let unknown = check_rule("pod.metadata.name == 'x'").expect_err("unknown");
        assert!(
            unknown.starts_with("ERROR: <input>:1:1: undeclared reference to 'pod'"),
            "{unknown}"
        );
        let field = check_rule("self.metadata.labels.app == 1").expect_err("type");
        assert!(field.starts_with("ERROR: <input>:"), "{field}");
        let old = check_rule("oldSelf.metadata.name == 'x'").expect_err("oldSelf");
        assert!(old.contains("oldSelf"), "{old}");
    }

    #[test]
    fn rules_that_iterate_the_annotations_cost_too_much() {
        let error = check_rule(
            "self.metadata.annotations.exists(k, self.metadata.annotations[k].matches('x.*y'))",
        )
        .expect_err("costly");
        assert!(error.contains("estimated cost"), "{error}");
    }
}
