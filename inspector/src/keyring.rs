//! Pull credentials from `kubernetes.io/dockerconfigjson` and `kubernetes.io/dockercfg`
//! secrets (or a container runtime auth file), matched to an image the way the kubelet
//! does: host globs per DNS label (`*.example.com`), optional port, path prefix, most
//! specific first. Secrets never reach a log: `Credential`'s `Debug` hides them.

use std::{collections::BTreeMap, fmt};

use base64::Engine;
use serde::Deserialize;

#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    pub username: String,
    pub password: String,
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credential")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KeyringError {
    #[error("the docker config is not valid JSON: {0}")]
    Json(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    /// Host pattern (may hold `*` labels), with port when given.
    host: String,
    port: Option<String>,
    path: String,
    credential: Credential,
}

/// Every credential from every secret of a pod, in the order to try them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Keyring {
    entries: Vec<Entry>,
}

#[derive(Deserialize)]
struct ConfigJson {
    #[serde(default)]
    auths: BTreeMap<String, AuthEntry>,
}

#[derive(Deserialize, Default)]
struct AuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

impl Keyring {
    /// Adds the entries of a `.dockerconfigjson` (`{"auths": {...}}`).
    pub fn add_docker_config_json(&mut self, bytes: &[u8]) -> Result<(), KeyringError> {
        let config: ConfigJson =
            serde_json::from_slice(bytes).map_err(|e| KeyringError::Json(e.to_string()))?;
        self.add_auths(config.auths);
        Ok(())
    }

    /// Adds the entries of a legacy `.dockercfg` (the `auths` map itself).
    pub fn add_dockercfg(&mut self, bytes: &[u8]) -> Result<(), KeyringError> {
        let auths: BTreeMap<String, AuthEntry> =
            serde_json::from_slice(bytes).map_err(|e| KeyringError::Json(e.to_string()))?;
        self.add_auths(auths);
        Ok(())
    }

