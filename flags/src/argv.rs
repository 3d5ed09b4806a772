//! A role's flags to and from the argv of its container. The role's clap definition is
//! the only list of flags: [`to_argv`] walks it for the flags' names, kinds and defaults
//! and takes the values from the struct's serde form (the same field names), so a flag
//! renamed, added or removed changes the argv the operator writes with it.

use std::collections::BTreeSet;

use clap::{ArgAction, Command};
use serde::Serialize;
use serde_json::Value;

/// A role's flags: what `multiarch <SUBCOMMAND>` parses and the operator writes.
pub trait RoleFlags: clap::Args + Serialize {
    /// The subcommand that runs the role.
    const SUBCOMMAND: &'static str;

    /// How the role logs (every role has the same logging flags).
    fn log_mut(&mut self) -> &mut multiarch_runtime::logging::LogArgs;
}

#[derive(Debug, thiserror::Error)]
pub enum FlagsError {
    #[error("{role}: the flags do not serialise: {source}")]
    Serialise {
        role: &'static str,
        source: serde_json::Error,
    },
    #[error(
        "{role}: field {field:?} is no flag of the role (a serde rename, or a flag without a long name)"
    )]
    NoSuchFlag { role: &'static str, field: String },
    #[error("{role}: --{flag} cannot be written from {value}")]
    NotAFlagValue {
        role: &'static str,
        flag: String,
        value: Value,
    },
    #[error("{role}: --{flag} value {value:?} holds the list delimiter {delimiter:?}")]
    DelimiterInValue {
        role: &'static str,
        flag: String,
        value: String,
        delimiter: char,
    },
    #[error("{role}: an argv of another role: {argv:?}")]
    OtherRole {
        role: &'static str,
        argv: Vec<String>,
    },
    #[error("{role}: {source}")]
    Parse {
        role: &'static str,
        source: clap::Error,
    },
}

/// The role's command as the container's argv is read: without the environment, whose
/// variables would be the running process's, not those of the pod the argv is for.
pub(crate) fn command_without_env<T: RoleFlags>() -> Command {
    T::augment_args(Command::new(T::SUBCOMMAND))
        .no_binary_name(true)
        .mut_args(|arg| arg.env(None::<&'static str>))
}

/// Parses a container's argv (`[SUBCOMMAND, flags...]`) as the role does, the
/// environment left out.
pub fn parse_argv<T: RoleFlags>(argv: &[impl AsRef<str>]) -> Result<T, FlagsError> {
    let role = T::SUBCOMMAND;
    let argv: Vec<String> = argv.iter().map(|a| a.as_ref().to_owned()).collect();
    let Some((subcommand, flags)) = argv.split_first() else {
        return Err(FlagsError::OtherRole { role, argv });
    };
    if subcommand != role {
        return Err(FlagsError::OtherRole { role, argv });
    }
    command_without_env::<T>()
        .try_get_matches_from(flags)
        .and_then(|matches| T::from_arg_matches(&matches))
        .map_err(|source| FlagsError::Parse { role, source })
}

/// Every flag at its declared default: what the operator fills.
pub fn defaults<T: RoleFlags>() -> Result<T, FlagsError> {
    parse_argv(&[T::SUBCOMMAND])
}

/// Like [`parse_argv`], skipping the `--name[=value]` flags the role does not know: for
/// reading a workload another version of the operator wrote.
pub fn parse_known_argv<T: RoleFlags>(argv: &[impl AsRef<str>]) -> Result<T, FlagsError> {
    let command = command_without_env::<T>();
    let known: BTreeSet<&str> = command
        .get_arguments()
        .filter_map(clap::Arg::get_long)
        .collect();
    let kept: Vec<&str> = argv
        .iter()
        .map(AsRef::as_ref)
        .enumerate()
        .filter(|(i, arg)| {
            *i == 0
                || arg
                    .strip_prefix("--")
                    .map(|flag| flag.split_once('=').map_or(flag, |(name, _)| name))
                    .is_none_or(|name| known.contains(name))
        })
        .map(|(_, arg)| arg)
        .collect();
    parse_argv(&kept)
}

/// The container argv that runs the role with `flags`: the subcommand, then every flag
/// whose value is not its default, and those of `pinned` (field names) whatever their
/// value, in the order the role declares them, as `--name=value` (a switch as `--name`,
/// a list joined by its delimiter or repeated). Pinned are the values the writer's other
/// objects depend on (a port a Service names): written, they do not depend on the
/// defaults of the role's version.
pub fn to_argv<T: RoleFlags>(flags: &T, pinned: &[&str]) -> Result<Vec<String>, FlagsError> {
    let role = T::SUBCOMMAND;
    let serialised =
        serde_json::to_value(flags).map_err(|source| FlagsError::Serialise { role, source })?;
    let Value::Object(mut values) = serialised else {
        return Err(FlagsError::NoSuchFlag {
            role,
            field: String::new(),
        });
    };
    let command = command_without_env::<T>();
    if let Some(field) = pinned
        .iter()
        .find(|id| !command.get_arguments().any(|a| a.get_id() == **id))
    {
        return Err(FlagsError::NoSuchFlag {
            role,
            field: (*field).to_owned(),
        });
    }
    let mut argv = vec![role.to_owned()];
    for arg in command.get_arguments() {
        let (Some(value), Some(long)) = (values.remove(arg.get_id().as_str()), arg.get_long())
        else {
            continue;
        };
        // A pinned flag is compared with no default: it is always written.
        let defaults: Vec<String> = if pinned.contains(&arg.get_id().as_str()) {
            Vec::new()
        } else {
            arg.get_default_values()
                .iter()
                .map(|d| d.to_string_lossy().into_owned())
                .collect()
        };
        let text = |value: &Value| {
            flag_text(value).ok_or_else(|| FlagsError::NotAFlagValue {
                role,
                flag: long.to_owned(),
                value: value.clone(),
            })
        };
        match &value {
            Value::Null => {}
            Value::Bool(on) if matches!(arg.get_action(), ArgAction::SetTrue) => {
                if *on {
                    argv.push(format!("--{long}"));
                }
            }
            Value::Array(items) => {
                let items = items.iter().map(text).collect::<Result<Vec<_>, _>>()?;
                if items.is_empty() || items == defaults {
                    continue;
                }
                match arg.get_value_delimiter() {
                    Some(delimiter) => {
                        if let Some(item) = items.iter().find(|i| i.contains(delimiter)) {
                            return Err(FlagsError::DelimiterInValue {
                                role,
                                flag: long.to_owned(),
                                value: item.clone(),
                                delimiter,
                            });
                        }
                        argv.push(format!("--{long}={}", items.join(&delimiter.to_string())));
                    }
                    None => argv.extend(items.iter().map(|item| format!("--{long}={item}"))),
                }
            }
            scalar => {
                let value = text(scalar)?;
                if defaults != [value.as_str()] {
                    argv.push(format!("--{long}={value}"));
                }
            }
        }
    }
    match values.into_iter().next() {
        Some((field, _)) => Err(FlagsError::NoSuchFlag { role, field }),
        None => Ok(argv),
    }
}

/// A scalar as clap parses it back: numbers in Rust's shortest round-tripping form.
fn flag_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Bool(on) => Some(on.to_string()),
        Value::Number(number) => Some(match (number.as_i64(), number.as_u64()) {
            (Some(i), _) => i.to_string(),
            (None, Some(u)) => u.to_string(),
            (None, None) => number.as_f64()?.to_string(),
        }),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}
