//! Warm-cache inspection: the cache lookup alone, and the whole in-process `inspect` call
//! (reference parsing, credential fingerprint, lookup) for an image already cached.
//! Run: `cargo bench -p multiarch-benches --bench inspector_cache`.

use std::{hint::black_box, sync::Arc};

use criterion::{Criterion, criterion_group, criterion_main};
use multiarch_inspector::{
    ImageInfo, ImageInspector, InspectRequest, Inspector, ManifestKind,
    cache::{CacheKey, CacheOptions, InspectionCache},
    metrics::InspectorMetrics,
    registry::RegistryOptions,
    secrets::StaticKeyring,
    settings::RegistrySettings,
};

fn warm(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let cache = InspectionCache::new(CacheOptions::default(), InspectorMetrics::default());
    let info = Arc::new(ImageInfo {
        image: "quay.io/org/app:1".into(),
        digest: "sha256:x".into(),
        kind: ManifestKind::Index,
        operator_bundle: false,
        binaries_pending: false,
        platforms: vec![],
    });
    let key = CacheKey {
        image: "quay.io/org/app:1".into(),
        credentials: None,
    };
    let stored = info.clone();
    let _ =
        runtime.block_on(cache.get_or_fetch(key.clone(), false, false, || async { Ok(stored) }));
    c.bench_function("inspector/cache_get", |b| {
        b.iter(|| black_box(cache.get(&key)))
    });

    // The full call: the cache is filled through the registry's negative answer path is
    // not wanted here, so fill it with a known answer under the key `inspect` computes.
    let inspector = Inspector::new(
        RegistrySettings::default(),
        RegistryOptions::default(),
        CacheOptions::default(),
        Arc::new(StaticKeyring::default()),
        InspectorMetrics::default(),
    );
    let filled = info.clone();
    let _ = runtime.block_on(
        inspector
            .cache()
            .get_or_fetch(key, false, false, || async { Ok(filled) }),
    );
    let request = InspectRequest {
        image: "quay.io/org/app:1".into(),
        namespace: "ns".into(),
        ..InspectRequest::default()
    };
    c.bench_function("inspector/inspect_warm", |b| {
        b.iter(|| black_box(runtime.block_on(inspector.inspect(&request)).is_ok()));
    });
}

criterion_group!(benches, warm);
criterion_main!(benches);
