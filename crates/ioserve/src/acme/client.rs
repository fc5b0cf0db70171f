//! The conversation with the CA, on instant-acme (RFC 8555): the account, an order
//! from its authorizations to the issued chain, and the renewal information (RFC
//! 9773).
//!
//! The CA is reached over a hyper client whose rustls trusts the system's roots
//! (Debian's ca-certificates, through rustls-native-certs) and `--acme-ca-root`; each
//! request, its body included, gets [`REQUEST_LIMIT`] (a CA that accepts and then says
//! nothing fails the attempt instead of stalling renewals); it notes a `Retry-After`
//! that the CA sends with an error (a rate limit's 429, a 503), which the manager's
//! backoff honours. A request refused for its nonce (`badNonce`)
//! is sent again with the fresh nonce of the refusal, as RFC 8555 section 6.5 says:
//! instant-acme does so up to three times, and each step here up to
//! [`BAD_NONCE_RETRIES`] more, so that even a CA refusing half the nonces (pebble's
//! `PEBBLE_WFE_NONCEREJECT=50`) costs retries, not orders.

use std::collections::HashSet;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;
use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, BodyWrapper, BytesResponse,
    CertificateIdentifier, ChallengeType, HttpClient, Identifier, NewAccount, NewOrder,
    OrderStatus, RetryPolicy,
};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::CertificateDer;

use crate::acme::challenge::Challenges;
use crate::acme::settings::{AcmeSettings, ChallengeKind};
use crate::acme::store::{AnswerKind, Store, StoreError};

/// Sends of one step after instant-acme's own retries for `badNonce`.
pub const BAD_NONCE_RETRIES: u32 = 8;

/// How long one request to the CA may take, answer and body: a CA that accepts a
/// connection and then says nothing must not stall the renewals.
const REQUEST_LIMIT: Duration = Duration::from_secs(30);

/// How long the CA may take to validate, then to issue.
const POLL: RetryPolicy = RetryPolicy::new()
    .initial_delay(Duration::from_millis(250))
    .backoff(1.5)
    .timeout(Duration::from_secs(120));

/// Why talking to the CA failed.
#[derive(Debug, thiserror::Error)]
pub enum AcmeError {
    /// The CA's roots or address are unusable (a setting to fix, not a moment to wait).
    #[error("{0}")]
    Setup(String),
    /// A step of the conversation failed: the CA's problem document, or why it could
    /// not be reached.
    #[error("{stage}: {}", chain(error))]
    Ca {
        /// What was being done.
        stage: &'static str,
        /// instant-acme's error (a `Problem` from the CA, or the transport's), said in
        /// the message with its causes.
        error: instant_acme::Error,
    },
    /// The CA did not validate a name, with its reasons.
    #[error("validation failed: {0}")]
    Validation(String),
    /// The account could not be kept in the state directory.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl AcmeError {
    fn ca(stage: &'static str) -> impl FnOnce(instant_acme::Error) -> AcmeError {
        move |error| AcmeError::Ca { stage, error }
    }

    /// Whether the CA does not know the account (a CA that lost its state, or one
    /// that was reset): a new account is made.
    pub fn account_unknown(&self) -> bool {
        match self {
            AcmeError::Ca {
                error: instant_acme::Error::Api(problem),
                ..
            } => {
                problem.r#type.as_deref() == Some("urn:ietf:params:acme:error:accountDoesNotExist")
            }
            _ => false,
        }
    }
}

/// An error and its causes, as one line.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let words = cause.to_string();
        // A cause that its error's text already quotes is said once.
        if !text.contains(&words) {
            text.push_str(": ");
            text.push_str(&words);
        }
        source = cause.source();
    }
    text
}

