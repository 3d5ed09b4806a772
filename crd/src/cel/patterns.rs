//! The regular expressions of an architecture rule. CEL's own `matches()` compiles its
//! pattern on every call, which the API server's cost estimate does not charge; a rule
//! runs for every pod the scheduler and the webhook decide. So a rule's patterns must be
//! string constants: each is compiled once, when the rule is checked (bounded in what it
//! compiles to, its compilation charged to the rule's cost), and evaluation matches with
//! that compiled program.

use std::collections::HashMap;

use kube_cel::cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue, MapExpr, StructExpr};
use regex::Regex;

/// What one pattern may compile to (the regex crate's own limit is 10 MB): `a{1000}{1000}`
/// is a short pattern of a huge program.
pub const MAX_PATTERN_PROGRAM_BYTES: usize = 256 * 1024;

/// Cost units charged per byte of a pattern for compiling it (about 50 ns of work each,
/// as the API server's cost units are): a 1 KiB pattern costs 51,200.
pub const COMPILE_COST_PER_BYTE: u64 = 50;

/// Every pattern of one or more rules, compiled.
pub type CompiledPatterns = HashMap<String, Regex>;

/// Compiles one pattern within [`MAX_PATTERN_PROGRAM_BYTES`].
pub fn compile(pattern: &str) -> Result<Regex, String> {
    regex::RegexBuilder::new(pattern)
        .size_limit(MAX_PATTERN_PROGRAM_BYTES)
        .build()
        .map_err(|e| match e {
            regex::Error::CompiledTooBig(_) => format!(
                "the pattern {pattern:?} of matches() compiles to more than {MAX_PATTERN_PROGRAM_BYTES} bytes"
            ),
            other => format!("the pattern {pattern:?} of matches() is not a valid regex: {other}"),
        })
}

/// The pattern of every `matches()` call in `expr`, each a string constant; the first
/// call whose pattern is computed is an error (its text).
pub fn constant_patterns(expr: &IdedExpr) -> Result<Vec<String>, String> {
    let mut found = Vec::new();
    collect(expr, &mut found)?;
    Ok(found)
}

fn collect(e: &IdedExpr, found: &mut Vec<String>) -> Result<(), String> {
    if let Expr::Call(call) = &e.expr
        && call.func_name == "matches"
    {
        // `s.matches(p)` or `matches(s, p)`: the pattern is the last argument.
        match call.args.last().map(|p| &p.expr) {
            Some(Expr::Literal(LiteralValue::String(pattern))) => {
                found.push(pattern.inner().to_owned());
            }
            _ => {
                return Err(
                    "matches(): the pattern must be a string constant (it is compiled once, when the rule is written)"
                        .to_owned(),
                );
            }
        }
    }
    let children: Vec<&IdedExpr> = match &e.expr {
        Expr::Select(select) => vec![&select.operand],
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
        .try_for_each(|child| collect(child, found))
}

/// Compiles every pattern of `expr` (see [`constant_patterns`]) into `into`; the cost of
/// compiling them, or why they cannot be.
pub fn compile_patterns(expr: &IdedExpr, into: &mut CompiledPatterns) -> Result<u64, String> {
    let mut cost: u64 = 0;
    for pattern in constant_patterns(expr)? {
        cost = cost.saturating_add(COMPILE_COST_PER_BYTE.saturating_mul(pattern.len() as u64));
        if let std::collections::hash_map::Entry::Vacant(slot) = into.entry(pattern) {
            let compiled = compile(slot.key())?;
            slot.insert(compiled);
        }
    }
    Ok(cost)
}

#[cfg(test)]
mod tests {
    use kube_cel::cel::Program;

    use super::*;

    fn patterns_of(expression: &str) -> Result<Vec<String>, String> {
        constant_patterns(Program::compile(expression).unwrap().expression())
    }

    #[test]
    fn patterns_must_be_constants() {
        assert_eq!(
            patterns_of(
                "self.metadata.name.matches('^db-[0-9]+$') || matches(self.metadata.namespace, 'x')"
            ),
            Ok(vec!["^db-[0-9]+$".to_owned(), "x".to_owned()])
        );
        let computed = patterns_of("self.metadata.name.matches(self.metadata.labels['p'])");
        assert!(
            computed
                .as_ref()
                .is_err_and(|e| e.contains("must be a string constant")),
            "{computed:?}"
        );
        assert!(patterns_of("self.metadata.name.matches('a' + 'b')").is_err());
    }

    #[test]
    fn a_pattern_is_compiled_once_within_its_size() {
        let mut compiled = CompiledPatterns::new();
        let expr = Program::compile(
            "self.metadata.name.matches('^a+$') && self.metadata.namespace.matches('^a+$')",
        )
        .unwrap();
        let cost = compile_patterns(expr.expression(), &mut compiled).unwrap();
        assert_eq!(cost, 2 * 4 * COMPILE_COST_PER_BYTE);
        assert_eq!(compiled.len(), 1);
        assert!(compiled["^a+$"].is_match("aaa"));
        let huge = compile("a{1000}{1000}").unwrap_err();
        assert!(
            huge.contains("compiles to more than 262144 bytes"),
            "{huge}"
        );
        assert!(compile("(").unwrap_err().contains("is not a valid regex"));
    }
}
