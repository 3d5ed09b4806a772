//! The Secrets multiarch's certificates are kept in, and which certificates the CA signs
//! for the operands. No I/O.

use base64::Engine;
use serde_json::{Value, json};

use crate::{
    certificates::{CertificateError, SecretData, Usage, ensure_authority, issue},
    install::{self, Settings, WEBHOOK_TLS_SECRET},
};

/// A Secret of type `type_` with `data`.
pub fn secret(settings: &Settings, name: &str, type_: &str, data: &SecretData) -> Value {
    let encoded: serde_json::Map<String, Value> = data
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                json!(base64::engine::general_purpose::STANDARD.encode(v)),
            )
        })
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": type_,
        "metadata": {"name": name, "namespace": settings.namespace, "labels": install::labels("certificates")},
        "data": encoded,
    })
}

/// A certificate multiarch's CA signs: the Secret it is kept in, the names it is for,
/// what it proves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Certificate {
    pub secret: &'static str,
    pub dns_names: Vec<String>,
    pub usage: Usage,
}

/// Every certificate the CA signs for the operands (the operator's own aside): the
/// webhook's, the inspector's, and the one the inspector's callers present. The operator
/// keeps them; `multiarch certificates` prints them.
pub fn certificates(settings: &Settings) -> [Certificate; 3] {
    [
        Certificate {
            secret: WEBHOOK_TLS_SECRET,
            dns_names: install::webhook_dns_names(settings),
            usage: Usage::Server,
        },
        Certificate {
            secret: install::INSPECTOR_TLS_SECRET,
            dns_names: install::inspector_dns_names(settings),
            usage: Usage::Server,
        },
        Certificate {
            secret: install::INSPECTOR_CLIENT_SECRET,
            dns_names: Vec::new(),
            usage: Usage::Client,
        },
    ]
}

/// The certificates of an install without the operator (`multiarch certificates`): a
/// new CA, the webhook's and the inspector's serving certificates and the inspector's
/// clients' certificate, as Secrets, and the CA bundle (base64) the
/// MutatingWebhookConfiguration's `caBundle` needs. The CA's key is not kept: running
/// the command again replaces them all.
pub fn static_install_secrets(
    settings: &Settings,
    now: std::time::SystemTime,
) -> Result<(Vec<Value>, String), CertificateError> {
    let (authority, _) = ensure_authority(None, now)?;
    let mut secrets = Vec::new();
    for wanted in certificates(settings) {
        let data = issue(&authority, &wanted.dns_names, wanted.usage, now)?;
        secrets.push(secret(settings, wanted.secret, "kubernetes.io/tls", &data));
    }
    let bundle = base64::engine::general_purpose::STANDARD.encode(&authority.bundle_pem);
    Ok((secrets, bundle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_install_without_the_operator_gets_every_certificate_from_one_ca() {
        use x509_parser::pem::Pem;
        let settings = Settings::default();
        let now = std::time::SystemTime::now();
        let (secrets, bundle) = static_install_secrets(&settings, now).unwrap();
        let names: Vec<&str> = secrets
            .iter()
            .map(|s| s["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                WEBHOOK_TLS_SECRET,
                install::INSPECTOR_TLS_SECRET,
                install::INSPECTOR_CLIENT_SECRET
            ]
        );
        let decode = |text: &str| {
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .unwrap()
        };
        let ca_pem = decode(&bundle);
        let ca = Pem::iter_from_buffer(&ca_pem).next().unwrap().unwrap();
        let ca = ca.parse_x509().unwrap();
        for secret in &secrets {
            assert_eq!(secret["type"], "kubernetes.io/tls");
            assert_eq!(decode(secret["data"]["ca.crt"].as_str().unwrap()), ca_pem);
            let cert_pem = decode(secret["data"]["tls.crt"].as_str().unwrap());
            let cert = Pem::iter_from_buffer(&cert_pem).next().unwrap().unwrap();
            let cert = cert.parse_x509().unwrap();
            assert!(cert.verify_signature(Some(ca.public_key())).is_ok());
            let usage = cert.extended_key_usage().unwrap().unwrap().value;
            let client = secret["metadata"]["name"] == install::INSPECTOR_CLIENT_SECRET;
            assert_eq!((usage.client_auth, usage.server_auth), (client, !client));
        }
    }
}