fn is_bad_nonce(error: &instant_acme::Error) -> bool {
    matches!(error, instant_acme::Error::Api(problem)
        if problem.r#type.as_deref() == Some("urn:ietf:params:acme:error:badNonce"))
}

/// Awaits `$call` (an expression making a fresh future each time) again while the CA
/// refuses its nonce, at most [`BAD_NONCE_RETRIES`] times; the error names `$stage`.
macro_rules! nonce_retried {
    ($stage:expr, $call:expr) => {{
        let mut retries = 0;
        loop {
            match $call.await {
                Err(error) if is_bad_nonce(&error) && retries < BAD_NONCE_RETRIES => retries += 1,
                result => break result.map_err(AcmeError::ca($stage)),
            }
        }
    }};
}

/// The HTTP client to the CA: hyper with rustls, each request (its answer and whole
/// body) within a time limit, noting the CA's `Retry-After`.
#[derive(Clone)]
pub struct CaHttp {
    client: HyperClient<hyper_rustls::HttpsConnector<HttpConnector>, BodyWrapper<Bytes>>,
    retry_after: Arc<Mutex<Option<SystemTime>>>,
    limit: Duration,
}

impl CaHttp {
    /// A client trusting the system's roots and those in `extra_roots` (PEM).
    pub fn new(extra_roots: Option<&Path>) -> Result<CaHttp, AcmeError> {
        let mut roots = rustls::RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        roots.add_parsable_certificates(native.certs);
        if let Some(path) = extra_roots {
            let pem = std::fs::read(path).map_err(|error| {
                AcmeError::Setup(format!(
                    "cannot read --acme-ca-root {}: {error}",
                    path.display()
                ))
            })?;
            let certificates = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|error| {
                    AcmeError::Setup(format!(
                        "--acme-ca-root {} is not a PEM certificate file: {error}",
                        path.display()
                    ))
                })?;
            let (added, _) = roots.add_parsable_certificates(certificates);
            if added == 0 {
                return Err(AcmeError::Setup(format!(
                    "--acme-ca-root {} holds no usable certificate (a CERTIFICATE block is needed)",
                    path.display()
                )));
            }
        }
        if roots.is_empty() {
            return Err(AcmeError::Setup(
                "no root certificates to verify the CA with: install ca-certificates or give \
                 --acme-ca-root"
                    .to_string(),
            ));
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|error| AcmeError::Setup(error.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(Duration::from_secs(10)));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_only()
            .enable_http1()
            .enable_http2()
            .wrap_connector(http);
        Ok(CaHttp {
            client: HyperClient::builder(TokioExecutor::new()).build(connector),
            retry_after: Arc::default(),
            limit: REQUEST_LIMIT,
        })
    }

    /// The same client with another limit per request.
    pub fn with_limit(self, limit: Duration) -> CaHttp {
        CaHttp { limit, ..self }
    }

    /// How long the CA asked to wait with its last error response, if it did, and
    /// forgets it.
    pub fn take_retry_after(&self) -> Option<Duration> {
        let at = self
            .retry_after
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()?;
        at.duration_since(SystemTime::now()).ok()
    }
}

impl HttpClient for CaHttp {
    fn request(
        &self,
        request: hyper::Request<BodyWrapper<Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<BytesResponse, instant_acme::Error>> + Send>> {
        let sent = HttpClient::request(&self.client, request);
        let retry_after = Arc::clone(&self.retry_after);
        let limit = self.limit;
        Box::pin(async move {
            // The body is read here, within the limit, not later by instant-acme.
            let answered = tokio::time::timeout(limit, async {
                let mut response = sent.await?;
                let body = response
                    .body
                    .into_bytes()
                    .await
                    .map_err(instant_acme::Error::Other)?;
                Ok::<_, instant_acme::Error>(BytesResponse {
                    parts: response.parts,
                    body: Box::new(body),
                })
            })
            .await;
            let response = match answered {
                Ok(response) => response?,
                Err(_) => {
                    return Err(instant_acme::Error::Other(
                        format!("the CA did not answer within {limit:?}").into(),
                    ))
                }
            };
            let status = response.parts.status;
            if status.is_client_error() || status.is_server_error() {
                let asked = response
                    .parts
                    .headers
                    .get(hyper::header::RETRY_AFTER)
                    .and_then(|value| value.to_str().ok())
                    .and_then(parse_retry_after);
                *retry_after.lock().unwrap_or_else(|e| e.into_inner()) = asked;
            }
            Ok(response)
        })
    }
}

/// A `Retry-After` value: seconds, or an HTTP date.
fn parse_retry_after(value: &str) -> Option<SystemTime> {
    let value = value.trim();
    match value.parse::<u64>() {
        Ok(seconds) => Some(SystemTime::now() + Duration::from_secs(seconds)),
        Err(_) => httpdate::parse_http_date(value).ok(),
    }
}

/// The account at the CA: the stored one, or a new one made (and stored) now.
pub async fn account(
    http: &CaHttp,
    settings: &AcmeSettings,
    store: &Store,
    force_new: bool,
) -> Result<(Account, bool), AcmeError> {
    if !force_new {
        if let Some(json) = store.account()? {
            if let Ok(credentials) = serde_json::from_slice::<AccountCredentials>(&json) {
                let account = Account::builder_with_http(Box::new(http.clone()))
                    .from_credentials(credentials)
                    .await
                    .map_err(AcmeError::ca("loading the account"))?;
                return Ok((account, false));
            }
            tracing::warn!(
                path = %store.root().display(),
                "acme: the stored account is unreadable; making a new one"
            );
        }
    }
    let contact = settings
        .email
        .as_ref()
        .map(|email| format!("mailto:{email}"));
    let contacts: Vec<&str> = contact.iter().map(String::as_str).collect();
    let new = NewAccount {
        contact: &contacts,
        terms_of_service_agreed: true,
        only_return_existing: false,
    };
    let (account, credentials) = nonce_retried!(
        "creating the account",
        Account::builder_with_http(Box::new(http.clone())).create(
            &new,
            settings.directory.clone(),
            None
        )
    )?;
    let json = serde_json::to_vec(&credentials)
        .map_err(|error| AcmeError::Setup(format!("cannot serialise the account: {error}")))?;
    store.save_account(&json)?;
    Ok((account, true))
}

/// When the CA suggests renewing the certificate `identifier` names: a moment in its
/// window, and how long until asking again.
pub async fn renewal_window(
    account: &Account,
    identifier: &CertificateIdentifier<'_>,
) -> Result<((SystemTime, SystemTime), Duration), AcmeError> {
    let (info, ask_again) = account
        .renewal_info(identifier)
        .await
        .map_err(AcmeError::ca("asking for renewal information"))?;
    let window = info.suggested_window;
    Ok(((window.start.into(), window.end.into()), ask_again))
}

/// Orders a certificate for `settings.domains` (replacing `replaces`, when given, as
/// ARI's `replaces` says), answering the challenges through `challenges`; the new key
/// and the chain as one PEM bundle.
pub async fn order(
    account: &Account,
    settings: &AcmeSettings,
    challenges: &Challenges,
    replaces: Option<CertificateIdentifier<'static>>,
) -> Result<String, AcmeError> {
    if let Some(profile) = &settings.profile {
        let offered: Vec<&str> = account.profiles().map(|p| p.name).collect();
        if !offered.is_empty() && !offered.contains(&profile.as_str()) {
            return Err(AcmeError::Setup(format!(
                "the CA offers no profile {profile} (it offers: {})",
                offered.join(", ")
            )));
        }
    }
    let identifiers: Vec<Identifier> = settings
        .domains
        .iter()
        .map(|name| Identifier::Dns(name.clone()))
        .collect();
    let mut new = NewOrder::new(&identifiers);
    if let Some(profile) = &settings.profile {
        new = new.profile(profile);
    }
    if let Some(replaces) = replaces {
        new = new.replaces(replaces);
    }
    let mut order = nonce_retried!("creating the order", account.new_order(&new))?;
    let mut published = Vec::new();
    let result = complete(&mut order, settings, challenges, &mut published).await;
    for (kind, key) in published {
        challenges.withdraw(kind, &key);
    }
    result
}

/// Answers `order`'s authorizations, waits for validation, finalises it with a new key
/// and fetches the chain; each published answer is added to `published`.
async fn complete(
    order: &mut instant_acme::Order,
    settings: &AcmeSettings,
    challenges: &Challenges,
    published: &mut Vec<(AnswerKind, String)>,
) -> Result<String, AcmeError> {
    let (challenge_type, kind) = match settings.challenge {
        ChallengeKind::TlsAlpn01 => (ChallengeType::TlsAlpn01, AnswerKind::TlsAlpn01),
        ChallengeKind::Http01 => (ChallengeType::Http01, AnswerKind::Http01),
    };
    // The authorizations are fetched as they are walked; a walk cut short by a refused
    // nonce starts again, skipping those answered already.
    let mut answered = HashSet::new();
    let mut retries = 0;
    'walk: loop {
        let mut authorizations = order.authorizations();
        while let Some(next) = authorizations.next().await {
            let mut authorization = match next {
                Ok(authorization) => authorization,
                Err(error) if is_bad_nonce(&error) && retries < BAD_NONCE_RETRIES => {
                    retries += 1;
                    continue 'walk;
                }
                Err(error) => return Err(AcmeError::ca("fetching an authorization")(error)),
            };
            let url = authorization.url().to_string();
            if answered.contains(&url) {
                continue;
            }
            match authorization.status {
                AuthorizationStatus::Valid => {
                    answered.insert(url);
                    continue;
                }
                AuthorizationStatus::Pending => {}
                status => {
                    return Err(AcmeError::Validation(format!(
                        "the authorization for {} is {status:?}",
                        authorization.identifier()
                    )))
                }
            }
            let name = authorization.identifier().to_string();
            let Some(mut challenge) = authorization.challenge(challenge_type.clone()) else {
                return Err(AcmeError::Validation(format!(
                    "the CA offers no {} challenge for {name}",
                    settings.challenge.name()
                )));
            };
            let key_authorization = challenge.key_authorization();
            let key = match kind {
                AnswerKind::Http01 => {
                    let token = challenge.token.clone();
                    challenges
                        .publish_http01(&token, key_authorization.as_str())
                        .map_err(|error| {
                            AcmeError::Setup(format!("cannot publish the answer: {error}"))
                        })?;
                    token
                }
                AnswerKind::TlsAlpn01 => {
                    challenges
                        .publish_tls_alpn01(&name, key_authorization.as_str())
                        .map_err(|error| {
                            AcmeError::Setup(format!("cannot publish the answer: {error}"))
                        })?;
                    name.clone()
                }
            };
            published.push((kind, key));
            nonce_retried!("telling the CA the answer is ready", challenge.set_ready())?;
            answered.insert(url);
        }
        break;
    }
    let status = nonce_retried!("waiting for validation", order.poll_ready(&POLL));
    match status {
        Ok(OrderStatus::Ready) => {}
        Ok(_)
        | Err(AcmeError::Ca {
            error: instant_acme::Error::Api(_),
            ..
        }) => {
            return Err(AcmeError::Validation(
                validation_problems(order, status.err()).await,
            ))
        }
        Err(error) => return Err(error),
    }
    let key = rcgen::KeyPair::generate()
        .map_err(|error| AcmeError::Setup(format!("cannot generate a key: {error}")))?;
    let mut params = rcgen::CertificateParams::new(settings.domains.clone())
        .map_err(|error| AcmeError::Setup(format!("cannot make the request: {error}")))?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    let csr = params
        .serialize_request(&key)
        .map_err(|error| AcmeError::Setup(format!("cannot make the request: {error}")))?;
    nonce_retried!("finalising the order", order.finalize_csr(csr.der()))?;
    let chain = nonce_retried!("fetching the certificate", order.poll_certificate(&POLL))?;
    Ok(format!("{}{chain}", key.serialize_pem()))
}

/// Why the CA did not validate: each failed challenge's problem, by name, else the
/// order's own error.
async fn validation_problems(order: &mut instant_acme::Order, error: Option<AcmeError>) -> String {
    let mut problems = Vec::new();
    let mut authorizations = order.authorizations();
    while let Some(Ok(mut authorization)) = authorizations.next().await {
        let Ok(state) = authorization.refresh().await else {
            continue;
        };
        let name = state.identifier().to_string();
        for challenge in &state.challenges {
            if let Some(problem) = &challenge.error {
                problems.push(format!("{name}: {problem}"));
            }
        }
    }
    match (problems.is_empty(), error) {
        (false, _) => problems.join("; "),
        (true, Some(error)) => error.to_string(),
        (true, None) => "the order became invalid".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let in_two_minutes = parse_retry_after("120").unwrap();
        let left = in_two_minutes.duration_since(SystemTime::now()).unwrap();
        assert!(left > Duration::from_secs(118) && left <= Duration::from_secs(120));
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777))
        );
        assert_eq!(parse_retry_after("soon"), None);
    }

    #[tokio::test]
    async fn a_ca_that_says_nothing_is_given_up_on() {
        // Accepts connections and never answers (not even the TLS handshake).
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("https://{}/dir", silent.local_addr().unwrap());
        let http = CaHttp::new(None)
            .unwrap()
            .with_limit(Duration::from_millis(300));
        let request = hyper::Request::get(url.as_str())
            .body(BodyWrapper::default())
            .unwrap();
        let started = std::time::Instant::now();
        let error = HttpClient::request(&http, request).await.err().unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(
            error.to_string().contains("did not answer within 300ms"),
            "{error}"
        );
        drop(silent);
    }

    #[test]
    fn an_unusable_extra_root_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("root.pem");
        std::fs::write(&path, "not pem\n").unwrap();
        let error = CaHttp::new(Some(&path)).err().unwrap().to_string();
        assert!(
            error.contains("root.pem") && error.contains("no usable certificate"),
            "{error}"
        );
        let missing = dir.path().join("missing.pem");
        let error = CaHttp::new(Some(&missing)).err().unwrap().to_string();
        assert!(error.contains("cannot read --acme-ca-root"), "{error}");
    }
}
