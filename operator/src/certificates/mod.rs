//! multiarch's own CA and the serving certificates it signs (the webhook's, the
//! operator's), as Secret data: created when missing, renewed well before they expire,
//! and rotated without dropping a request.
//!
//! The CA bundle the API server trusts holds every CA that is still valid, so a
//! certificate signed by the previous CA keeps working while a new one reaches the pods:
//! a serving certificate is renewed when a third of its life is left (months ahead), the
//! files a pod serves are replaced in place and reloaded, and a new CA joins the bundle
//! before anything is signed with it. No I/O: the caller reads and writes the Secrets.

pub mod authority;
pub mod operands;
pub mod secrets;

use std::{collections::BTreeMap, time::SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use time::OffsetDateTime;
use x509_parser::{certificate::X509Certificate, extensions::GeneralName, pem::Pem};

/// How long the CA is valid.
pub const CA_LIFETIME_SECONDS: i64 = 5 * 365 * 24 * 3600;
/// How long a serving certificate is valid.
pub const SERVING_LIFETIME_SECONDS: i64 = 365 * 24 * 3600;
/// Issued this long before `now`, so a node whose clock is behind still accepts it.
const BACKDATE_SECONDS: i64 = 3600;

/// The keys of the Secrets, as `kubernetes.io/tls` Secrets name them.
pub const CERT_KEY: &str = "tls.crt";
pub const PRIVATE_KEY_KEY: &str = "tls.key";
/// The CA bundle in a serving Secret (for clients such as Prometheus).
pub const CA_KEY: &str = "ca.crt";
/// Every CA still valid, in the CA's Secret: what the API server is told to trust.
pub const BUNDLE_KEY: &str = "ca-bundle.crt";

/// Secret data, decoded.
pub type SecretData = BTreeMap<String, Vec<u8>>;

#[derive(Debug, thiserror::Error)]
pub enum CertificateError {
    #[error("cannot generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("the time is outside the certificates' range")]
    Time,
}

/// Why a certificate is (re)issued, for the log and the event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Renewal {
    Missing,
    Unreadable,
    Expiring {
        seconds_left: i64,
    },
    WrongNames,
    OtherIssuer,
    /// The CA stays; a CA left (or joined) the bundle.
    BundleChanged,
}

impl std::fmt::Display for Renewal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Renewal::Missing => f.write_str("there was none"),
            Renewal::Unreadable => f.write_str("the stored one could not be read"),
            Renewal::Expiring { seconds_left } if *seconds_left <= 0 => {
                f.write_str("the stored one has expired")
            }
            Renewal::Expiring { seconds_left } => {
                write!(f, "the stored one expires in {}", humanize(*seconds_left))
            }
            Renewal::WrongNames => f.write_str("the stored one names other hosts"),
            Renewal::OtherIssuer => f.write_str("the stored one was signed by another CA"),
            Renewal::BundleChanged => f.write_str("the CA bundle changed"),
        }
    }
}

fn humanize(seconds: i64) -> String {
    match seconds {
        s if s < 120 => format!("{s} s"),
        s if s < 7200 => format!("{} min", s / 60),
        s if s < 172_800 => format!("{} h", s / 3600),
        s => format!("{} days", s / 86_400),
    }
}

fn unix(now: SystemTime) -> i64 {
    match now.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(_) => 0,
    }
}

fn at(seconds: i64) -> Result<OffsetDateTime, CertificateError> {
    OffsetDateTime::from_unix_timestamp(seconds).map_err(|_| CertificateError::Time)
}

/// The first certificate of a PEM text, parsed.
fn parse(pem_text: &[u8]) -> Option<(Pem, i64, i64)> {
    let pem = Pem::iter_from_buffer(pem_text).next()?.ok()?;
    let (not_before, not_after) = {
        let cert = pem.parse_x509().ok()?;
        (
            cert.validity().not_before.timestamp(),
            cert.validity().not_after.timestamp(),
        )
    };
    Some((pem, not_before, not_after))
}

