//! A CEL type checker for CRD validation rules: the part of cel-go's checker that the API
//! server needs before it can estimate a rule's cost (the type of every node and the
//! overload a call resolves to), over the declarations of `decl.rs`.
//!
//! It models CEL's standard functions and macros and the Kubernetes string functions
//! `lowerAscii`, `upperAscii` and `trim`. Any other function is reported as
//! [`CheckError::Unmodelled`]: the rule may be valid on a real API server, but its cost
//! cannot be checked here until the function's types and cost are added.

use std::{collections::HashMap, fmt, sync::Arc};

use kube_cel::cel::common::ast::{
    CallExpr, ComprehensionExpr, Expr, IdedExpr, LiteralValue, operators,
};

use super::decl::{Decl, DeclKind};

/// A CEL type.
#[derive(Clone, Debug, PartialEq)]
pub enum CelType {
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    Null,
    Duration,
    Timestamp,
    Dyn,
    /// A type value (`int`, `type(x)`).
    Type,
    List(Box<CelType>),
    Map(Box<CelType>, Box<CelType>),
    /// A schema object with declared properties.
    Object(Arc<Decl>),
}

impl CelType {
    /// The CEL type of a schema node.
    pub fn of_decl(decl: &Arc<Decl>) -> CelType {
        match &decl.kind {
            DeclKind::Bool => CelType::Bool,
            DeclKind::Int => CelType::Int,
            DeclKind::Double => CelType::Double,
            DeclKind::String => CelType::String,
            DeclKind::Bytes => CelType::Bytes,
            DeclKind::Duration => CelType::Duration,
            DeclKind::Timestamp => CelType::Timestamp,
            DeclKind::Dyn => CelType::Dyn,
            DeclKind::List(items) => CelType::List(Box::new(CelType::of_decl(items))),
            DeclKind::Map(values) => CelType::Map(
                Box::new(CelType::String),
                Box::new(CelType::of_decl(values)),
            ),
            DeclKind::Object(_) => CelType::Object(decl.clone()),
        }
    }

    /// The name used in overload identifiers (`less_int64`, `add_string`).
    fn overload_name(&self) -> &'static str {
        match self {
            CelType::Bool => "bool",
            CelType::Int => "int64",
            CelType::Uint => "uint64",
            CelType::Double => "double",
            CelType::String => "string",
            CelType::Bytes => "bytes",
            CelType::Duration => "duration",
            CelType::Timestamp => "timestamp",
            CelType::List(_) => "list",
            CelType::Map(..) => "map",
            _ => "dyn",
        }
    }

    pub fn is_dyn(&self) -> bool {
        matches!(self, CelType::Dyn)
    }

    /// Strings, bytes, lists and maps: the values whose size the estimator tracks.
    pub fn is_sized(&self) -> bool {
        matches!(
            self,
            CelType::String | CelType::Bytes | CelType::List(_) | CelType::Map(..)
        )
    }
}

impl fmt::Display for CelType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CelType::Bool => f.write_str("bool"),
            CelType::Int => f.write_str("int"),
            CelType::Uint => f.write_str("uint"),
            CelType::Double => f.write_str("double"),
            CelType::String => f.write_str("string"),
            CelType::Bytes => f.write_str("bytes"),
            CelType::Null => f.write_str("null_type"),
            CelType::Duration => f.write_str("google.protobuf.Duration"),
            CelType::Timestamp => f.write_str("google.protobuf.Timestamp"),
            CelType::Dyn => f.write_str("dyn"),
            CelType::Type => f.write_str("type"),
            CelType::List(t) => write!(f, "list({t})"),
            CelType::Map(k, v) => write!(f, "map({k}, {v})"),
            CelType::Object(_) => f.write_str("object"),
        }
    }
}

/// Why a rule does not type-check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckError {
    /// What cel-go's checker would report.
    Invalid(String),
    /// A function this checker does not model (see the module documentation).
    Unmodelled(String),
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckError::Invalid(message) => f.write_str(message),
            CheckError::Unmodelled(function) => write!(
                f,
                "function '{function}' is not modelled by the CRD checker: add its types (cel/check.rs) and the API server's cost for it (cel/cost.rs)"
            ),
        }
    }
}

/// A type-checked expression.
#[derive(Debug)]
pub struct Checked {
    /// The type of every node, by expression id.
    pub types: HashMap<u64, CelType>,
    /// The overloads each call may resolve to (several only with `dyn` operands).
    pub overloads: HashMap<u64, Vec<String>>,
    /// The type of the whole expression.
    pub result: CelType,
    /// Whether the expression reads `oldSelf` (a transition rule).
    pub uses_old_self: bool,
}

