//! Registry GETs (manifests, the image config blob) whose bodies are bounded while they
//! stream: oci-client reads a whole manifest (and a whole token response) into memory
//! before anyone can check its size, so a registry that answers with an endless body could
//! exhaust the inspector's memory. Here the `Content-Length` is checked first and the body
//! read chunk by chunk up to the limit; token responses likewise. Registry token auth (the
//! distribution spec's Bearer challenge, or Basic) is done here too, tokens cached per
//! repository. Errors are oci-client's, so that they are classified as every other
//! registry error.

use std::{
    num::NonZeroUsize,
    sync::{Arc, Mutex},
};

use lru::LruCache;
use oci_client::errors::OciDistributionError;
use reqwest::{StatusCode, header};
use sha2::{Digest, Sha256};

use crate::{
    address_policy::AddressPolicy, body_budget::BodyBudget, image::ImageRef, keyring::Credential,
    manifest::MAX_MANIFEST_BYTES,
};
use multiarch_runtime::byte_budget::Reservation;

/// A token response is a few KiB of JSON.
const MAX_TOKEN_BYTES: usize = 64 * 1024;
/// What is kept of an error body for the message.
const MAX_ERROR_BYTES: usize = 4 * 1024;

/// One registry, one credential: the HTTP client and the tokens it was given.
pub(crate) struct BoundedFetch {
    http: reqwest::Client,
    scheme: &'static str,
    tokens: Mutex<LruCache<String, String>>,
    /// Where the registry may send requests (its token service's address included).
    addresses: AddressPolicy,
    /// Shared by every session of the inspector; this one's bytes count as `registry`'s.
    budget: Arc<BodyBudget>,
    registry: String,
}

#[derive(serde::Deserialize)]
struct TokenResponse {
    token: Option<String>,
    access_token: Option<String>,
}

enum Authorization<'a> {
    None,
    Bearer(String),
    Basic(&'a Credential),
}

/// Where a body's bytes are counted while it streams: the inspector's budget, the
/// registry (named in a refusal; its share is the address that answers), and whether
/// the body is parsed while held (then what parsing makes of it is counted too).
#[derive(Clone, Copy)]
struct Budget<'a> {
    budget: &'a BodyBudget,
    registry: &'a str,
    parsed: bool,
}

/// Reads `response`'s body, or `Err(bytes)` once it passes `limit` bytes (having read
/// no more than one chunk beyond it); each chunk is reserved from `budget` first, and
/// the body fails when there is no room.
async fn bounded_body(
    response: reqwest::Response,
    limit: usize,
    budget: Option<Budget<'_>>,
) -> Result<Result<Vec<u8>, usize>, OciDistributionError> {
    Ok(held_body(response, limit, budget)
        .await?
        .map(|(body, _released)| body))
}

/// [`bounded_body`], with the body's reservation for the caller to hold while it uses
/// the body (a manifest while it is parsed).
async fn held_body(
    mut response: reqwest::Response,
    limit: usize,
    budget: Option<Budget<'_>>,
) -> Result<Result<(Vec<u8>, Reservation), usize>, OciDistributionError> {
    if let Some(length) = response.content_length()
        && usize::try_from(length).map_or(true, |l| l > limit)
    {
        return Ok(Err(usize::try_from(length).unwrap_or(usize::MAX)));
    }
    // The share is the address answering, not the name as written: one registry
    // reached by many names (aliases, ports, case, wildcard DNS) has one share.
    let share = response
        .remote_addr()
        .map(|address| address.ip().to_string());
    let mut reservation = Reservation::default();
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > limit {
            return Ok(Err(body.len() + chunk.len()));
        }
        if let Some(Budget {
            budget,
            registry,
            parsed,
        }) = budget
        {
            // What parsing makes of a body is bounded by its bytes (every list and map
            // is bounded while it streams, see `manifest`): counted with them.
            let bytes = if parsed { 2 * chunk.len() } else { chunk.len() };
            budget
                .reserve(
                    share.as_deref().unwrap_or(registry),
                    registry,
                    bytes,
                    &mut reservation,
                )
                .map_err(|why| OciDistributionError::GenericError(Some(why)))?;
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Ok((body, reservation)))
}

/// The body's sha256 digest, checked against `wanted` when that is a sha256 digest: what
/// is fetched by digest is content-addressed, so it must hash to it.
fn content_addressed(
    body: &[u8],
    wanted: Option<&str>,
    what: &str,
) -> Result<String, OciDistributionError> {
    let computed = format!("sha256:{}", hex::encode(Sha256::digest(body)));
    if let Some(wanted) = wanted
        && wanted.starts_with("sha256:")
        && wanted != computed
    {
        return Err(OciDistributionError::SpecViolationError(format!(
            "the {what} does not match its digest {wanted} (it hashes to {computed})"
        )));
    }
    Ok(computed)
}