fn dns_names(cert: &X509Certificate<'_>) -> Vec<String> {
    let mut names: Vec<String> = cert
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|ext| {
            ext.value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    GeneralName::DNSName(d) => Some((*d).to_owned()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Whether a certificate issued at `not_before`, expiring at `not_after`, is due: a third
/// of its life left.
fn expiring(not_before: i64, not_after: i64, now: i64) -> Option<Renewal> {
    let left = not_after - now;
    (left * 3 < not_after - not_before).then_some(Renewal::Expiring { seconds_left: left })
}

/// multiarch's CA: its certificate and key (PEM), and the bundle of every CA still valid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authority {
    pub cert_pem: String,
    pub key_pem: String,
    pub bundle_pem: String,
}

impl Authority {
    pub fn to_secret_data(&self) -> SecretData {
        BTreeMap::from([
            (CERT_KEY.to_owned(), self.cert_pem.clone().into_bytes()),
            (
                PRIVATE_KEY_KEY.to_owned(),
                self.key_pem.clone().into_bytes(),
            ),
            (BUNDLE_KEY.to_owned(), self.bundle_pem.clone().into_bytes()),
        ])
    }

    pub fn from_secret_data(data: &SecretData) -> Option<Authority> {
        let text = |k: &str| data.get(k).and_then(|v| String::from_utf8(v.clone()).ok());
        Some(Authority {
            cert_pem: text(CERT_KEY)?,
            key_pem: text(PRIVATE_KEY_KEY)?,
            bundle_pem: text(BUNDLE_KEY).unwrap_or_default(),
        })
    }

    fn issuer(&self) -> Result<Issuer<'static, KeyPair>, CertificateError> {
        let key = KeyPair::from_pem(&self.key_pem)?;
        Ok(Issuer::from_ca_cert_pem(&self.cert_pem, key)?)
    }
}

/// A fresh self-signed CA, named after its creation time so two generations differ.
fn new_authority(now: i64) -> Result<(String, String), CertificateError> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, format!("multiarch-ca-{now}"));
    name.push(DnType::OrganizationName, "multiarch");
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = at(now - BACKDATE_SECONDS)?;
    params.not_after = at(now + CA_LIFETIME_SECONDS)?;
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok((canonical(&cert.pem()), key.serialize_pem()))
}

/// The CAs of `current` and `previous` (PEM texts) that are still valid at `now`,
/// current first, each once, in one PEM layout (so equal bundles compare equal).
fn bundle(current: &str, previous: &str, now: i64) -> String {
    let mut seen: Vec<Vec<u8>> = Vec::new();
    let mut out = String::new();
    for text in [current, previous] {
        for pem in Pem::iter_from_buffer(text.as_bytes()).flatten() {
            let Ok(cert) = pem.parse_x509() else { continue };
            if cert.validity().not_after.timestamp() <= now || seen.contains(&pem.contents) {
                continue;
            }
            out.push_str(&pem_text(&pem.contents));
            seen.push(pem.contents.clone());
        }
    }
    out
}

fn pem_text(der: &[u8]) -> String {
    pem::encode(&pem::Pem::new("CERTIFICATE", der.to_vec()))
}

/// One certificate's PEM in the layout bundles use.
fn canonical(cert_pem: &str) -> String {
    Pem::iter_from_buffer(cert_pem.as_bytes())
        .flatten()
        .next()
        .map(|pem| pem_text(&pem.contents))
        .unwrap_or_else(|| cert_pem.to_owned())
}

/// The CA to use from now on, from the stored Secret's data, and why it changed (`None`:
/// the stored data is still right, bundle included).
pub fn ensure_authority(
    stored: Option<&SecretData>,
    now: SystemTime,
) -> Result<(Authority, Option<Renewal>), CertificateError> {
    let now = unix(now);
    let existing = stored.and_then(Authority::from_secret_data);
    let due = match &existing {
        None if stored.is_none() => Some(Renewal::Missing),
        None => Some(Renewal::Unreadable),
        Some(authority) => match parse(authority.cert_pem.as_bytes()) {
            None => Some(Renewal::Unreadable),
            Some(_) if authority.issuer().is_err() => Some(Renewal::Unreadable),
            Some((_, not_before, not_after)) => expiring(not_before, not_after, now),
        },
    };
    match (existing, due) {
        (Some(authority), None) => {
            // Still good; the bundle may only need expired CAs dropped (or the current
            // one added, for data written by hand).
            let fresh = bundle(&authority.cert_pem, &authority.bundle_pem, now);
            if fresh == authority.bundle_pem {
                Ok((authority, None))
            } else {
                Ok((
                    Authority {
                        bundle_pem: fresh,
                        ..authority
                    },
                    Some(Renewal::BundleChanged),
                ))
            }
        }
        (existing, Some(why)) => {
            let (cert_pem, key_pem) = new_authority(now)?;
            // The old CA stays trusted until it expires: what it signed keeps working.
            let previous = existing
                .map(|a| format!("{}{}", a.bundle_pem, a.cert_pem))
                .unwrap_or_default();
            let bundle_pem = bundle(&cert_pem, &previous, now);
            Ok((
                Authority {
                    cert_pem,
                    key_pem,
                    bundle_pem,
                },
                Some(why),
            ))
        }
        (None, None) => unreachable!("no authority is always due"),
    }
}