/// Type-checks `expr`, in which `self` and `oldSelf` have the type of `root`.
pub fn check(expr: &IdedExpr, root: &Arc<Decl>) -> Result<Checked, Vec<CheckError>> {
    let mut checker = Checker {
        root: CelType::of_decl(root),
        scopes: Vec::new(),
        types: HashMap::new(),
        overloads: HashMap::new(),
        errors: Vec::new(),
        uses_old_self: false,
    };
    let result = checker.expr(expr);
    if checker.errors.is_empty() {
        Ok(Checked {
            types: checker.types,
            overloads: checker.overloads,
            result,
            uses_old_self: checker.uses_old_self,
        })
    } else {
        Err(checker.errors)
    }
}

struct Checker {
    root: CelType,
    scopes: Vec<(String, CelType)>,
    types: HashMap<u64, CelType>,
    overloads: HashMap<u64, Vec<String>>,
    errors: Vec<CheckError>,
    uses_old_self: bool,
}

/// The more specific of two types that agree, or `None` when they do not.
fn unify(a: &CelType, b: &CelType) -> Option<CelType> {
    match (a, b) {
        _ if a == b => Some(a.clone()),
        (CelType::Dyn, t) | (t, CelType::Dyn) => Some(t.clone()),
        (CelType::Null, t) | (t, CelType::Null)
            if matches!(t, CelType::Object(_) | CelType::List(_) | CelType::Map(..)) =>
        {
            Some(t.clone())
        }
        (CelType::List(x), CelType::List(y)) => Some(CelType::List(Box::new(unify(x, y)?))),
        (CelType::Map(k1, v1), CelType::Map(k2, v2)) => Some(CelType::Map(
            Box::new(unify(k1, k2)?),
            Box::new(unify(v1, v2)?),
        )),
        _ => None,
    }
}

const NUMERIC: [CelType; 3] = [CelType::Int, CelType::Uint, CelType::Double];

impl Checker {
    fn expr(&mut self, e: &IdedExpr) -> CelType {
        let t = match &e.expr {
            Expr::Literal(literal) => match literal {
                LiteralValue::Boolean(_) => CelType::Bool,
                LiteralValue::Bytes(_) => CelType::Bytes,
                LiteralValue::Double(_) => CelType::Double,
                LiteralValue::Int(_) => CelType::Int,
                LiteralValue::UInt(_) => CelType::Uint,
                LiteralValue::String(_) => CelType::String,
                LiteralValue::Null => CelType::Null,
            },
            Expr::Ident(name) => self.ident(name),
            Expr::Select(select) => {
                let operand = self.expr(&select.operand);
                let field = self.field(&operand, &select.field);
                if select.test { CelType::Bool } else { field }
            }
            Expr::List(list) => {
                let mut element = CelType::Dyn;
                for item in &list.elements {
                    let t = self.expr(item);
                    match unify(&element, &t) {
                        Some(u) => element = u,
                        // cel.HomogeneousAggregateLiterals, as the API server configures it.
                        None => self.invalid(format!("expected type '{element}' but found '{t}'")),
                    }
                }
                CelType::List(Box::new(element))
            }
            Expr::Map(map) => {
                let (mut key, mut value) = (CelType::Dyn, CelType::Dyn);
                for entry in &map.entries {
                    let kube_cel::cel::common::ast::EntryExpr::MapEntry(entry) = &entry.expr else {
                        self.invalid("struct fields in a map literal".into());
                        continue;
                    };
                    let (k, v) = (self.expr(&entry.key), self.expr(&entry.value));
                    match (unify(&key, &k), unify(&value, &v)) {
                        (Some(uk), Some(uv)) => (key, value) = (uk, uv),
                        _ => self.invalid(format!(
                            "expected type 'map({key}, {value})' but found 'map({k}, {v})'"
                        )),
                    }
                }
                CelType::Map(Box::new(key), Box::new(value))
            }
            Expr::Comprehension(comprehension) => self.comprehension(comprehension),
            Expr::Call(call) => self.call(e.id, call),
            Expr::Struct(s) => {
                self.invalid(format!("undeclared reference to '{}'", s.type_name));
                CelType::Dyn
            }
            Expr::Unspecified => {
                self.invalid("empty expression".into());
                CelType::Dyn
            }
        };
        self.types.insert(e.id, t.clone());
        t
    }

    fn invalid(&mut self, message: String) {
        self.errors.push(CheckError::Invalid(message));
    }

    fn ident(&mut self, name: &str) -> CelType {
        if let Some((_, t)) = self.scopes.iter().rev().find(|(n, _)| n == name) {
            return t.clone();
        }
        match name {
            "self" => self.root.clone(),
            "oldSelf" => {
                self.uses_old_self = true;
                self.root.clone()
            }
            "int" | "uint" | "double" | "bool" | "string" | "bytes" | "list" | "map"
            | "null_type" | "type" => CelType::Type,
            _ => {
                self.invalid(format!(
                    "undeclared reference to '{name}' (in container '')"
                ));
                CelType::Dyn
            }
        }
    }

