//! The API server's static cost estimate of a CEL expression: cel-go's `checker/cost.go`
//! with the size estimator of the CRD validator (`apiextensions-apiserver`: sizes of
//! schema values from `decl.rs`) and the Kubernetes library's costs for the functions
//! `check.rs` models. Kubernetes configures presence tests (`has()`) to cost nothing.
//!
//! Ported construct by construct, with cel-go's saturating arithmetic, so that an
//! expression the API server estimates as unbounded is unbounded here too: a string whose
//! size the estimator cannot know (`string()` of a number) makes every concatenation with
//! it cost about 1.8e18.
//!
//! Beside the cost, the estimator records where a rule depends on a size the schema does
//! not bound ([`Reach`]): multiarch's stricter policy, which refuses those before their cost
//! grows past a budget.

use std::{collections::HashMap, sync::Arc};

use kube_cel::cel::common::ast::{CallExpr, ComprehensionExpr, Expr, IdedExpr, LiteralValue};

use super::{
    check::{CelType, Checked},
    decl::{Bound, Decl, DeclKind},
};

const STRING_TRAVERSAL_COST_FACTOR: f64 = 0.1;
const REGEX_STRING_LENGTH_COST_FACTOR: f64 = 0.25;
const LIST_CREATE_BASE_COST: u64 = 10;
const MAP_CREATE_BASE_COST: u64 = 30;

mod range;
pub use range::Range;

/// The sizes of a container's keys (or indices) and values, when CEL can tell.
#[derive(Clone, Copy, Debug)]
struct EntrySize {
    list: bool,
    key: Range,
    value: Range,
}

impl EntrySize {
    fn union(self, other: EntrySize) -> EntrySize {
        EntrySize {
            list: self.list,
            key: self.key.union(other.key),
            value: self.value.union(other.value),
        }
    }
}

#[derive(Clone, Debug)]
struct LocalVar {
    path: Vec<String>,
    size: Option<Range>,
    entry: Option<EntrySize>,
}

/// A place where a rule depends on a size the schema does not bound.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reach {
    /// A string, list or map of the schema with no `maxLength`, `maxItems` or
    /// `maxProperties`: the API server assumes it may fill a 3 MiB request.
    Unbounded(String),
    /// A computed value whose size the API server cannot estimate at all, such as
    /// `string()` of a number.
    UnknownSize(String),
}

/// The estimate of one expression.
#[derive(Debug)]
pub struct Estimate {
    pub cost: Range,
    pub reach: Vec<Reach>,
}

/// Estimates `expr` (type-checked as `checked`) as the API server does for a rule declared
/// on the schema node `root`.
pub fn estimate(expr: &IdedExpr, checked: &Checked, root: &Arc<Decl>) -> Estimate {
    let mut coster = Coster {
        checked,
        root: root.clone(),
        paths: HashMap::new(),
        locals: HashMap::new(),
        sizes: HashMap::new(),
        entries: HashMap::new(),
        reach: Vec::new(),
    };
    let cost = coster.cost(expr);
    let mut reach = coster.reach;
    reach.sort();
    reach.dedup();
    Estimate { cost, reach }
}

struct Coster<'a> {
    checked: &'a Checked,
    root: Arc<Decl>,
    paths: HashMap<u64, Vec<String>>,
    locals: HashMap<String, Vec<LocalVar>>,
    sizes: HashMap<u64, Range>,
    entries: HashMap<u64, EntrySize>,
    reach: Vec<Reach>,
}