/// Whether the serving certificate in `stored` is still right for `dns_names`, signed by
/// `authority`'s current CA.
pub fn serving_due(
    stored: Option<&SecretData>,
    authority: &Authority,
    dns_names_wanted: &[String],
    now: SystemTime,
) -> Option<Renewal> {
    let now = unix(now);
    let Some(data) = stored else {
        return Some(Renewal::Missing);
    };
    let Some(cert_pem) = data.get(CERT_KEY) else {
        return Some(Renewal::Missing);
    };
    if data.get(PRIVATE_KEY_KEY).is_none() {
        return Some(Renewal::Unreadable);
    }
    let Some((pem, not_before, not_after)) = parse(cert_pem) else {
        return Some(Renewal::Unreadable);
    };
    let Ok(cert) = pem.parse_x509() else {
        return Some(Renewal::Unreadable);
    };
    let mut wanted = dns_names_wanted.to_vec();
    wanted.sort();
    if dns_names(&cert) != wanted {
        return Some(Renewal::WrongNames);
    }
    let Some((ca_pem, _, _)) = parse(authority.cert_pem.as_bytes()) else {
        return Some(Renewal::OtherIssuer);
    };
    let signed_by_ca = ca_pem
        .parse_x509()
        .is_ok_and(|ca| cert.verify_signature(Some(ca.public_key())).is_ok());
    if !signed_by_ca {
        return Some(Renewal::OtherIssuer);
    }
    if data.get(CA_KEY).map(Vec::as_slice) != Some(authority.bundle_pem.as_bytes()) {
        // Only the bundle changed (a CA expired or was added): reissuing is not needed,
        // but the Secret must be rewritten; the caller sees that from the data.
        return None;
    }
    expiring(not_before, not_after, now)
}

/// What a certificate proves, as its extended key usage says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Usage {
    /// A server's identity: for its DNS names.
    Server,
    /// A client's identity: one of multiarch's components calling another (the image
    /// inspector's callers), with no names.
    Client,
}

/// The common name of client certificates.
pub const CLIENT_COMMON_NAME: &str = "multiarch-component";

/// A serving certificate for `dns_names` signed by `authority`, as Secret data.
pub fn issue_serving(
    authority: &Authority,
    dns_names_wanted: &[String],
    now: SystemTime,
) -> Result<SecretData, CertificateError> {
    issue(authority, dns_names_wanted, Usage::Server, now)
}

/// A certificate for `usage` (and `dns_names` when a server's) signed by `authority`,
/// as Secret data.
pub fn issue(
    authority: &Authority,
    dns_names_wanted: &[String],
    usage: Usage,
    now: SystemTime,
) -> Result<SecretData, CertificateError> {
    let now = unix(now);
    let mut params = CertificateParams::new(dns_names_wanted.to_vec())?;
    let mut name = DistinguishedName::new();
    match (usage, dns_names_wanted.first()) {
        (Usage::Server, Some(first)) => name.push(DnType::CommonName, first.clone()),
        (Usage::Server, None) => {}
        (Usage::Client, _) => name.push(DnType::CommonName, CLIENT_COMMON_NAME),
    }
    params.distinguished_name = name;
    params.extended_key_usages = vec![match usage {
        Usage::Server => ExtendedKeyUsagePurpose::ServerAuth,
        Usage::Client => ExtendedKeyUsagePurpose::ClientAuth,
    }];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.not_before = at(now - BACKDATE_SECONDS)?;
    params.not_after = at(now + SERVING_LIFETIME_SECONDS)?;
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &authority.issuer()?)?;
    Ok(serving_data(
        &canonical(&cert.pem()),
        &key.serialize_pem(),
        &authority.bundle_pem,
    ))
}

/// Serving Secret data: the certificate, its key and the CA bundle.
pub fn serving_data(cert_pem: &str, key_pem: &str, bundle_pem: &str) -> SecretData {
    BTreeMap::from([
        (CERT_KEY.to_owned(), cert_pem.as_bytes().to_vec()),
        (PRIVATE_KEY_KEY.to_owned(), key_pem.as_bytes().to_vec()),
        (CA_KEY.to_owned(), bundle_pem.as_bytes().to_vec()),
    ])
}

/// The serving Secret's data to store: the stored one when it is still right (with the
/// current bundle), else a new certificate; and why it was reissued.
pub fn ensure_serving(
    stored: Option<&SecretData>,
    authority: &Authority,
    dns_names_wanted: &[String],
    now: SystemTime,
) -> Result<(SecretData, Option<Renewal>), CertificateError> {
    ensure(stored, authority, dns_names_wanted, Usage::Server, now)
}

/// [`ensure_serving`] for a certificate of `usage`.
pub fn ensure(
    stored: Option<&SecretData>,
    authority: &Authority,
    dns_names_wanted: &[String],
    usage: Usage,
    now: SystemTime,
) -> Result<(SecretData, Option<Renewal>), CertificateError> {
    match serving_due(stored, authority, dns_names_wanted, now) {
        Some(why) => Ok((issue(authority, dns_names_wanted, usage, now)?, Some(why))),
        None => {
            let mut data = stored.cloned().unwrap_or_default();
            data.insert(CA_KEY.to_owned(), authority.bundle_pem.as_bytes().to_vec());
            Ok((data, None))
        }
    }
}