    fn field(&mut self, operand: &CelType, field: &str) -> CelType {
        match operand {
            CelType::Object(decl) => match decl.step(field) {
                Some(child) => CelType::of_decl(&child),
                None => {
                    self.invalid(format!("undefined field '{field}'"));
                    CelType::Dyn
                }
            },
            CelType::Map(_, value) => (**value).clone(),
            CelType::Dyn => CelType::Dyn,
            other => {
                self.invalid(format!("type '{other}' does not support field selection"));
                CelType::Dyn
            }
        }
    }

    fn comprehension(&mut self, c: &ComprehensionExpr) -> CelType {
        let range = self.expr(&c.iter_range);
        let variable = match &range {
            CelType::List(t) => (**t).clone(),
            CelType::Map(k, _) => (**k).clone(),
            CelType::Dyn => CelType::Dyn,
            other => {
                self.invalid(format!(
                    "expression of type '{other}' cannot be range of a comprehension (must be list, map, or dynamic)"
                ));
                CelType::Dyn
            }
        };
        let init = self.expr(&c.accu_init);
        self.scopes.push((c.accu_var.clone(), init.clone()));
        self.scopes.push((c.iter_var.clone(), variable));
        let condition = self.expr(&c.loop_cond);
        if unify(&condition, &CelType::Bool).is_none() {
            self.invalid(format!(
                "expected type 'bool' but found '{condition}' (loop condition)"
            ));
        }
        let step = self.expr(&c.loop_step);
        self.scopes.pop();
        self.scopes.pop();
        // `filter` and `map` start from `[]`; the step says what the list holds.
        let accumulator = unify(&init, &step).unwrap_or(init);
        self.scopes.push((c.accu_var.clone(), accumulator));
        let result = self.expr(&c.result);
        self.scopes.pop();
        result
    }

    fn call(&mut self, id: u64, call: &CallExpr) -> CelType {
        let target = call.target.as_ref().map(|t| self.expr(t));
        let args: Vec<CelType> = call.args.iter().map(|a| self.expr(a)).collect();
        let name = call.func_name.as_str();
        match self.resolve(name, target.as_ref(), &args) {
            Resolved::Ok(result, overloads) => {
                self.overloads.insert(id, overloads);
                result
            }
            Resolved::NoOverload => {
                let mut shown: Vec<String> = target.iter().map(ToString::to_string).collect();
                shown.extend(args.iter().map(ToString::to_string));
                let receiver = if target.is_some() { "receiver " } else { "" };
                self.invalid(format!(
                    "found no matching overload for '{name}' applied to '{receiver}({})'",
                    shown.join(", ")
                ));
                CelType::Dyn
            }
            Resolved::Unknown => {
                self.errors.push(CheckError::Unmodelled(name.to_owned()));
                CelType::Dyn
            }
        }
    }

    fn resolve(&self, name: &str, target: Option<&CelType>, args: &[CelType]) -> Resolved {
        if let Some(resolved) = resolve_operator(name, target, args) {
            return resolved;
        }
        if let Some(resolved) = resolve_function(name, target, args) {
            return resolved;
        }
        match (name, target, args) {
            (
                operators::LOGICAL_AND
                | operators::LOGICAL_OR
                | operators::LOGICAL_NOT
                | operators::NOT_STRICTLY_FALSE
                | operators::CONDITIONAL
                | "size"
                | "matches"
                | "startsWith"
                | "endsWith"
                | "contains"
                | "lowerAscii"
                | "upperAscii"
                | "trim"
                | "string"
                | "int"
                | "uint"
                | "double"
                | "bytes"
                | "bool"
                | "dyn"
                | "type",
                _,
                _,
            ) => Resolved::NoOverload,
            _ => Resolved::Unknown,
        }
    }
}

fn ok(t: CelType, ids: &[&str]) -> Resolved {
    Resolved::Ok(t, ids.iter().map(|s| (*s).to_owned()).collect())
}