impl Coster<'_> {
    fn cost(&mut self, e: &IdedExpr) -> Range {
        match &e.expr {
            Expr::Literal(_) | Expr::Unspecified | Expr::Struct(_) => Range::fixed(0),
            Expr::Ident(name) => {
                let path = match self.local(name) {
                    Some(v) => v.path.clone(),
                    None => vec![name.clone()],
                };
                self.add_path(e, path);
                Range::fixed(1)
            }
            Expr::Select(select) => {
                let operand_cost = self.cost(&select.operand);
                let mut path = self.path(&select.operand);
                path.push(select.field.clone());
                self.add_path(e, path);
                if select.test {
                    // Kubernetes: checker.PresenceTestHasCost(false).
                    return operand_cost;
                }
                match self.checked.types.get(&select.operand.id) {
                    Some(CelType::Map(..) | CelType::Object(_)) => {
                        operand_cost.add(Range::fixed(1))
                    }
                    _ => operand_cost,
                }
            }
            Expr::List(list) => {
                let mut sum = Range::fixed(0);
                let mut item = if list.elements.is_empty() {
                    Range::fixed(0)
                } else {
                    Range {
                        min: u64::MAX,
                        max: 0,
                    }
                };
                for element in &list.elements {
                    sum = sum.add(self.cost(element));
                    item = item.union(self.size_or_unknown(element));
                }
                self.entries.insert(
                    e.id,
                    EntrySize {
                        list: true,
                        key: Range::fixed(1),
                        value: item,
                    },
                );
                sum.add(Range::fixed(LIST_CREATE_BASE_COST))
            }
            Expr::Map(map) => {
                let mut sum = Range::fixed(0);
                for entry in &map.entries {
                    if let kube_cel::cel::common::ast::EntryExpr::MapEntry(entry) = &entry.expr {
                        sum = sum.add(self.cost(&entry.key)).add(self.cost(&entry.value));
                    }
                }
                sum.add(Range::fixed(MAP_CREATE_BASE_COST))
            }
            Expr::Comprehension(c) => self.comprehension(e, c),
            Expr::Call(call) => self.call(e, call),
        }
    }

    fn comprehension(&mut self, e: &IdedExpr, c: &ComprehensionExpr) -> Range {
        let mut sum = self.cost(&c.iter_range).add(self.cost(&c.accu_init));
        let accumulator = LocalVar {
            path: self.path(&c.accu_init),
            size: self.compute_size(&c.accu_init),
            entry: self.entry(&c.accu_init),
        };
        self.push(&c.accu_var, accumulator);
        let entry = self.entry(&c.iter_range);
        let is_list = match entry {
            Some(entry) => entry.list,
            None => !matches!(
                self.checked.types.get(&c.iter_range.id),
                Some(CelType::Map(..))
            ),
        };
        let mut path = self.path(&c.iter_range);
        path.push(if is_list { "@items" } else { "@keys" }.into());
        let size = entry.map(|entry| if is_list { entry.value } else { entry.key });
        self.push(
            &c.iter_var,
            LocalVar {
                path,
                size,
                entry: None,
            },
        );
        let loop_cost = self.cost(&c.loop_cond);
        let step_cost = self.cost(&c.loop_step);
        self.pop(&c.iter_var);
        sum = sum.add(self.cost(&c.result));
        self.pop(&c.accu_var);
        let range_count = self.size_or_unknown(&c.iter_range);
        sum = sum.add(range_count.multiply(step_cost.add(loop_cost)));
        match &c.accu_init.expr {
            Expr::Literal(_) => {
                if let Some(size) = self.compute_size(&c.accu_init) {
                    self.sizes.insert(e.id, size);
                }
            }
            Expr::List(_) | Expr::Map(_) => {
                self.sizes.insert(e.id, range_count);
                if let Some(step_entry) = self.entry(&c.loop_step) {
                    self.entries.insert(e.id, step_entry);
                }
            }
            _ => {}
        }
        sum
    }

    fn call(&mut self, e: &IdedExpr, call: &CallExpr) -> Range {
        if call.func_name == "dyn" && call.target.is_none() && call.args.len() == 1 {
            let arg_cost = self.cost(&call.args[0]);
            if let Some(size) = self.compute_size(&call.args[0]) {
                self.sizes.insert(e.id, size);
            }
            if let Some(entry) = self.entry(&call.args[0]) {
                self.entries.insert(e.id, entry);
            }
            return Range::fixed(1).add(arg_cost);
        }
        let arg_costs: Vec<Range> = call.args.iter().map(|a| self.cost(a)).collect();
        let Some(overloads) = self.checked.overloads.get(&e.id) else {
            return Range::fixed(0);
        };
        let mut sum = Range::fixed(0);
        if let Some(target) = &call.target {
            sum = sum.add(self.cost(target));
        }
        let mut function_cost = Range {
            min: u64::MAX,
            max: 0,
        };
        let mut result_size: Option<Range> = None;
        for overload in overloads {
            let (cost, size) = self.function_cost(e, call, overload, &arg_costs);
            function_cost = function_cost.union(cost);
            if let Some(size) = size {
                result_size = Some(result_size.map_or(size, |r| r.union(size)));
            }
            if overload == "index_list" || overload == "index_map" {
                let container = &call.args[0];
                result_size = self.entry(container).map(|entry| entry.value);
                let mut path = self.path(container);
                path.push(
                    if overload == "index_list" {
                        "@items"
                    } else {
                        "@values"
                    }
                    .into(),
                );
                self.add_path(e, path);
            }
            if result_size.is_none() {
                result_size = self.compute_size(e);
            }
        }
        if let Some(size) = result_size {
            self.sizes.insert(e.id, size);
        }
        sum.add(function_cost)
    }

    /// The string and bytes functions' cost (`None`: `overload` is not one of them).
    fn string_function_cost(
        &mut self,
        overload: &str,
        target: Option<&IdedExpr>,
        args: &[IdedExpr],
        arg_sum: Range,
    ) -> Option<(Range, Option<Range>)> {
        match overload {
            "string_to_bytes" if args.len() == 1 => {
                let size = self.size_or_unknown(&args[0]);
                let result = Range {
                    min: size.min,
                    max: size.max.saturating_mul(4),
                };
                return Some((
                    size.factor(STRING_TRAVERSAL_COST_FACTOR).add(arg_sum),
                    Some(result),
                ));
            }
            "bytes_to_string" if args.len() == 1 => {
                let size = self.size_or_unknown(&args[0]);
                let result = Range {
                    min: size.min / 4,
                    max: size.max,
                };
                return Some((
                    size.factor(STRING_TRAVERSAL_COST_FACTOR).add(arg_sum),
                    Some(result),
                ));
            }
            "starts_with_string" | "ends_with_string" if args.len() == 1 => {
                let size = self.size_or_unknown(&args[0]);
                return Some((size.factor(STRING_TRAVERSAL_COST_FACTOR).add(arg_sum), None));
            }
            "in_list" if args.len() == 2 => {
                let size = self.size_or_unknown(&args[1]);
                return Some((size.factor(1.0).add(arg_sum), None));
            }
            "matches_string" if args.len() == 1 => {
                if let Some(target) = target {
                    let string = self
                        .size_or_unknown(target)
                        .add(Range::fixed(1))
                        .factor(STRING_TRAVERSAL_COST_FACTOR);
                    let regex = self
                        .size_or_unknown(&args[0])
                        .factor(REGEX_STRING_LENGTH_COST_FACTOR);
                    return Some((string.multiply(regex).add(arg_sum), None));
                }
            }
            "contains_string" if args.len() == 1 => {
                if let Some(target) = target {
                    let string = self
                        .size_or_unknown(target)
                        .factor(STRING_TRAVERSAL_COST_FACTOR);
                    let substring = self
                        .size_or_unknown(&args[0])
                        .factor(STRING_TRAVERSAL_COST_FACTOR);
                    return Some((string.multiply(substring).add(arg_sum), None));
                }
            }
            _ => {}
        }
        None
    }

    /// `functionCost`: the Kubernetes library's estimate first, then cel-go's.
    fn function_cost(
        &mut self,
        e: &IdedExpr,
        call: &CallExpr,
        overload: &str,
        arg_costs: &[Range],
    ) -> (Range, Option<Range>) {
        let arg_sum = arg_costs
            .iter()
            .fold(Range::fixed(0), |sum, cost| sum.add(*cost));
        let target = call.target.as_deref();
        let args = &call.args;
        if let (Some(target), "lowerAscii" | "upperAscii" | "trim") =
            (target, call.func_name.as_str())
        {
            let size = self.size_or_unknown(target);
            return (
                size.factor(STRING_TRAVERSAL_COST_FACTOR).add(arg_sum),
                Some(size),
            );
        }
        if let Some(cost) = self.string_function_cost(overload, target, args, arg_sum) {
            return cost;
        }
        match overload {
            "logical_or" | "logical_and" => {
                let (lhs, rhs) = (arg_costs[0], arg_costs[1]);
                return (
                    Range {
                        min: lhs.min,
                        max: lhs.add(rhs).max,
                    },
                    None,
                );
            }
            "conditional" => {
                let size = self
                    .size_or_unknown(&args[1])
                    .union(self.size_or_unknown(&args[2]));
                if let (Some(a), Some(b)) = (self.entry(&args[1]), self.entry(&args[2])) {
                    self.entries.insert(e.id, a.union(b));
                }
                let cost = arg_costs[0].add(arg_costs[1].union(arg_costs[2]));
                return (cost, Some(size));
            }
            "add_string" | "add_bytes" | "add_list" if args.len() == 2 => {
                let size = self
                    .size_or_unknown(&args[0])
                    .add(self.size_or_unknown(&args[1]));
                if let (Some(a), Some(b)) = (self.entry(&args[0]), self.entry(&args[1])) {
                    self.entries.insert(e.id, a.union(b));
                }
                if overload == "add_list" {
                    return (Range::fixed(1).add(arg_sum), Some(size));
                }
                return (
                    size.factor(STRING_TRAVERSAL_COST_FACTOR).add(arg_sum),
                    Some(size),
                );
            }
            "less_string"
            | "greater_string"
            | "less_equals_string"
            | "greater_equals_string"
            | "less_bytes"
            | "greater_bytes"
            | "less_equals_bytes"
            | "greater_equals_bytes"
            | "equals"
            | "not_equals" => {
                let lhs = self.size_or_unknown(&args[0]);
                let rhs = self.size_or_unknown(&args[1]);
                let smallest_max = lhs.max.min(rhs.max);
                let min = u64::from(smallest_max > 0);
                let cost = Range {
                    min,
                    max: smallest_max,
                }
                .factor(STRING_TRAVERSAL_COST_FACTOR);
                return (cost.add(arg_sum), None);
            }
            _ => {}
        }
        (Range::fixed(1).add(arg_sum), None)
    }

    fn local(&self, name: &str) -> Option<&LocalVar> {
        self.locals.get(name).and_then(|stack| stack.last())
    }

    fn push(&mut self, name: &str, var: LocalVar) {
        self.locals.entry(name.to_owned()).or_default().push(var);
    }

    fn pop(&mut self, name: &str) {
        if let Some(stack) = self.locals.get_mut(name) {
            stack.pop();
        }
    }

    fn path(&self, e: &IdedExpr) -> Vec<String> {
        if let Expr::Ident(name) = &e.expr
            && let Some(v) = self.local(name)
        {
            return v.path.clone();
        }
        self.paths.get(&e.id).cloned().unwrap_or_default()
    }

    /// Records the field path of `e` and notes it when it reaches an unbounded value.
    fn add_path(&mut self, e: &IdedExpr, path: Vec<String>) {
        if path
            .first()
            .is_some_and(|root| root == "self" || root == "oldSelf")
            && let Some(decl) = self.resolve(&path)
            && decl.bound == Bound::RequestSize
            && matches!(
                decl.kind,
                DeclKind::String | DeclKind::Bytes | DeclKind::List(_) | DeclKind::Map(_)
            )
        {
            self.reach.push(Reach::Unbounded(display_path(&path)));
        }
        self.paths.insert(e.id, path);
    }

    /// The schema node a path leads to. Like the API server's size estimator, it skips the
    /// first element whatever it is (`self`, `oldSelf`, or `@items` of a literal list).
    fn resolve(&self, path: &[String]) -> Option<Arc<Decl>> {
        let (_, rest) = path.split_first()?;
        rest.iter()
            .try_fold(self.root.clone(), |decl, step| decl.step(step))
    }

    fn entry(&self, e: &IdedExpr) -> Option<EntrySize> {
        if let Some(entry) = self.entries.get(&e.id) {
            return Some(*entry);
        }
        if let Expr::Ident(name) = &e.expr {
            return self.local(name).and_then(|v| v.entry);
        }
        None
    }

    fn size_or_unknown(&mut self, e: &IdedExpr) -> Range {
        if let Some(size) = self.compute_size(e) {
            return size;
        }
        if self.checked.types.get(&e.id).is_some_and(CelType::is_sized) {
            self.reach.push(Reach::UnknownSize(describe(e)));
        }
        Range::UNKNOWN
    }

    /// `computeSize`: computed sizes, literals, the schema (by path), scalars, locals.
    fn compute_size(&mut self, e: &IdedExpr) -> Option<Range> {
        if let Some(size) = self.sizes.get(&e.id) {
            return Some(*size);
        }
        match &e.expr {
            Expr::Literal(literal) => {
                return Some(Range::fixed(match literal {
                    LiteralValue::String(s) => s.chars().count() as u64,
                    LiteralValue::Bytes(b) => b.len() as u64,
                    _ => 1,
                }));
            }
            Expr::List(list) => return Some(Range::fixed(list.elements.len() as u64)),
            Expr::Map(map) => return Some(Range::fixed(map.entries.len() as u64)),
            _ => {}
        }
        let path = self.path(e);
        if let Some(decl) = self.resolve(&path) {
            let size = Range {
                min: 0,
                max: decl.max_elements,
            };
            self.sizes.insert(e.id, size);
            return Some(size);
        }
        if matches!(
            self.checked.types.get(&e.id),
            Some(
                CelType::Bool
                    | CelType::Double
                    | CelType::Duration
                    | CelType::Int
                    | CelType::Timestamp
                    | CelType::Uint
            )
        ) {
            return Some(Range::fixed(1));
        }
        if let Expr::Ident(name) = &e.expr {
            return self.local(name).and_then(|v| v.size);
        }
        None
    }
}

fn display_path(path: &[String]) -> String {
    let mut out = String::new();
    for step in path {
        match step.as_str() {
            "@items" | "@values" => out.push_str("[*]"),
            "@keys" => out.push_str("{key}"),
            field => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(field);
            }
        }
    }
    out
}

/// A short name for a computed value, for messages.
fn describe(e: &IdedExpr) -> String {
    match &e.expr {
        Expr::Call(call) => match (&call.target, call.args.first()) {
            (None, Some(arg)) => format!("{}({})", call.func_name, describe(arg)),
            _ => format!("{}()", call.func_name),
        },
        Expr::Ident(name) => name.clone(),
        Expr::Select(select) => format!("{}.{}", describe(&select.operand), select.field),
        _ => "an expression".into(),
    }
}

#[cfg(test)]
mod tests;
