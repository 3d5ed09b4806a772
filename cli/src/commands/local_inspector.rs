//! The inspector of the commands that inspect images from this machine (`inspect`,
//! `audit`): registry settings and an auth file from the command line, no cluster.

use std::sync::Arc;

use anyhow::Context;
use multiarch_inspector::{
    Inspector, cache::CacheOptions, keyring::Keyring, metrics::InspectorMetrics,
    registry::RegistryOptions, secrets::StaticKeyring, settings::RegistrySettings,
};

use crate::args::RegistryAccessArgs;

pub fn local_inspector(args: &RegistryAccessArgs) -> anyhow::Result<Inspector> {
    let settings = match &args.registries_config {
        Some(path) => RegistrySettings::load(path)?,
        None => RegistrySettings::default(),
    };
    let mut keyring = Keyring::default();
    if let Some(path) = &args.authfile {
        let bytes = std::fs::read(path)
            .with_context(|| format!("cannot read auth file {}", path.display()))?;
        keyring
            .add_docker_config_json(&bytes)
            .with_context(|| format!("auth file {}", path.display()))?;
    }
    Ok(Inspector::new(
        settings,
        RegistryOptions {
            total_timeout: args.timeout,
            ..RegistryOptions::default()
        },
        CacheOptions::default(),
        Arc::new(StaticKeyring(Arc::new(keyring))),
        InspectorMetrics::default(),
    ))
}