/// The first bytes of an error body, for the message.
async fn error_text(response: reqwest::Response) -> String {
    match bounded_body(response, MAX_ERROR_BYTES, None).await {
        Ok(Ok(body)) => String::from_utf8_lossy(&body).trim().to_owned(),
        Ok(Err(_)) => "(an error body of over 4 KiB)".to_owned(),
        Err(e) => format!("(unreadable error body: {e})"),
    }
}

impl BoundedFetch {
    pub(crate) fn new(
        http: reqwest::Client,
        insecure: bool,
        addresses: AddressPolicy,
        (budget, registry): (Arc<BodyBudget>, &str),
    ) -> Self {
        BoundedFetch {
            http,
            scheme: if insecure { "http" } else { "https" },
            tokens: Mutex::new(LruCache::new(NonZeroUsize::MIN.saturating_add(255))),
            addresses,
            budget,
            registry: registry.to_owned(),
        }
    }

    /// The budget for a body read whole, or for one `parsed` while it is held.
    fn budget(&self, parsed: bool) -> Option<Budget<'_>> {
        Some(Budget {
            budget: &self.budget,
            registry: &self.registry,
            parsed,
        })
    }

    fn url(&self, image: &ImageRef) -> String {
        let reference = image.reference();
        let target = reference.digest().or(reference.tag()).unwrap_or("latest");
        format!(
            "{}://{}/v2/{}/manifests/{target}",
            self.scheme,
            image.registry(),
            image.repository()
        )
    }

    fn cached_token(&self, repository: &str) -> Option<String> {
        self.tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(repository)
            .cloned()
    }

    async fn send(
        &self,
        url: &str,
        accept: &str,
        range: Option<&str>,
        authorization: &Authorization<'_>,
    ) -> Result<reqwest::Response, OciDistributionError> {
        let mut request = self.http.get(url).header(header::ACCEPT, accept);
        if let Some(range) = range {
            request = request.header(header::RANGE, range);
        }
        let request = match authorization {
            Authorization::None => request,
            Authorization::Bearer(token) => request.bearer_auth(token),
            Authorization::Basic(c) => request.basic_auth(&c.username, Some(&c.password)),
        };
        Ok(request.send().await?)
    }

    /// A GET of `url` in `repository`, answering the registry's challenge once; the
    /// successful response (its body not yet read).
    async fn authorized_get(
        &self,
        url: &str,
        accept: &str,
        range: Option<&str>,
        repository: &str,
        credential: Option<&Credential>,
    ) -> Result<reqwest::Response, OciDistributionError> {
        let first = match self.cached_token(repository) {
            Some(token) => Authorization::Bearer(token),
            None => Authorization::None,
        };
        let mut response = self.send(url, accept, range, &first).await?;
        if response.status() == StatusCode::UNAUTHORIZED {
            let challenge = response
                .headers()
                .get(header::WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let Some(authorization) = self
                .answer(challenge.as_deref(), credential, repository, url)
                .await?
            else {
                return Err(OciDistributionError::UnauthorizedError {
                    url: url.to_owned(),
                });
            };
            response = self.send(url, accept, range, &authorization).await?;
        }
        let status = response.status();
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            self.tokens
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .pop(repository);
            return Err(OciDistributionError::UnauthorizedError {
                url: url.to_owned(),
            });
        }
        if status == StatusCode::NOT_FOUND {
            return Err(OciDistributionError::ImageManifestNotFoundError(
                url.to_owned(),
            ));
        }
        if !status.is_success() {
            return Err(OciDistributionError::ServerError {
                code: status.as_u16(),
                message: error_text(response).await,
                url: url.to_owned(),
            });
        }
        Ok(response)
    }

    /// Where the registry serves one of `image`'s blobs.
    fn blob_url(&self, image: &ImageRef, digest: &str) -> String {
        format!(
            "{}://{}/v2/{}/blobs/{digest}",
            self.scheme,
            image.registry(),
            image.repository()
        )
    }

    /// A blob (the image config) of at most `limit` bytes, checked against its digest;
    /// `Err(bytes)` when it is larger (never read further than that). Registries often
    /// redirect blobs to storage elsewhere; reqwest drops the credentials on such a hop.
    pub(crate) async fn get_blob(
        &self,
        image: &ImageRef,
        credential: Option<&Credential>,
        digest: &str,
        limit: usize,
    ) -> Result<Result<Vec<u8>, usize>, OciDistributionError> {
        let url = self.blob_url(image, digest);
        let response = self
            .authorized_get(&url, "*/*", None, image.repository(), credential)
            .await?;
        let body = match bounded_body(response, limit, self.budget(false)).await? {
            Ok(body) => body,
            Err(bytes) => return Ok(Err(bytes)),
        };
        content_addressed(&body, Some(digest), "blob")?;
        Ok(Ok(body))
    }

    /// A blob's response, its body not yet read: for a layer streamed through (see
    /// `binary_reading`), which bounds what it reads itself.
    pub(crate) async fn blob_response(
        &self,
        image: &ImageRef,
        credential: Option<&Credential>,
        digest: &str,
    ) -> Result<reqwest::Response, OciDistributionError> {
        let url = self.blob_url(image, digest);
        self.authorized_get(&url, "*/*", None, image.repository(), credential)
            .await
    }

    /// The bytes `range` of a blob, as [`BoundedFetch::blob_response`]: a registry that
    /// serves ranges answers `206 Partial Content`, one that does not answers the whole
    /// blob with `200`, which the caller must not read.
    pub(crate) async fn blob_range_response(
        &self,
        image: &ImageRef,
        credential: Option<&Credential>,
        digest: &str,
        range: std::ops::Range<u64>,
    ) -> Result<reqwest::Response, OciDistributionError> {
        let url = self.blob_url(image, digest);
        // HTTP ranges name their last byte.
        let bytes = format!("bytes={}-{}", range.start, range.end.saturating_sub(1));
        self.authorized_get(&url, "*/*", Some(&bytes), image.repository(), credential)
            .await
    }

    /// The manifest's bytes, its digest and its hold on the memory budget (kept while
    /// it is parsed), or `Err(bytes)` when it is over [`MAX_MANIFEST_BYTES`] (never read
    /// further than that).
    pub(crate) async fn get(
        &self,
        image: &ImageRef,
        credential: Option<&Credential>,
        accepted: &[&str],
    ) -> Result<Result<(Vec<u8>, String, Reservation), usize>, OciDistributionError> {
        let url = self.url(image);
        let response = self
            .authorized_get(
                &url,
                &accepted.join(", "),
                None,
                image.repository(),
                credential,
            )
            .await?;
        let header_digest = response
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let (body, held) = match held_body(response, MAX_MANIFEST_BYTES, self.budget(true)).await? {
            Ok(body) => body,
            Err(bytes) => return Ok(Err(bytes)),
        };
        let computed = content_addressed(&body, image.reference().digest(), "manifest")?;
        let digest = image
            .reference()
            .digest()
            .map(str::to_owned)
            .or(header_digest)
            .unwrap_or(computed);
        Ok(Ok((body, digest, held)))
    }

    /// How to answer the registry's challenge: a token from its realm (with the
    /// credential, if any), or Basic with the credential; `None` when it cannot be
    /// answered.
    async fn answer<'c>(
        &self,
        challenge: Option<&str>,
        credential: Option<&'c Credential>,
        repository: &str,
        url: &str,
    ) -> Result<Option<Authorization<'c>>, OciDistributionError> {
        let Some(challenge) = challenge else {
            return Ok(None);
        };
        let challenges = http_auth::parse_challenges(challenge).map_err(|e| {
            OciDistributionError::AuthenticationFailure(format!(
                "unreadable WWW-Authenticate from {url}: {e}"
            ))
        })?;
        for c in &challenges {
            if c.scheme.eq_ignore_ascii_case("basic") {
                return Ok(credential.map(Authorization::Basic));
            }
            if !c.scheme.eq_ignore_ascii_case("bearer") {
                continue;
            }
            let param = |name: &str| {
                c.params
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.to_unescaped())
            };
            let Some(realm) = param("realm") else {
                continue;
            };
            let realm_url = reqwest::Url::parse(&realm).map_err(|e| {
                OciDistributionError::AuthenticationFailure(format!(
                    "the registry named an invalid token service {realm:?}: {e}"
                ))
            })?;
            self.addresses.check_url(&realm_url).map_err(|why| {
                OciDistributionError::GenericError(Some(format!("its token service {why}")))
            })?;
            let mut query = vec![("scope", format!("repository:{repository}:pull"))];
            if let Some(service) = param("service") {
                query.push(("service", service));
            }
            let mut request = self.http.get(&realm).query(&query);
            if let Some(c) = credential {
                request = request.basic_auth(&c.username, Some(&c.password));
            }
            let response = request.send().await?;
            if !response.status().is_success() {
                return Err(OciDistributionError::AuthenticationFailure(format!(
                    "the token service {realm} answered {}",
                    response.status()
                )));
            }
            let body = bounded_body(response, MAX_TOKEN_BYTES, self.budget(true))
                .await?
                .map_err(|bytes| {
                    OciDistributionError::AuthenticationFailure(format!(
                        "the token response from {realm} exceeds 64 KiB ({bytes} bytes or more)"
                    ))
                })?;
            let token: TokenResponse = serde_json::from_slice(&body).map_err(|e| {
                OciDistributionError::AuthenticationFailure(format!(
                    "unreadable token response from {realm}: {e}"
                ))
            })?;
            let Some(token) = token.token.or(token.access_token) else {
                return Err(OciDistributionError::AuthenticationFailure(format!(
                    "the token response from {realm} has no token"
                )));
            };
            self.tokens
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .put(repository.to_owned(), token.clone());
            return Ok(Some(Authorization::Bearer(token)));
        }
        Ok(None)
    }
}
