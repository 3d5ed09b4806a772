//! A real registry for tests: Debian's `docker-registry` (distribution) on 127.0.0.1 on a
//! free port, with temporary storage, optional htpasswd basic auth and TLS from a CA made
//! in the test; stopped when dropped. Plus helpers that push multi-arch fixtures with
//! oci-client, and two misbehaving servers (silent, HTTP 500 / garbage) for error paths.
//!
//! Used by the inspector's, the audit's, the admission's and the binary's tests and the benches.

use std::{
    net::{SocketAddr, TcpListener as StdListener},
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use oci_client::{
    Client, Reference,
    client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol},
    secrets::RegistryAuth,
};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub const USER: &str = "tester";
pub const PASSWORD: &str = "s3cret-pass";

pub struct Registry {
    child: Child,
    pub addr: String,
    dir: PathBuf,
    /// PEM of the CA that signed the registry's certificate, when TLS is on.
    pub ca_pem: Option<String>,
    pub basic_auth: bool,
}

#[derive(Default, Clone, Copy)]
pub struct Options {
    pub tls: bool,
    pub basic_auth: bool,
}

fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Registry {
    pub fn start(options: Options) -> Registry {
        let binary = which("docker-registry").unwrap_or_else(|| {
            panic!("docker-registry is not installed: run scripts/test, which installs it (Debian package docker-registry)")
        });
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let dir =
            std::env::temp_dir().join(format!("multiarch-registry-{}-{port}", std::process::id()));
        std::fs::create_dir_all(dir.join("storage")).unwrap();
        let mut config = format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n",
            dir.join("storage").display()
        );
        let mut ca_pem = None;
        if options.tls {
            let (ca, cert, key) = tls_material();
            std::fs::write(dir.join("cert.pem"), cert).unwrap();
            std::fs::write(dir.join("key.pem"), key).unwrap();
            config.push_str(&format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                dir.join("cert.pem").display(),
                dir.join("key.pem").display()
            ));
            ca_pem = Some(ca);
        }
        if options.basic_auth {
            let out = Command::new("htpasswd")
                .args(["-Bbn", USER, PASSWORD])
                .output()
                .expect("htpasswd (apache2-utils) is needed");
            assert!(out.status.success());
            std::fs::write(dir.join("htpasswd"), out.stdout).unwrap();
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: multiarch-test\n    path: {}\n",
                dir.join("htpasswd").display()
            ));
        }
        std::fs::write(dir.join("config.yml"), config).unwrap();
        let log = std::fs::File::create(dir.join("registry.log")).unwrap();
        let child = Command::new(binary)
            .arg("serve")
            .arg(dir.join("config.yml"))
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        let registry = Registry {
            child,
            addr,
            dir,
            ca_pem,
            basic_auth: options.basic_auth,
        };
        registry.wait_ready();
        registry
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(&self.addr).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let log = std::fs::read_to_string(self.dir.join("registry.log")).unwrap_or_default();
        panic!("docker-registry did not start on {}: {log}", self.addr);
    }

    /// An oci-client that can push here.
    pub fn client(&self) -> Client {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Client::new(ClientConfig {
            protocol: if self.ca_pem.is_some() {
                ClientProtocol::Https
            } else {
                ClientProtocol::Http
            },
            extra_root_certificates: self
                .ca_pem
                .iter()
                .map(|pem| Certificate {
                    encoding: CertificateEncoding::Pem,
                    data: pem.as_bytes().to_vec(),
                })
                .collect(),
            ..ClientConfig::default()
        })
    }

    /// Puts the file at `blob` (moved, not read into memory) into `repository`'s storage
    /// as a blob, as a push would have: for blobs too large to push from memory (a
    /// sparse 2 GiB layer). Its digest and size.
    pub fn place_blob(&self, repository: &str, blob: &std::path::Path) -> (String, u64) {
        // coreutils' sha256sum: this crate's sha2 in a debug build hashes 2 GiB in a
        // minute and a half.
        let out = Command::new("sha256sum").arg(blob).output().unwrap();
        assert!(out.status.success(), "sha256sum {}", blob.display());
        let hex = String::from_utf8(out.stdout)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned();
        let size = std::fs::metadata(blob).unwrap().len();
        let root = self.dir.join("storage/docker/registry/v2");
        let data = root.join(format!("blobs/sha256/{}/{hex}", &hex[..2]));
        std::fs::create_dir_all(&data).unwrap();
        std::fs::rename(blob, data.join("data")).unwrap();
        let link = root.join(format!("repositories/{repository}/_layers/sha256/{hex}"));
        std::fs::create_dir_all(&link).unwrap();
        std::fs::write(link.join("link"), format!("sha256:{hex}")).unwrap();
        (format!("sha256:{hex}"), size)
    }

    pub fn auth(&self) -> RegistryAuth {
        if self.basic_auth {
            RegistryAuth::Basic(USER.into(), PASSWORD.into())
        } else {
            RegistryAuth::Anonymous
        }
    }

    pub fn reference(&self, repository: &str, tag: &str) -> Reference {
        Reference::with_tag(self.addr.clone(), repository.into(), tag.into())
    }

    /// A YAML registry-settings file trusting this registry (CA or plain HTTP).
    pub fn settings_yaml(&self) -> String {
        match &self.ca_pem {
            Some(pem) => {
                let path = self.dir.join("ca.pem");
                std::fs::write(&path, pem).unwrap();
                format!(
                    "registries:\n  - registry: \"{}\"\n    caFile: {}\n",
                    self.addr,
                    path.display()
                )
            }
            None => format!(
                "registries:\n  - registry: \"{}\"\n    insecure: true\n",
                self.addr
            ),
        }
    }

    /// `METHOD path` of every request the registry has answered so far, from its access
    /// log (in the order it logged them).
    pub fn requests(&self) -> Vec<String> {
        let log = std::fs::read_to_string(self.dir.join("registry.log")).unwrap_or_default();
        log.lines()
            .filter_map(|line| {
                let request = line.split('"').nth(1)?;
                let mut parts = request.split(' ');
                Some(format!("{} {}", parts.next()?, parts.next()?))
            })
            .filter(|r| {
                r.starts_with("GET ")
                    || r.starts_with("HEAD ")
                    || r.starts_with("PUT ")
                    || r.starts_with("POST ")
                    || r.starts_with("PATCH ")
                    || r.starts_with("DELETE ")
            })
            .collect()
    }

    /// [`Registry::requests`] once `ready` says they are all there (the registry logs a
    /// request just after answering it), or what is logged after 10 s.
    pub fn requests_when(&self, ready: impl Fn(&[String]) -> bool) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let requests = self.requests();
            if ready(&requests) || Instant::now() > deadline {
                return requests;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn dir(&self) -> &PathBuf {
        &self.dir
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| PathBuf::from(d).join(name))
        .find(|p| p.is_file())
}

