//! Where a registry may send the inspector. A pod names any registry, so a hostile one
//! could answer with a redirect (or a token realm) pointing at the cluster's inside: the
//! cloud metadata service at 169.254.169.254, the API server, another pod's port, the
//! inspector's own loopback. The inspector would fetch it and put the status or the
//! parse error in the pod's events: a scanner and an oracle for the inside.
//!
//! So a registry's session follows at most [`MAX_REDIRECTS`] hops, never from HTTPS to
//! plain HTTP, and never to an internal address (loopback, link-local, private, shared
//! and unique-local ranges) of a host other than the registry's own: IP literals are
//! checked as the redirect is read, host names as they are resolved (by the session's
//! resolver, so a name that resolves to an internal address is refused at connect, with
//! no TOCTOU between check and use). The registry's own host is reachable as it is when
//! a pod names it, so this adds no reach beyond that. A registry configured with
//! `allowInternalRedirects` (in-cluster registries that redirect blobs to in-cluster
//! storage) is exempt.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::Arc,
};

use reqwest::{
    Url,
    dns::{Addrs, Name, Resolve, Resolving},
    redirect,
};

/// Hops a registry may redirect a request through.
pub const MAX_REDIRECTS: usize = 5;

/// In every refusal's message, so that a refusal reported through reqwest's or
/// oci-client's errors is told from a network failure (it is final: no retry).
const REFUSAL: &str = "may send the inspector only";

/// Whether an error's text is one of this policy's refusals.
pub fn is_refusal(text: &str) -> bool {
    text.contains(REFUSAL)
}

/// Whether `ip` is inside a cluster or a host rather than on the internet.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => internal_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => internal_v4(v4),
            None => internal_v6(v6),
        },
    }
}

fn internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        // Shared address space (carrier-grade NAT, and some clusters' pod networks).
        || (a == 100 && (64..128).contains(&b))
        // "This network".
        || a == 0
}

fn internal_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    ip.is_loopback()
        || ip.is_unspecified()
        // Unique local fc00::/7 and link-local fe80::/10.
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
}

/// The host of a `host[:port]` registry name, without brackets.
fn host_of(registry: &str) -> &str {
    if let Some(rest) = registry.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    registry.split(':').next().unwrap_or(registry)
}

/// What a registry's session may reach besides the registry itself.
#[derive(Clone, Debug)]
pub struct AddressPolicy {
    /// The registry's host: always reachable, whatever its address.
    registry_host: String,
    /// The registry's name, for messages.
    registry: String,
    allow_internal: bool,
}

impl AddressPolicy {
    pub fn new(registry: &str, allow_internal: bool) -> Self {
        AddressPolicy {
            registry_host: host_of(registry).to_ascii_lowercase(),
            registry: registry.to_owned(),
            allow_internal,
        }
    }

    fn refusal(&self, target: &str, why: &str) -> String {
        format!(
            "{target} refused: {why}; the registry {} {REFUSAL} to public addresses, over at most {MAX_REDIRECTS} redirects (set allowInternalRedirects for it in the registry settings to allow internal ones)",
            self.registry
        )
    }

    /// Whether the inspector may fetch `url`, which the registry named (a redirect's
    /// target, a token realm); host names are checked again when resolved.
    pub fn check_url(&self, url: &Url) -> Result<(), String> {
        if self.allow_internal {
            return Ok(());
        }
        let Some(host) = url.host() else {
            return Err(self.refusal(url.as_str(), "it names no host"));
        };
        let ip = match host {
            url::Host::Ipv4(v4) => IpAddr::V4(v4),
            url::Host::Ipv6(v6) => IpAddr::V6(v6),
            url::Host::Domain(name) => {
                let name = name.to_ascii_lowercase();
                if name != self.registry_host
                    && (name == "localhost" || name.ends_with(".localhost"))
                {
                    return Err(self.refusal(url.as_str(), "it is a loopback name"));
                }
                return Ok(());
            }
        };
        if is_internal(ip) && ip.to_string() != self.registry_host.trim_matches(['[', ']']) {
            return Err(self.refusal(url.as_str(), "it is an internal address"));
        }
        Ok(())
    }

