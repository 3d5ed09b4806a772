//! The registry settings file, followed: read at start, then again every interval, and
//! put in use when what it says changed (the YAML or a CA bundle it names). A ConfigMap
//! mounted as a volume is updated by the kubelet within about a minute of an edit, so an
//! admin's change reaches the inspector without a restart.
//!
//! A file that cannot be read or parsed keeps the settings in use (logged once per
//! distinct error, counted). An *optional* file (an optional ConfigMap volume) may be
//! absent: no settings until it appears, and none again once it goes.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use multiarch_runtime::supervisor::Tasks;
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::{
    inspector::Inspector,
    settings::{RegistrySettings, SettingsError},
};

/// The settings file and whether it may be absent.
#[derive(Clone, Debug)]
pub struct SettingsFile {
    pub path: PathBuf,
    pub optional: bool,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabel {
    result: &'static str,
}

/// `multiarch_inspector_registry_settings_reloads_total{result}`: `ok` for each change put
/// in use, `error` for each check that found an unusable file.
#[derive(Clone, Debug, Default)]
pub struct ReloadMetrics {
    reloads: Family<ReloadLabel, Counter>,
}

impl ReloadMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry
            .sub_registry_with_prefix("multiarch_inspector")
            .register(
                "registry_settings_reloads",
                "Changes of the registry settings file put in use (ok) or refused (error)",
                self.reloads.clone(),
            );
    }

    fn count(&self, result: &'static str) {
        self.reloads.get_or_create(&ReloadLabel { result }).inc();
    }

    /// Reloads counted with `result` so far.
    pub fn get(&self, result: &'static str) -> u64 {
        self.reloads.get_or_create(&ReloadLabel { result }).get()
    }
}

impl SettingsFile {
    /// The file `--registries-config` names, if it names one.
    pub fn named(path: Option<&Path>, optional: bool) -> Option<Self> {
        path.map(|path| SettingsFile {
            path: path.to_owned(),
            optional,
        })
    }

    /// The settings to start with: what `file` says, or the defaults without one.
    pub fn initial(file: Option<&Self>) -> Result<RegistrySettings, SettingsError> {
        file.map_or_else(|| Ok(RegistrySettings::default()), Self::load)
    }

    /// [`follow`](Self::follow) as the role's supervised task, its reload counter in
    /// `registry`.
    pub fn spawn_follower(
        self,
        inspector: Arc<Inspector>,
        interval: Duration,
        registry: &mut Registry,
        tasks: &Tasks,
    ) {
        let metrics = ReloadMetrics::default();
        metrics.register(registry);
        let follower = self.follow(inspector, interval, metrics, tasks.shutdown().clone());
        tasks.spawn_infallible("registry settings follower", follower);
    }

    /// What the file says now.
    pub fn load(&self) -> Result<RegistrySettings, SettingsError> {
        if self.optional && !exists(&self.path) {
            return Ok(RegistrySettings::default());
        }
        RegistrySettings::load(&self.path)
    }

    /// Checks the file every `interval` until `shutdown`, replacing the inspector's
    /// settings when they changed.
    pub async fn follow(
        self,
        inspector: Arc<Inspector>,
        interval: Duration,
        metrics: ReloadMetrics,
        shutdown: CancellationToken,
    ) {
        let mut last_error: Option<String> = None;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(interval) => {}
            }
            match self.load() {
                Ok(settings) => {
                    last_error = None;
                    if settings != inspector.settings() {
                        inspector.replace_settings(settings);
                        metrics.count("ok");
                        info!(path = %self.path.display(), "registry settings changed: in use from the next inspection, cached answers dropped");
                    }
                }
                Err(e) => {
                    metrics.count("error");
                    let message = e.to_string();
                    if last_error.as_ref() != Some(&message) {
                        warn!(error = %message, "registry settings unusable; keeping the ones in use");
                        last_error = Some(message);
                    }
                }
            }
        }
    }
}

/// Whether `path` names something (a dangling link of a ConfigMap volume does not).
fn exists(path: &Path) -> bool {
    std::fs::metadata(path).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        cache::CacheOptions, metrics::InspectorMetrics, registry::RegistryOptions,
        secrets::StaticKeyring,
    };

    fn inspector() -> Arc<Inspector> {
        Arc::new(Inspector::new(
            RegistrySettings::default(),
            RegistryOptions::default(),
            CacheOptions::default(),
            Arc::new(StaticKeyring::default()),
            InspectorMetrics::default(),
        ))
    }

    fn write(path: &Path, text: &str) {
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn an_optional_file_may_be_absent_a_required_one_may_not() {
        let dir = tempdir();
        let path = dir.join("registries.yaml");
        let optional = SettingsFile {
            path: path.clone(),
            optional: true,
        };
        assert_eq!(optional.load().unwrap(), RegistrySettings::default());
        let required = SettingsFile {
            path: path.clone(),
            optional: false,
        };
        let error = required.load().unwrap_err().to_string();
        assert!(
            error.starts_with(&format!("cannot read registry settings {}", path.display())),
            "{error}"
        );
    }

    /// Steps the follower one interval at a time (paused clock) and waits until it has
    /// looked at the file (its counters or settings moved) or `steps` passed.
    async fn settle(inspector: &Inspector, metrics: &ReloadMetrics, want: &RegistrySettings) {
        for _ in 0..5 {
            tokio::time::advance(Duration::from_secs(10)).await;
            tokio::task::yield_now().await;
            if inspector.settings() == *want {
                return;
            }
        }
        panic!(
            "settings never became {want:?} (now {:?}, {} ok, {} errors)",
            inspector.settings(),
            metrics.get("ok"),
            metrics.get("error")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn changes_are_put_in_use_and_a_broken_file_keeps_the_last_good_settings() {
        let dir = tempdir();
        let path = dir.join("registries.yaml");
        let inspector = inspector();
        let metrics = ReloadMetrics::default();
        let shutdown = CancellationToken::new();
        let file = SettingsFile {
            path: path.clone(),
            optional: true,
        };
        let follower = tokio::spawn(file.clone().follow(
            inspector.clone(),
            Duration::from_secs(10),
            metrics.clone(),
            shutdown.clone(),
        ));

        // The ConfigMap appears.
        write(
            &path,
            "registries:\n  - registry: 127.0.0.1:5000\n    mirrors: [10.0.0.1:5000]\n  - registry: 10.0.0.1:5000\n    insecure: true\n",
        );
        let mirrored = file.load().unwrap();
        assert_eq!(mirrored.registries.len(), 2);
        settle(&inspector, &metrics, &mirrored).await;
        assert_eq!(metrics.get("ok"), 1);

        // A broken edit: counted, the mirror stays in use.
        write(&path, "registries: [ {registry: 1, unknownField: true} ]\n");
        for _ in 0..3 {
            tokio::time::advance(Duration::from_secs(10)).await;
            tokio::task::yield_now().await;
        }
        assert!(metrics.get("error") >= 1);
        assert_eq!(inspector.settings(), mirrored);

        // The ConfigMap goes: no settings.
        std::fs::remove_file(&path).unwrap();
        settle(&inspector, &metrics, &RegistrySettings::default()).await;
        assert_eq!(metrics.get("ok"), 2);

        shutdown.cancel();
        follower.await.unwrap();
    }

    fn tempdir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "multiarch-settings-file-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