/// (CA PEM, server certificate PEM for 127.0.0.1, server key PEM).
fn tls_material() -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "multiarch test CA");
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let server_key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .unwrap()
        .signed_by(&server_key, &ca)
        .unwrap();
    (ca.pem(), server.pem(), server_key.serialize_pem())
}

pub fn sha256(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";

/// A client authorized to push to `repository` (the registry's credentials, if any), and
/// the reference of `tag` there.
async fn pusher(registry: &Registry, repository: &str, tag: &str) -> (Client, Reference) {
    let client = registry.client();
    let auth = registry.auth();
    let reference = registry.reference(repository, tag);
    client
        .store_auth_if_needed(reference.resolve_registry(), &auth)
        .await;
    client
        .auth(&reference, &auth, oci_client::RegistryOperation::Push)
        .await
        .ok();
    (client, reference)
}

/// A pushed manifest: what an index entry needs.
#[derive(Clone, Debug)]
pub struct Pushed {
    pub digest: String,
    pub size: usize,
    pub media_type: &'static str,
}

/// Pushes a one-layer image for `os/arch[/variant]` (OCI or Docker schema-2 media types),
/// by digest, and under `tag` when given.
pub async fn push_image(
    registry: &Registry,
    repository: &str,
    os: &str,
    arch: &str,
    variant: Option<&str>,
    docker: bool,
    tag: Option<&str>,
) -> Pushed {
    let (client, reference) = pusher(registry, repository, tag.unwrap_or("latest")).await;
    let mut config = serde_json::json!({
        "architecture": arch, "os": os,
        "rootfs": {"type": "layers", "diff_ids": []},
        "config": {"Cmd": ["/app", arch]},
    });
    if let Some(v) = variant {
        config["variant"] = v.into();
    }
    let config = serde_json::to_vec(&config).unwrap();
    let layer = format!("layer for {os}/{arch}/{variant:?} in {repository}").into_bytes();
    client
        .push_blob(&reference, config.clone(), &sha256(&config))
        .await
        .unwrap();
    client
        .push_blob(&reference, layer.clone(), &sha256(&layer))
        .await
        .unwrap();
    let (manifest_type, config_type, layer_type) = if docker {
        (
            DOCKER_MANIFEST,
            "application/vnd.docker.container.image.v1+json",
            "application/vnd.docker.image.rootfs.diff.tar.gzip",
        )
    } else {
        (
            OCI_MANIFEST,
            "application/vnd.oci.image.config.v1+json",
            "application/vnd.oci.image.layer.v1.tar",
        )
    };
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": manifest_type,
        "config": {"mediaType": config_type, "digest": sha256(&config), "size": config.len()},
        "layers": [{"mediaType": layer_type, "digest": sha256(&layer), "size": layer.len()}],
    }))
    .unwrap();
    let digest = sha256(&manifest);
    let target = match tag {
        Some(tag) => registry.reference(repository, tag),
        None => Reference::with_digest(registry.addr.clone(), repository.into(), digest.clone()),
    };
    client
        .push_manifest_raw(&target, manifest.clone(), manifest_type.parse().unwrap())
        .await
        .unwrap();
    Pushed {
        digest,
        size: manifest.len(),
        media_type: manifest_type,
    }
}

