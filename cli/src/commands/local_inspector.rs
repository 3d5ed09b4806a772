//! The inspector of the commands that inspect images from this machine (`inspect`,
//! `audit`): registry settings from the command line, credentials from an auth file or,
//! for `audit --cluster`, from the cluster's pull secrets.

use std::sync::Arc;

use anyhow::Context;
use multiarch_inspector::{
    Inspector,
    cache::CacheOptions,
    keyring::Keyring,
    metrics::InspectorMetrics,
    registry::RegistryOptions,
    secrets::{SecretSource, StaticKeyring},
    settings::RegistrySettings,
};

use crate::args::RegistryAccessArgs;

/// The credentials of `--authfile` (none without it).
pub fn static_keyring(args: &RegistryAccessArgs) -> anyhow::Result<StaticKeyring> {
    let mut keyring = Keyring::default();
    if let Some(path) = &args.authfile {
        let bytes = std::fs::read(path)
            .with_context(|| format!("cannot read auth file {}", path.display()))?;
        keyring
            .add_docker_config_json(&bytes)
            .with_context(|| format!("auth file {}", path.display()))?;
    }
    Ok(StaticKeyring(Arc::new(keyring)))
}

pub fn local_inspector(
    args: &RegistryAccessArgs,
    secrets: Arc<dyn SecretSource>,
) -> anyhow::Result<Inspector> {
    let settings = match &args.registries_config {
        Some(path) => RegistrySettings::load(path)?,
        None => RegistrySettings::default(),
    };
    Ok(Inspector::new(
        settings,
        RegistryOptions {
            total_timeout: args.timeout,
            ..RegistryOptions::default()
        },
        CacheOptions::default(),
        secrets,
        InspectorMetrics::default(),
    ))
}