/// An operator's overload (`None`: not an operator, or none of its forms fits).
fn resolve_operator(name: &str, target: Option<&CelType>, args: &[CelType]) -> Option<Resolved> {
    use CelType as T;
    Some(match (name, target, args) {
        (operators::LOGICAL_AND | operators::LOGICAL_OR, None, [a, b])
            if unify(a, &T::Bool).is_some() && unify(b, &T::Bool).is_some() =>
        {
            let id = if name == operators::LOGICAL_AND {
                "logical_and"
            } else {
                "logical_or"
            };
            ok(T::Bool, &[id])
        }
        (operators::LOGICAL_NOT, None, [a]) if unify(a, &T::Bool).is_some() => {
            ok(T::Bool, &["logical_not"])
        }
        (operators::NOT_STRICTLY_FALSE, None, [a]) if unify(a, &T::Bool).is_some() => {
            ok(T::Bool, &["not_strictly_false"])
        }
        (operators::CONDITIONAL, None, [c, a, b]) if unify(c, &T::Bool).is_some() => {
            match unify(a, b) {
                Some(t) => ok(t, &["conditional"]),
                None => Resolved::NoOverload,
            }
        }
        (operators::EQUALS | operators::NOT_EQUALS, None, [a, b]) => {
            let id = if name == operators::EQUALS {
                "equals"
            } else {
                "not_equals"
            };
            if unify(a, b).is_some() {
                ok(T::Bool, &[id])
            } else {
                Resolved::NoOverload
            }
        }
        (
            operators::LESS
            | operators::LESS_EQUALS
            | operators::GREATER
            | operators::GREATER_EQUALS,
            None,
            [a, b],
        ) => relational(name, a, b),
        (operators::ADD, None, [a, b]) => add(a, b),
        (
            operators::SUBSTRACT | operators::MULTIPLY | operators::DIVIDE | operators::MODULO,
            None,
            [a, b],
        ) => arithmetic(name, a, b),
        (operators::NEGATE, None, [a]) => match a {
            T::Int => ok(T::Int, &["negate_int64"]),
            T::Double => ok(T::Double, &["negate_double"]),
            T::Dyn => ok(T::Dyn, &["negate_int64", "negate_double"]),
            _ => Resolved::NoOverload,
        },
        (operators::IN, None, [element, container]) => match container {
            T::List(t) if unify(element, t).is_some() => ok(T::Bool, &["in_list"]),
            T::Map(k, _) if unify(element, k).is_some() => ok(T::Bool, &["in_map"]),
            T::Dyn => ok(T::Bool, &["in_list", "in_map"]),
            _ => Resolved::NoOverload,
        },
        (operators::INDEX, None, [container, index]) => match container {
            T::List(t) if unify(index, &T::Int).is_some() => ok((**t).clone(), &["index_list"]),
            T::Map(k, v) if unify(index, k).is_some() => ok((**v).clone(), &["index_map"]),
            T::Dyn => ok(T::Dyn, &["index_list", "index_map"]),
            _ => Resolved::NoOverload,
        },
        _ => return None,
    })
}

/// A function's or method's overload (`None`: not one of them, or none of its forms fits).
fn resolve_function(name: &str, target: Option<&CelType>, args: &[CelType]) -> Option<Resolved> {
    use CelType as T;
    Some(match (name, target, args) {
        ("size", None, [a]) => size(a, "size_"),
        ("size", Some(a), []) => size_member(a),
        ("matches", Some(s), [p]) if both_strings(s, p) => ok(T::Bool, &["matches_string"]),
        ("matches", None, [s, p]) if both_strings(s, p) => ok(T::Bool, &["matches"]),
        ("startsWith", Some(s), [p]) if both_strings(s, p) => ok(T::Bool, &["starts_with_string"]),
        ("endsWith", Some(s), [p]) if both_strings(s, p) => ok(T::Bool, &["ends_with_string"]),
        ("contains", Some(s), [p]) if both_strings(s, p) => ok(T::Bool, &["contains_string"]),
        ("lowerAscii" | "upperAscii" | "trim", Some(s), []) if unify(s, &T::String).is_some() => {
            ok(T::String, &["string_k8s_ascii"])
        }
        ("string", None, [a]) => conversion(
            a,
            T::String,
            &[
                T::Int,
                T::Uint,
                T::Double,
                T::Bytes,
                T::Bool,
                T::String,
                T::Timestamp,
                T::Duration,
            ],
        ),
        ("int", None, [a]) => conversion(
            a,
            T::Int,
            &[
                T::Int,
                T::Uint,
                T::Double,
                T::String,
                T::Timestamp,
                T::Duration,
            ],
        ),
        ("uint", None, [a]) => conversion(a, T::Uint, &[T::Int, T::Uint, T::Double, T::String]),
        ("double", None, [a]) => conversion(a, T::Double, &[T::Int, T::Uint, T::Double, T::String]),
        ("bytes", None, [a]) => conversion(a, T::Bytes, &[T::String, T::Bytes]),
        ("bool", None, [a]) => conversion(a, T::Bool, &[T::String, T::Bool]),
        ("dyn", None, [_]) => ok(T::Dyn, &["to_dyn"]),
        ("type", None, [_]) => ok(T::Type, &["type"]),
        _ => return None,
    })
}

mod overloads;
use overloads::{
    Resolved, add, arithmetic, both_strings, conversion, relational, size, size_member,
};

#[cfg(test)]
mod tests;