/// The OLM labels `operator-sdk` puts on a bundle image.
pub fn bundle_labels(package: &str) -> serde_json::Value {
    serde_json::json!({
        "operators.operatorframework.io.bundle.mediatype.v1": "registry+v1",
        "operators.operatorframework.io.bundle.manifests.v1": "manifests/",
        "operators.operatorframework.io.bundle.metadata.v1": "metadata/",
        "operators.operatorframework.io.bundle.package.v1": package,
    })
}

/// A gzip-compressed tar of `files` (path, contents).
pub fn tar_gz(files: &[(&str, &str)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, contents) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(contents.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder
            .append_data(&mut header, path, contents.as_bytes())
            .unwrap();
    }
    gzip(&builder.into_inner().unwrap())
}

/// Pushes a single-platform (`linux/arch`) OCI image under `tag` whose one layer holds
/// `files` and whose config carries `labels` (e.g. [`bundle_labels`]): a bundle image
/// as `operator-sdk bundle` builds it `FROM scratch`.
pub async fn push_image_with_files(
    registry: &Registry,
    repository: &str,
    tag: &str,
    arch: &str,
    labels: serde_json::Value,
    files: &[(&str, &str)],
) -> Pushed {
    let (client, reference) = pusher(registry, repository, tag).await;
    let layer = tar_gz(files);
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": arch, "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": []},
        "config": {"Labels": labels},
    }))
    .unwrap();
    for blob in [&config, &layer] {
        client
            .push_blob(&reference, blob.clone(), &sha256(blob))
            .await
            .unwrap();
    }
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha256(&config), "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": sha256(&layer), "size": layer.len()}],
    }))
    .unwrap();
    client
        .push_manifest_raw(&reference, manifest.clone(), OCI_MANIFEST.parse().unwrap())
        .await
        .unwrap();
    Pushed {
        digest: sha256(&manifest),
        size: manifest.len(),
        media_type: OCI_MANIFEST,
    }
}