    /// reqwest's redirect policy for the session: the hop limit, no downgrade to plain
    /// HTTP from HTTPS, and [`check_url`](Self::check_url) on every target.
    pub fn redirects(&self) -> redirect::Policy {
        let policy = self.clone();
        redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() > MAX_REDIRECTS {
                let message = policy.refusal(
                    attempt.url().as_str(),
                    &format!("the registry redirected more than {MAX_REDIRECTS} times"),
                );
                return attempt.error(message);
            }
            let downgraded = attempt
                .previous()
                .last()
                .is_some_and(|from| from.scheme() == "https")
                && attempt.url().scheme() != "https";
            if downgraded {
                let message = policy.refusal(
                    attempt.url().as_str(),
                    "it would turn an HTTPS request into plain HTTP",
                );
                return attempt.error(message);
            }
            match policy.check_url(attempt.url()) {
                Ok(()) => attempt.follow(),
                Err(message) => attempt.error(message),
            }
        })
    }

    /// The session's resolver: the registry's own host resolves as usual; another host
    /// only to its public addresses, and is refused when it has none.
    pub fn resolver(&self) -> Arc<GuardedResolver> {
        Arc::new(GuardedResolver {
            policy: self.clone(),
        })
    }
}

/// See [`AddressPolicy::resolver`].
pub struct GuardedResolver {
    policy: AddressPolicy,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_ascii_lowercase();
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if policy.allow_internal || host == policy.registry_host {
                return Ok(Box::new(found.into_iter()) as Addrs);
            }
            let public: Vec<SocketAddr> = found
                .iter()
                .copied()
                .filter(|a| !is_internal(a.ip()))
                .collect();
            if public.is_empty() && !found.is_empty() {
                let message = policy.refusal(&host, "it resolves only to internal addresses");
                return Err(message.into());
            }
            Ok(Box::new(public.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_ranges() {
        for internal in [
            "127.0.0.1",
            "10.96.0.1",
            "172.16.0.5",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:169.254.169.254",
        ] {
            assert!(is_internal(internal.parse().unwrap()), "{internal}");
        }
        for public in ["8.8.8.8", "172.32.0.1", "100.128.0.1", "2001:4860::8888"] {
            assert!(!is_internal(public.parse().unwrap()), "{public}");
        }
    }

    #[test]
    fn targets_named_by_a_registry() {
        let policy = AddressPolicy::new("registry.example.com:5000", false);
        let check = |url: &str| policy.check_url(&Url::parse(url).unwrap());
        assert!(check("https://cdn.example.net/blob").is_ok());
        let metadata = check("http://169.254.169.254/latest/meta-data/").unwrap_err();
        assert_eq!(
            metadata,
            "http://169.254.169.254/latest/meta-data/ refused: it is an internal address; the registry registry.example.com:5000 may send the inspector only to public addresses, over at most 5 redirects (set allowInternalRedirects for it in the registry settings to allow internal ones)"
        );
        assert!(check("http://[::1]:8080/metrics").is_err());
        assert!(check("http://localhost:8080/").is_err());
        assert!(check("http://10.0.0.1:6443/api").is_err());

        // The registry's own host is reachable, as when a pod names it.
        let local = AddressPolicy::new("127.0.0.1:5000", false);
        assert!(
            local
                .check_url(&Url::parse("http://127.0.0.1:5001/x").unwrap())
                .is_ok()
        );
        assert!(
            local
                .check_url(&Url::parse("http://10.0.0.1/x").unwrap())
                .is_err()
        );
        // Allowed by the settings.
        let allowed = AddressPolicy::new("registry.example.com", true);
        assert!(
            allowed
                .check_url(&Url::parse("http://10.0.0.1/x").unwrap())
                .is_ok()
        );
        assert_eq!(host_of("[::1]:5000"), "::1");
    }

    /// A host name is checked where it is used: when the session resolves it (here
    /// `localhost`, from /etc/hosts: no DNS server is asked).
    #[tokio::test]
    async fn names_that_resolve_only_to_internal_addresses_are_refused() {
        let resolve = |registry: &str, allow: bool| {
            AddressPolicy::new(registry, allow)
                .resolver()
                .resolve("localhost".parse().unwrap_or_else(|_| unreachable!()))
        };
        let refused = match resolve("registry.example.com", false).await {
            Ok(_) => panic!("localhost resolved for another registry"),
            Err(e) => e.to_string(),
        };
        assert!(
            refused.starts_with("localhost refused: it resolves only to internal addresses"),
            "{refused}"
        );
        assert!(is_refusal(&refused));
        // The registry's own name, or a registry allowed internal addresses: resolved.
        for (registry, allow) in [("localhost:5000", false), ("registry.example.com", true)] {
            let found: Vec<SocketAddr> = match resolve(registry, allow).await {
                Ok(addrs) => addrs.collect(),
                Err(e) => panic!("{registry}: {e}"),
            };
            assert!(found.iter().all(|a| a.ip().is_loopback()) && !found.is_empty());
        }
    }
}
