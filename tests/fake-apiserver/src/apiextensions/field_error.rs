//! Field errors and the `422 Invalid` status that carries them, in apimachinery's words
//! (`k8s.io/apimachinery/pkg/util/validation/field` and `api/errors.NewInvalid`).

use std::fmt;

use serde_json::{Value, json};

/// `field.ErrorType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorType {
    Required,
    Duplicate,
    Invalid,
    NotSupported,
    Forbidden,
    TooLong,
    TooMany,
    Internal,
}

impl ErrorType {
    fn text(self) -> &'static str {
        match self {
            ErrorType::Required => "Required value",
            ErrorType::Duplicate => "Duplicate value",
            ErrorType::Invalid => "Invalid value",
            ErrorType::NotSupported => "Unsupported value",
            ErrorType::Forbidden => "Forbidden",
            ErrorType::TooLong => "Too long",
            ErrorType::TooMany => "Too many",
            ErrorType::Internal => "Internal error",
        }
    }

    /// The `reason` of a status cause.
    pub fn reason(self) -> &'static str {
        match self {
            ErrorType::Required => "FieldValueRequired",
            ErrorType::Duplicate => "FieldValueDuplicate",
            ErrorType::Invalid => "FieldValueInvalid",
            ErrorType::NotSupported => "FieldValueNotSupported",
            ErrorType::Forbidden => "FieldValueForbidden",
            ErrorType::TooLong => "FieldValueTooLong",
            ErrorType::TooMany => "FieldValueTooMany",
            ErrorType::Internal => "InternalError",
        }
    }
}

/// One `field.Error`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub kind: ErrorType,
    pub field: String,
    /// The bad value as apimachinery prints it, or `None` where it is omitted.
    pub value: Option<String>,
    pub detail: String,
}

/// A value as `field.Error` prints it: numbers and booleans bare, strings quoted, anything
/// else as JSON.
pub fn show(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

impl FieldError {
    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> FieldError {
        FieldError {
            kind: ErrorType::Required,
            field: field.into(),
            value: None,
            detail: detail.into(),
        }
    }

    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> FieldError {
        FieldError {
            kind: ErrorType::Forbidden,
            field: field.into(),
            value: None,
            detail: detail.into(),
        }
    }

    /// `field.Invalid` with a value already printed (`None`: omitted).
    pub fn invalid(
        field: impl Into<String>,
        value: Option<String>,
        detail: impl Into<String>,
    ) -> FieldError {
        FieldError {
            kind: ErrorType::Invalid,
            field: field.into(),
            value,
            detail: detail.into(),
        }
    }

    pub fn not_supported(
        field: impl Into<String>,
        value: &Value,
        supported: &[String],
    ) -> FieldError {
        let supported: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        FieldError {
            kind: ErrorType::NotSupported,
            field: field.into(),
            value: Some(show(value)),
            detail: format!("supported values: {}", supported.join(", ")),
        }
    }

    pub fn duplicate(field: impl Into<String>, value: Option<String>) -> FieldError {
        FieldError {
            kind: ErrorType::Duplicate,
            field: field.into(),
            value,
            detail: String::new(),
        }
    }

    pub fn too_long(field: impl Into<String>, max: u64) -> FieldError {
        FieldError {
            kind: ErrorType::TooLong,
            field: field.into(),
            value: None,
            detail: format!("may not be more than {max} bytes"),
        }
    }

    pub fn too_many(field: impl Into<String>, actual: usize, max: u64) -> FieldError {
        FieldError {
            kind: ErrorType::TooMany,
            field: field.into(),
            value: Some(actual.to_string()),
            detail: format!("must have at most {max} items"),
        }
    }

    pub fn internal(field: impl Into<String>, detail: impl Into<String>) -> FieldError {
        FieldError {
            kind: ErrorType::Internal,
            field: field.into(),
            value: None,
            detail: detail.into(),
        }
    }

    /// `ErrorBody`: the message without the field.
    pub fn body(&self) -> String {
        let mut body = match (&self.value, self.kind) {
            (
                Some(value),
                ErrorType::Duplicate
                | ErrorType::Invalid
                | ErrorType::NotSupported
                | ErrorType::TooMany,
            ) => format!("{}: {value}", self.kind.text()),
            _ => self.kind.text().to_owned(),
        };
        if !self.detail.is_empty() {
            body.push_str(": ");
            body.push_str(&self.detail);
        }
        body
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// `errors.NewInvalid`: the 422 status for `kind` (`Kind.group`) named `name`.
pub fn invalid_status(group: &str, kind: &str, name: &str, errors: &[FieldError]) -> Value {
    let mut messages: Vec<String> = Vec::new();
    for error in errors {
        let message = error.to_string();
        if !messages.contains(&message) {
            messages.push(message);
        }
    }
    let qualified = if group.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}.{group}")
    };
    let aggregate = match messages.as_slice() {
        [] => String::new(),
        [one] => format!(": {one}"),
        many => format!(": [{}]", many.join(", ")),
    };
    let causes: Vec<Value> = errors
        .iter()
        .map(|e| json!({"reason": e.kind.reason(), "message": e.body(), "field": e.field}))
        .collect();
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("{qualified} {name:?} is invalid{aggregate}"),
        "reason": "Invalid",
        "details": {"name": name, "group": group, "kind": kind, "causes": causes},
        "code": 422,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_errors_as_apimachinery() {
        assert_eq!(
            FieldError::forbidden("spec.x", "no").to_string(),
            "spec.x: Forbidden: no"
        );
        assert_eq!(
            FieldError::invalid("spec.w", Some("\"integer\"".into()), "out of range").to_string(),
            "spec.w: Invalid value: \"integer\": out of range"
        );
        assert_eq!(
            FieldError::invalid("spec.list", None, "each entry once").to_string(),
            "spec.list: Invalid value: each entry once"
        );
        assert_eq!(
            FieldError::not_supported("spec.mode", &Value::from("X"), &["A".into(), "B".into()])
                .to_string(),
            "spec.mode: Unsupported value: \"X\": supported values: \"A\", \"B\""
        );
        assert_eq!(
            FieldError::too_many("spec.p", 9, 8).to_string(),
            "spec.p: Too many: 9: must have at most 8 items"
        );
        assert_eq!(
            FieldError::required("spec.plugins", "").to_string(),
            "spec.plugins: Required value"
        );
        assert_eq!(
            FieldError::duplicate("spec.p", Some("\"array\"".into())).to_string(),
            "spec.p: Duplicate value: \"array\""
        );
    }

    #[test]
    fn one_error_is_not_bracketed_and_duplicates_are_listed_once() {
        let one = invalid_status("g", "K", "n", &[FieldError::required("a", "")]);
        assert_eq!(one["message"], "K.g \"n\" is invalid: a: Required value");
        let twice = FieldError::required("a", "");
        let two = invalid_status(
            "g",
            "K",
            "n",
            &[twice.clone(), twice, FieldError::required("b", "")],
        );
        assert_eq!(
            two["message"],
            "K.g \"n\" is invalid: [a: Required value, b: Required value]"
        );
        assert_eq!(two["details"]["causes"].as_array().unwrap().len(), 3);
    }
}