/// One entry of a layer built by [`layer_tar`].
pub enum TarEntry<'a> {
    /// A regular file, executable.
    File(&'a str, &'a [u8]),
    /// A symbolic link to a target.
    Link(&'a str, &'a str),
}

/// An uncompressed layer tar of `entries` (a whiteout is a file named `.wh.NAME`).
pub fn layer_tar(entries: &[TarEntry<'_>]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for entry in entries {
        let mut header = tar::Header::new_gnu();
        header.set_mode(0o755);
        match entry {
            TarEntry::File(path, data) => {
                header.set_size(data.len() as u64);
                builder.append_data(&mut header, path, *data).unwrap();
            }
            TarEntry::Link(path, target) => {
                header.set_size(0);
                header.set_entry_type(tar::EntryType::Symlink);
                builder.append_link(&mut header, path, target).unwrap();
            }
        }
    }
    builder.into_inner().unwrap()
}

/// `data` gzip-compressed.
pub fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(data).unwrap();
    gz.finish().unwrap()
}

/// Pushes a `linux/arch` OCI image by digest whose layers (bottom first) are `layers`,
/// each gzip-compressed (`+gzip`) or not as its bytes are, and whose config's run
/// settings are `run` (`{"Entrypoint": [...], "Cmd": [...], "Env": [...]}`).
pub async fn push_image_with_layers(
    registry: &Registry,
    repository: &str,
    arch: &str,
    run: serde_json::Value,
    layers: &[Vec<u8>],
) -> Pushed {
    push_image_with_placed_layers(registry, repository, arch, run, layers, &[]).await
}

/// [`push_image_with_layers`], with `placed` layers (digest, size; uncompressed tar)
/// already in the registry's storage ([`Registry::place_blob`]) on top of `layers`.
pub async fn push_image_with_placed_layers(
    registry: &Registry,
    repository: &str,
    arch: &str,
    run: serde_json::Value,
    layers: &[Vec<u8>],
    placed: &[(String, u64)],
) -> Pushed {
    let layers: Vec<(Vec<u8>, serde_json::Value)> = layers
        .iter()
        .map(|l| (l.clone(), serde_json::Value::Null))
        .collect();
    let placed: Vec<PlacedLayer> = placed
        .iter()
        .map(|(digest, size)| PlacedLayer {
            digest: digest.clone(),
            size: *size,
            media_type: "application/vnd.oci.image.layer.v1.tar",
            annotations: serde_json::Value::Null,
        })
        .collect();
    push_image_with_annotated_layers(registry, repository, arch, run, &layers, &placed).await
}

/// A layer already in the registry's storage ([`Registry::place_blob`]), as its
/// descriptor names it.
pub struct PlacedLayer {
    pub digest: String,
    pub size: u64,
    pub media_type: &'static str,
    /// `null`: none.
    pub annotations: serde_json::Value,
}