    fn add_auths(&mut self, auths: BTreeMap<String, AuthEntry>) {
        for (key, entry) in auths {
            let Some(credential) = decode(&entry) else {
                continue;
            };
            let (host, port, path) = split_registry_key(&key);
            self.entries.push(Entry {
                host,
                port,
                path,
                credential,
            });
        }
        // Most specific first: longer paths, then hosts without wildcards, then longer hosts.
        self.entries.sort_by(|a, b| {
            b.path
                .len()
                .cmp(&a.path.len())
                .then_with(|| a.host.contains('*').cmp(&b.host.contains('*')))
                .then_with(|| b.host.len().cmp(&a.host.len()))
        });
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// About what the keyring holds in memory.
    pub fn bytes(&self) -> usize {
        self.entries
            .iter()
            .map(|e| {
                std::mem::size_of::<Entry>()
                    + e.host.len()
                    + e.port.as_ref().map_or(0, String::len)
                    + e.path.len()
                    + e.credential.username.len()
                    + e.credential.password.len()
            })
            .sum()
    }

    /// Credentials that apply to `registry/repository`, best first (the kubelet tries each,
    /// then anonymous).
    pub fn lookup(&self, registry: &str, repository: &str) -> Vec<&Credential> {
        let (host, port) = match registry.rsplit_once(':') {
            Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => (h, Some(p)),
            _ => (registry, None),
        };
        let hosts: &[&str] =
            if host == "docker.io" || host == "index.docker.io" || host == "registry-1.docker.io" {
                &["docker.io", "index.docker.io", "registry-1.docker.io"]
            } else {
                std::slice::from_ref(&host)
            };
        let mut out: Vec<&Credential> = Vec::new();
        for e in &self.entries {
            let host_ok = hosts.iter().any(|h| host_matches(&e.host, h));
            let port_ok = e.port.as_deref() == port;
            let path_ok = e.path.is_empty()
                || repository == e.path
                || repository.starts_with(&format!("{}/", e.path));
            if host_ok && port_ok && path_ok && !out.contains(&&e.credential) {
                out.push(&e.credential);
            }
        }
        out
    }
}

fn decode(entry: &AuthEntry) -> Option<Credential> {
    if let (Some(u), Some(p)) = (&entry.username, &entry.password)
        && !u.is_empty()
    {
        return Some(Credential {
            username: u.clone(),
            password: p.clone(),
        });
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(entry.auth.as_deref()?.trim())
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (u, p) = text.split_once(':')?;
    Some(Credential {
        username: u.to_owned(),
        password: p.to_owned(),
    })
}

/// `https://registry.example.com:5000/v1/team` → (`registry.example.com`, `5000`, `team`).
fn split_registry_key(key: &str) -> (String, Option<String>, String) {
    let key = key.trim();
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let (authority, path) = key.split_once('/').unwrap_or((key, ""));
    let path = path.trim_end_matches('/');
    // `index.docker.io/v1/` style suffixes are not repository paths.
    let path = if path == "v1" || path == "v2" {
        ""
    } else {
        path
    };
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => (h, Some(p.to_owned())),
        _ => (authority, None),
    };
    (host.to_ascii_lowercase(), port, path.to_owned())
}

/// Label-wise glob: `*.example.com` matches `a.example.com`, not `a.b.example.com` or
/// `example.com` (the kubelet's `URLsMatch`).
fn host_matches(pattern: &str, host: &str) -> bool {
    let p: Vec<&str> = pattern.split('.').collect();
    let h: Vec<&str> = host.split('.').collect();
    p.len() == h.len()
        && p.iter()
            .zip(&h)
            .all(|(p, h)| *p == "*" || p.eq_ignore_ascii_case(h) || glob(p, h))
}

/// A label with `*` inside (`reg*`) matches as a prefix/suffix glob.
fn glob(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        Some((prefix, suffix)) => {
            text.len() >= prefix.len() + suffix.len()
                && text.starts_with(prefix)
                && text.ends_with(suffix)
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(user: &str, pass: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
    }

    fn ring(json: &str) -> Keyring {
        let mut k = Keyring::default();
        k.add_docker_config_json(json.as_bytes()).unwrap();
        k
    }

    #[test]
    fn matches_hosts_ports_paths_and_wildcards_like_the_kubelet() {
        let k = ring(&format!(
            r#"{{"auths": {{
              "quay.io": {{"auth": "{}"}},
              "quay.io/team": {{"auth": "{}"}},
              "*.example.com": {{"auth": "{}"}},
              "registry.local:5000": {{"username": "local", "password": "pw"}},
              "https://index.docker.io/v1/": {{"auth": "{}"}}
            }}}}"#,
            auth("any", "1"),
            auth("team", "2"),
            auth("wild", "3"),
            auth("hub", "4")
        ));
        let users = |registry: &str, repo: &str| -> Vec<String> {
            k.lookup(registry, repo)
                .iter()
                .map(|c| c.username.clone())
                .collect()
        };
        assert_eq!(users("quay.io", "team/app"), ["team", "any"]);
        assert_eq!(users("quay.io", "other/app"), ["any"]);
        assert_eq!(users("a.example.com", "x"), ["wild"]);
        assert!(users("a.b.example.com", "x").is_empty());
        assert!(users("example.com", "x").is_empty());
        assert_eq!(users("registry.local:5000", "x"), ["local"]);
        assert!(
            users("registry.local", "x").is_empty(),
            "the port must match"
        );
        assert_eq!(users("docker.io", "library/nginx"), ["hub"]);
        assert!(users("ghcr.io", "x").is_empty());
    }

    #[test]
    fn several_secrets_merge_and_dockercfg_is_read() {
        let mut k = ring(&format!(
            r#"{{"auths": {{"quay.io": {{"auth": "{}"}}}}}}"#,
            auth("a", "1")
        ));
        k.add_dockercfg(format!(r#"{{"ghcr.io": {{"auth": "{}"}}}}"#, auth("b", "2")).as_bytes())
            .unwrap();
        assert_eq!(k.lookup("ghcr.io", "x")[0].username, "b");
        assert_eq!(k.lookup("quay.io", "x")[0].username, "a");
    }

    #[test]
    fn broken_entries_are_skipped_and_secrets_never_print() {
        let k = ring(
            r#"{"auths": {"quay.io": {"auth": "not base64!"}, "ghcr.io": {"auth": "bm9jb2xvbg=="}}}"#,
        );
        assert!(k.is_empty());
        assert!(Keyring::default().add_docker_config_json(b"{").is_err());
        let c = Credential {
            username: "u".into(),
            password: "hunter2".into(),
        };
        assert!(!format!("{c:?}").contains("hunter2"));
    }
}