/// When the certificate in `data` expires (Unix seconds), if it can be read.
pub fn expires_at(data: &SecretData) -> Option<i64> {
    parse(data.get(CERT_KEY)?).map(|(_, _, not_after)| not_after)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn names() -> Vec<String> {
        vec![
            "multiarch-webhook.multiarch.svc".into(),
            "multiarch-webhook.multiarch.svc.cluster.local".into(),
        ]
    }

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)
    }

    const NOW: u64 = 1_800_000_000;

    #[test]
    fn a_missing_ca_and_certificate_are_created_then_left_alone() {
        let (ca, why) = ensure_authority(None, at(NOW)).unwrap();
        assert_eq!(why, Some(Renewal::Missing));
        assert!(ca.bundle_pem.contains(ca.cert_pem.trim_end()));
        let (again, why) = ensure_authority(Some(&ca.to_secret_data()), at(NOW + 60)).unwrap();
        assert_eq!(why, None);
        assert_eq!(again, ca);

        let (serving, why) = ensure_serving(None, &ca, &names(), at(NOW)).unwrap();
        assert_eq!(why, Some(Renewal::Missing));
        let (same, why) = ensure_serving(Some(&serving), &ca, &names(), at(NOW + 60)).unwrap();
        assert_eq!(why, None);
        assert_eq!(same, serving);
        assert_eq!(
            expires_at(&serving),
            Some(NOW as i64 + SERVING_LIFETIME_SECONDS)
        );
    }

    #[test]
    fn a_certificate_is_renewed_with_a_third_of_its_life_left_or_when_it_is_wrong() {
        let (ca, _) = ensure_authority(None, at(NOW)).unwrap();
        let (serving, _) = ensure_serving(None, &ca, &names(), at(NOW)).unwrap();
        let two_thirds = NOW + (SERVING_LIFETIME_SECONDS as u64 * 2 / 3) + 3600;
        assert!(matches!(
            serving_due(Some(&serving), &ca, &names(), at(two_thirds)),
            Some(Renewal::Expiring { .. })
        ));
        let other = vec!["elsewhere.svc".to_owned()];
        assert_eq!(
            serving_due(Some(&serving), &ca, &other, at(NOW)),
            Some(Renewal::WrongNames)
        );
        let (other_ca, _) = ensure_authority(None, at(NOW + 1)).unwrap();
        assert_eq!(
            serving_due(Some(&serving), &other_ca, &names(), at(NOW)),
            Some(Renewal::OtherIssuer)
        );
        let mut broken = serving.clone();
        broken.insert(CERT_KEY.into(), b"garbage".to_vec());
        assert_eq!(
            serving_due(Some(&broken), &ca, &names(), at(NOW)),
            Some(Renewal::Unreadable)
        );
    }

    #[test]
    fn a_new_ca_keeps_the_old_one_in_the_bundle_until_it_expires() {
        let (old, _) = ensure_authority(None, at(NOW)).unwrap();
        let late = NOW + (CA_LIFETIME_SECONDS as u64 * 2 / 3) + 3600;
        let (new, why) = ensure_authority(Some(&old.to_secret_data()), at(late)).unwrap();
        assert!(matches!(why, Some(Renewal::Expiring { .. })), "{why:?}");
        assert_ne!(new.cert_pem, old.cert_pem);
        assert!(new.bundle_pem.contains(new.cert_pem.trim_end()));
        assert!(new.bundle_pem.contains(old.cert_pem.trim_end()));
        // A certificate the old CA signed is replaced, and the old CA leaves the bundle
        // once it has expired.
        let (serving, _) = ensure_serving(None, &old, &names(), at(NOW)).unwrap();
        assert_eq!(
            serving_due(Some(&serving), &new, &names(), at(late)),
            Some(Renewal::OtherIssuer)
        );
        let after_old = NOW + CA_LIFETIME_SECONDS as u64 + 10;
        let (kept, why) = ensure_authority(Some(&new.to_secret_data()), at(after_old)).unwrap();
        assert_eq!(why, Some(Renewal::BundleChanged));
        assert!(!kept.bundle_pem.contains(old.cert_pem.trim_end()));
        assert_eq!(kept.cert_pem, new.cert_pem);
    }

    #[test]
    fn reasons_read_as_sentences() {
        assert_eq!(
            Renewal::Expiring { seconds_left: 60 }.to_string(),
            "the stored one expires in 60 s"
        );
        assert_eq!(
            Renewal::Expiring {
                seconds_left: 30 * 86_400
            }
            .to_string(),
            "the stored one expires in 30 days"
        );
    }
}