/// [`push_image_with_placed_layers`], each of `layers` with its descriptor's
/// annotations (`null`: none), as a zstd:chunked layer's
/// ([`crate::chunked_layer::chunked_layer`]).
pub async fn push_image_with_annotated_layers(
    registry: &Registry,
    repository: &str,
    arch: &str,
    run: serde_json::Value,
    layers: &[(Vec<u8>, serde_json::Value)],
    placed: &[PlacedLayer],
) -> Pushed {
    let (client, reference) = pusher(registry, repository, "latest").await;
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": arch, "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": []},
        "config": run,
    }))
    .unwrap();
    let mut descriptors = Vec::new();
    for blob in std::iter::once(&config).chain(layers.iter().map(|(l, _)| l)) {
        client
            .push_blob(&reference, blob.clone(), &sha256(blob))
            .await
            .unwrap();
    }
    for (layer, annotations) in layers {
        let media_type = if layer.starts_with(&[0x1f, 0x8b]) {
            "application/vnd.oci.image.layer.v1.tar+gzip"
        } else if layer.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            "application/vnd.oci.image.layer.v1.tar+zstd"
        } else {
            "application/vnd.oci.image.layer.v1.tar"
        };
        let mut descriptor = serde_json::json!({"mediaType": media_type, "digest": sha256(layer), "size": layer.len()});
        if !annotations.is_null() {
            descriptor["annotations"] = annotations.clone();
        }
        descriptors.push(descriptor);
    }
    for layer in placed {
        let mut descriptor = serde_json::json!({"mediaType": layer.media_type, "digest": layer.digest, "size": layer.size});
        if !layer.annotations.is_null() {
            descriptor["annotations"] = layer.annotations.clone();
        }
        descriptors.push(descriptor);
    }
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha256(&config), "size": config.len()},
        "layers": descriptors,
    }))
    .unwrap();
    let digest = sha256(&manifest);
    let target = Reference::with_digest(registry.addr.clone(), repository.into(), digest.clone());
    client
        .push_manifest_raw(&target, manifest.clone(), OCI_MANIFEST.parse().unwrap())
        .await
        .unwrap();
    Pushed {
        digest,
        size: manifest.len(),
        media_type: OCI_MANIFEST,
    }
}

/// Pushes an index (OCI) or manifest list (Docker) of `entries` under `tag`; each entry
/// is a pushed manifest with its platform JSON and annotations.
pub async fn push_index(
    registry: &Registry,
    repository: &str,
    tag: &str,
    docker: bool,
    entries: &[(Pushed, serde_json::Value, Option<serde_json::Value>)],
) -> Pushed {
    let (client, reference) = pusher(registry, repository, tag).await;
    let media_type = if docker { DOCKER_LIST } else { OCI_INDEX };
    let manifests: Vec<serde_json::Value> = entries
        .iter()
        .map(|(p, platform, annotations)| {
            let mut entry =
                serde_json::json!({"mediaType": p.media_type, "digest": p.digest, "size": p.size});
            if !platform.is_null() {
                entry["platform"] = platform.clone();
            }
            if let Some(a) = annotations {
                entry["annotations"] = a.clone();
            }
            entry
        })
        .collect();
    let body = serde_json::to_vec(
        &serde_json::json!({"schemaVersion": 2, "mediaType": media_type, "manifests": manifests}),
    )
    .unwrap();
    client
        .push_manifest_raw(&reference, body.clone(), media_type.parse().unwrap())
        .await
        .unwrap();
    Pushed {
        digest: sha256(&body),
        size: body.len(),
        media_type,
    }
}

pub fn platform(os: &str, arch: &str, variant: Option<&str>) -> serde_json::Value {
    let mut p = serde_json::json!({"os": os, "architecture": arch});
    if let Some(v) = variant {
        p["variant"] = v.into();
    }
    p
}

/// A TCP server that accepts connections and never answers.
pub async fn silent_server() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    addr
}

/// A plain-HTTP server that answers every request with `status`, `content_type` and
/// `body`, counting requests.
pub async fn canned_server(
    status: u16,
    content_type: &'static str,
    body: &'static str,
) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let counter = count.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut buffer = vec![0u8; 8192];
                loop {
                    let Ok(n) = socket.read(&mut buffer).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    let request = String::from_utf8_lossy(&buffer[..n]);
                    // `/v2/` (the API check) answers 200 so that clients go on to the manifest.
                    let (code, reason, ctype, payload) = if request.starts_with("GET /v2/ ") {
                        (200, "OK", "application/json", "{}")
                    } else {
                        counter.fetch_add(1, Ordering::SeqCst);
                        (
                            status,
                            if status == 200 {
                                "OK"
                            } else {
                                "Internal Server Error"
                            },
                            content_type,
                            body,
                        )
                    };
                    let digest = sha256(payload.as_bytes());
                    let response = format!(
                        "HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\nDocker-Content-Digest: {digest}\r\nContent-Length: {}\r\n\r\n{payload}",
                        payload.len()
                    );
                    if socket.write_all(response.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, count)
}
