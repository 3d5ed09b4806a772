//! How calls resolve to cel-go's overloads, by the operands' types.

use kube_cel::cel::common::ast::operators;

use super::{CelType, NUMERIC, unify};

pub(super) enum Resolved {
    Ok(CelType, Vec<String>),
    NoOverload,
    Unknown,
}

pub(super) fn both_strings(a: &CelType, b: &CelType) -> bool {
    unify(a, &CelType::String).is_some() && unify(b, &CelType::String).is_some()
}

pub(super) fn relational(op: &str, a: &CelType, b: &CelType) -> Resolved {
    use CelType as T;
    let prefix = match op {
        operators::LESS => "less",
        operators::LESS_EQUALS => "less_equals",
        operators::GREATER => "greater",
        _ => "greater_equals",
    };
    let comparable = [
        T::Bool,
        T::Int,
        T::Uint,
        T::Double,
        T::String,
        T::Bytes,
        T::Timestamp,
        T::Duration,
    ];
    let ids: Vec<String> = match (a, b) {
        (T::Dyn, T::Dyn) => comparable
            .iter()
            .map(|t| format!("{prefix}_{}", t.overload_name()))
            .collect(),
        (T::Dyn, t) | (t, T::Dyn) if comparable.contains(t) => {
            vec![format!("{prefix}_{}", t.overload_name())]
        }
        (x, y) if x == y && comparable.contains(x) => {
            vec![format!("{prefix}_{}", x.overload_name())]
        }
        // CEL compares numbers across types.
        (x, y) if NUMERIC.contains(x) && NUMERIC.contains(y) => {
            vec![format!(
                "{prefix}_{}_{}",
                x.overload_name(),
                y.overload_name()
            )]
        }
        _ => return Resolved::NoOverload,
    };
    Resolved::Ok(T::Bool, ids)
}

pub(super) fn add(a: &CelType, b: &CelType) -> Resolved {
    use CelType as T;
    let one = |t: CelType, id: &str| Resolved::Ok(t, vec![id.to_owned()]);
    match (a, b) {
        (T::Int, T::Int) => one(T::Int, "add_int64"),
        (T::Uint, T::Uint) => one(T::Uint, "add_uint64"),
        (T::Double, T::Double) => one(T::Double, "add_double"),
        (T::String, T::String) => one(T::String, "add_string"),
        (T::Bytes, T::Bytes) => one(T::Bytes, "add_bytes"),
        (T::List(x), T::List(y)) => match unify(x, y) {
            Some(t) => one(T::List(Box::new(t)), "add_list"),
            None => Resolved::NoOverload,
        },
        (T::Timestamp, T::Duration) => one(T::Timestamp, "add_timestamp_duration"),
        (T::Duration, T::Timestamp) => one(T::Timestamp, "add_duration_timestamp"),
        (T::Duration, T::Duration) => one(T::Duration, "add_duration_duration"),
        (T::Dyn, T::Dyn) => Resolved::Ok(
            T::Dyn,
            [
                "add_int64",
                "add_uint64",
                "add_double",
                "add_string",
                "add_bytes",
                "add_list",
            ]
            .map(String::from)
            .to_vec(),
        ),
        (T::Dyn, t) | (t, T::Dyn) => add(t, t),
        _ => Resolved::NoOverload,
    }
}

pub(super) fn arithmetic(op: &str, a: &CelType, b: &CelType) -> Resolved {
    use CelType as T;
    let prefix = match op {
        operators::SUBSTRACT => "subtract",
        operators::MULTIPLY => "multiply",
        operators::DIVIDE => "divide",
        _ => "modulo",
    };
    let t = match (a, b) {
        (T::Dyn, t) | (t, T::Dyn) => t.clone(),
        (x, y) if x == y => x.clone(),
        (T::Timestamp, T::Duration) if prefix == "subtract" => {
            return Resolved::Ok(T::Timestamp, vec!["subtract_timestamp_duration".into()]);
        }
        (T::Timestamp, T::Timestamp) if prefix == "subtract" => {
            return Resolved::Ok(T::Duration, vec!["subtract_timestamp_timestamp".into()]);
        }
        _ => return Resolved::NoOverload,
    };
    match t {
        T::Int | T::Uint => {
            Resolved::Ok(t.clone(), vec![format!("{prefix}_{}", t.overload_name())])
        }
        T::Double if prefix != "modulo" => {
            Resolved::Ok(T::Double, vec![format!("{prefix}_double")])
        }
        T::Duration if prefix == "subtract" => {
            Resolved::Ok(T::Duration, vec!["subtract_duration_duration".into()])
        }
        T::Dyn => Resolved::Ok(
            T::Dyn,
            vec![format!("{prefix}_int64"), format!("{prefix}_double")],
        ),
        _ => Resolved::NoOverload,
    }
}

pub(super) fn size(a: &CelType, prefix: &str) -> Resolved {
    use CelType as T;
    let ids: Vec<String> = match a {
        T::String | T::Bytes | T::List(_) | T::Map(..) => {
            vec![format!("{prefix}{}", a.overload_name())]
        }
        T::Dyn => ["string", "bytes", "list", "map"]
            .iter()
            .map(|t| format!("{prefix}{t}"))
            .collect(),
        _ => return Resolved::NoOverload,
    };
    Resolved::Ok(T::Int, ids)
}

pub(super) fn size_member(a: &CelType) -> Resolved {
    match size(a, "") {
        Resolved::Ok(t, ids) => {
            Resolved::Ok(t, ids.into_iter().map(|id| format!("{id}_size")).collect())
        }
        other => other,
    }
}

pub(super) fn conversion(a: &CelType, to: CelType, from: &[CelType]) -> Resolved {
    let name = |t: &CelType| format!("{}_to_{}", t.overload_name(), to.overload_name());
    if a.is_dyn() {
        return Resolved::Ok(to.clone(), from.iter().map(name).collect());
    }
    if from.contains(a) {
        Resolved::Ok(to.clone(), vec![name(a)])
    } else {
        Resolved::NoOverload
    }
}
