//! The loop that keeps a valid certificate served: it loads the stored one, orders
//! when there is none or renewal is due, stores and serves the result, and backs off
//! after failures while the served certificate goes on serving.
//!
//! Each turn:
//! 1. A newer certificate in the state directory (a replica's, or this process's own
//!    from an earlier start) is served.
//! 2. If renewal is not due, it sleeps until it is, looking at the state directory
//!    again every twentieth of the certificate's lifetime (1 s to 10 min) for a
//!    replica's renewal.
//! 3. When due, it takes the certificate's lock in the state directory; a replica that
//!    holds it is ordering, and this process waits for its result. With the lock it
//!    looks once more (the holder before it may just have stored a certificate), then
//!    orders, stores, serves, and releases the lock.
//!
//! The CA being down, a rate limit or a failed validation leaves the served
//! certificate in place and is logged once per attempt with the CA's problem; the next
//! attempt comes after the [`Backoff`]'s wait. An order after one that failed with
//! ARI's `replaces` is sent without it (a CA that lost its state, or a replaced
//! certificate it no longer knows, refuses the field).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use instant_acme::Account;
use tokio_util::sync::CancellationToken;

use crate::acme::certificate::{rfc3339, Certificate};
use crate::acme::certificates::Certificates;
use crate::acme::challenge::Challenges;
use crate::acme::client::{self, AcmeError, CaHttp};
use crate::acme::schedule::{self, Backoff};
use crate::acme::settings::AcmeSettings;
use crate::acme::status::{AcmeStatus, OrderResult};
use crate::acme::store::Store;

/// How often a replica waiting for another's first certificate looks for it.
const WAIT_FOR_REPLICA: Duration = Duration::from_secs(1);
/// How often a certificate that could not be kept is written again.
const UNSAVED_RETRY: Duration = Duration::from_secs(10);

/// When the served certificate is to be renewed, and why then.
#[derive(Clone, Debug)]
struct Renewal {
    /// The serial of the certificate it is for.
    serial: String,
    /// The moment.
    at: SystemTime,
    /// When to ask the CA's renewal information again, if it answered.
    ask_again: Option<SystemTime>,
}

/// Gets and renews the certificate of one set of names.
pub struct Manager {
    settings: AcmeSettings,
    store: Store,
    /// The state directory was made and written; until then nothing is ordered.
    store_ready: bool,
    certificates: Arc<Certificates>,
    status: Arc<AcmeStatus>,
    http: CaHttp,
    account: Option<Account>,
    backoff: Backoff,
    renewal: Option<Renewal>,
    /// The last order sent with `replaces` failed: send the next without it.
    skip_replaces: bool,
    /// A certificate served but not yet kept (the state directory's disk was full, or
    /// it could not be written): written as soon as it can be.
    unsaved: Option<Vec<u8>>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("settings", &self.settings)
            .field("renewal", &self.renewal)
            .finish_non_exhaustive()
    }
}

impl Manager {
    /// Prepares the state directory and serves a valid stored certificate at once (a
    /// start with one orders nothing). An unusable `--acme-ca-root` is an error; a
    /// state directory that cannot be written is logged, and retried by [`Manager::run`].
    pub fn start(settings: AcmeSettings) -> Result<Manager, AcmeError> {
        let http = CaHttp::new(settings.ca_root.as_deref())?;
        let store = Store::new(&settings.state, &settings.directory);
        let store_ready = match store.prepare() {
            Ok(()) => true,
            Err(error) => {
                tracing::error!(%error, "acme: cannot write the state directory; ordering waits until it can be");
                false
            }
        };
        let certificates = Arc::new(Certificates::new(Challenges::with_store(Some(
            store.clone(),
        ))));
        let status = Arc::new(AcmeStatus::new(Arc::clone(&certificates)));
        let manager = Manager {
            settings,
            store,
            store_ready,
            certificates,
            status,
            http,
            account: None,
            backoff: Backoff::default(),
            renewal: None,
            skip_replaces: false,
            unsaved: None,
        };
        if let Some(stored) = manager.stored() {
            tracing::info!(
                names = manager.settings.domains.join(","),
                serial = stored.serial,
                not_after = rfc3339(stored.not_after),
                "acme: using the stored certificate"
            );
            manager.certificates.serve(stored);
        }
        Ok(manager)
    }

    /// The served certificate and the challenge answers (for the TLS listeners).
    pub fn certificates(&self) -> Arc<Certificates> {
        Arc::clone(&self.certificates)
    }

    /// What the metrics report.
    pub fn status(&self) -> Arc<AcmeStatus> {
        Arc::clone(&self.status)
    }

    /// The name the certificate is stored and locked under: its first name.
    fn name(&self) -> &str {
        &self.settings.domains[0]
    }

    /// The stored certificate, if it is usable: readable, for every name, not expired.
    fn stored(&self) -> Option<Certificate> {
        let pem = match self.store.certificate(self.name()) {
            Ok(pem) => pem?,
            Err(error) => {
                tracing::warn!(%error, "acme: cannot read the stored certificate");
                return None;
            }
        };
        match Certificate::from_pem(&pem) {
            Ok(certificate)
                if certificate.covers(&self.settings.domains)
                    && certificate.valid_at(SystemTime::now()) =>
            {
                Some(certificate)
            }
            Ok(_) => None,
            Err(error) => {
                tracing::warn!(
                    path = %self.store.certificate_path(self.name()).display(),
                    %error,
                    "acme: the stored certificate is unusable; ordering a new one"
                );
                None
            }
        }
    }

    /// Serves the stored certificate when it is newer than the one served (a replica
    /// renewed); whether it did.
    fn adopt_stored(&mut self) -> bool {
        let Some(stored) = self.stored() else {
            return false;
        };
        let newer = match self.certificates.current() {
            None => true,
            Some(current) => {
                current.serial != stored.serial && stored.not_after > current.not_after
            }
        };
        if newer {
            tracing::info!(
                names = self.settings.domains.join(","),
                serial = stored.serial,
                not_after = rfc3339(stored.not_after),
                "acme: loaded the certificate another replica obtained"
            );
            self.certificates.serve(stored);
            self.backoff.succeeded();
        }
        newer
    }

    /// Runs until `shutdown`: keeps a valid certificate served.
    pub async fn run(mut self, shutdown: CancellationToken) {
        loop {
            let wait = self.turn().await;
            let wait = match self.unsaved {
                Some(_) => wait.min(UNSAVED_RETRY),
                None => wait,
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Writes the certificate that could not be kept when it was obtained, if there is
    /// one; quietly while the state directory still refuses it (that was said).
    fn keep_unsaved(&mut self) {
        let Some(pem) = &self.unsaved else {
            return;
        };
        if self.store.save_certificate(self.name(), pem).is_ok() {
            tracing::info!(
                names = self.settings.domains.join(","),
                "acme: the state directory takes the certificate again; it is kept now"
            );
            self.unsaved = None;
        }
    }

    /// One turn of the loop; how long to sleep before the next.
    async fn turn(&mut self) -> Duration {
        self.keep_unsaved();
        if !self.store_ready {
            match self.store.prepare() {
                Ok(()) => self.store_ready = true,
                Err(error) => {
                    tracing::error!(%error, "acme: cannot write the state directory; ordering waits until it can be");
                    return self.failed(None);
                }
            }
        }
        self.adopt_stored();
        let due = self.due_at().await;
        let now = SystemTime::now();
        if due > now {
            return due
                .duration_since(now)
                .unwrap_or_default()
                .min(self.recheck());
        }
        let lock = match self.store.try_lock(self.name()) {
            Ok(Some(lock)) => lock,
            Ok(None) => {
                tracing::debug!("acme: a replica is ordering; waiting for its certificate");
                return WAIT_FOR_REPLICA;
            }
            Err(error) => {
                tracing::error!(%error, "acme: cannot write the state directory; ordering waits until it can be");
                return self.failed(None);
            }
        };
        // The replica that held the lock before may have just stored a certificate.
        if self.adopt_stored() && self.due_at().await > SystemTime::now() {
            return Duration::ZERO;
        }
        let wait = self.order().await;
        drop(lock);
        wait
    }

    /// Places an order and serves its certificate; how long to wait before the next
    /// turn.
    async fn order(&mut self) -> Duration {
        let replaces = match self.skip_replaces {
            true => None,
            false => self
                .certificates
                .current()
                .and_then(|current| current.identifier.clone()),
        };
        let had_replaces = replaces.is_some();
        tracing::info!(
            names = self.settings.domains.join(","),
            ca = self.settings.directory,
            challenge = self.settings.challenge.name(),
            renewal = self.certificates.current().is_some(),
            "acme: ordering a certificate"
        );
        match self.issue(replaces).await {
            Ok(certificate) => {
                self.status.order(OrderResult::Issued);
                self.skip_replaces = false;
                self.backoff.succeeded();
                tracing::info!(
                    names = self.settings.domains.join(","),
                    serial = certificate.serial,
                    not_after = rfc3339(certificate.not_after),
                    "acme: certificate obtained"
                );
                self.certificates.serve(certificate);
                self.renewal = None;
                Duration::ZERO
            }
            Err(error) => {
                self.status.order(OrderResult::Failed);
                self.skip_replaces = had_replaces;
                if error.account_unknown() {
                    self.account = None;
                }
                let wait = self.failed(Some(&error));
                tracing::error!(
                    names = self.settings.domains.join(","),
                    ca = self.settings.directory,
                    error = %error,
                    retry_in = format!("{:.1}s", wait.as_secs_f64()),
                    "acme: order failed; the served certificate, if any, stays"
                );
                wait
            }
        }
    }

    /// The account (made when the CA does not know the stored one), then an order,
    /// stored.
    async fn issue(
        &mut self,
        replaces: Option<instant_acme::CertificateIdentifier<'static>>,
    ) -> Result<Certificate, AcmeError> {
        let account = self.account().await?;
        let pem = match client::order(
            &account,
            &self.settings,
            &self.certificates.challenges,
            replaces.clone(),
        )
        .await
        {
            Err(error) if error.account_unknown() => {
                tracing::warn!("acme: the CA does not know the stored account; making a new one");
                let (account, _) =
                    client::account(&self.http, &self.settings, &self.store, true).await?;
                self.account = Some(account.clone());
                client::order(
                    &account,
                    &self.settings,
                    &self.certificates.challenges,
                    None,
                )
                .await?
            }
            result => result?,
        };
        let certificate = Certificate::from_pem(pem.as_bytes()).map_err(|error| {
            AcmeError::Validation(format!("the CA issued an unusable certificate: {error}"))
        })?;
        match self.store.save_certificate(self.name(), pem.as_bytes()) {
            Ok(()) => self.unsaved = None,
            Err(error) => {
                // Served anyway, and written as soon as the directory takes it (a full
                // disk): until then a restart would order again.
                tracing::error!(
                    %error,
                    "acme: cannot write the state directory; the new certificate is served, and kept once it can be written"
                );
                self.unsaved = Some(pem.clone().into_bytes());
            }
        }
        Ok(certificate)
    }

    /// The account, loaded (or made) once.
    async fn account(&mut self) -> Result<Account, AcmeError> {
        if let Some(account) = &self.account {
            return Ok(account.clone());
        }
        let (account, made) =
            client::account(&self.http, &self.settings, &self.store, false).await?;
        if made {
            tracing::info!(ca = self.settings.directory, "acme: account created");
        }
        self.account = Some(account.clone());
        Ok(account)
    }

    /// When the served certificate is to be renewed: now without one (or one that does
    /// not name every name, or has expired); else in the CA's suggested window (but
    /// no later than when a tenth of its lifetime is left), asked again when the CA
    /// said to; else when a third of its lifetime is left.
    async fn due_at(&mut self) -> SystemTime {
        let now = SystemTime::now();
        let Some(current) = self.certificates.current() else {
            return now;
        };
        if !current.covers(&self.settings.domains) || !current.valid_at(now) {
            return now;
        }
        if let Some(renewal) = &self.renewal {
            let fresh = renewal.ask_again.is_none_or(|again| now < again);
            if renewal.serial == current.serial && fresh {
                return renewal.at;
            }
        }
        let mut renewal = Renewal {
            serial: current.serial.clone(),
            at: schedule::one_third_left(current.not_before, current.not_after),
            ask_again: None,
        };
        let mut source = "a third of the lifetime left";
        if let (Some(identifier), Ok(account)) = (&current.identifier, self.account().await) {
            match client::renewal_window(&account, identifier).await {
                Ok(((start, end), ask_again)) => {
                    renewal.at = schedule::in_window(start, end, fastrand::f64())
                        .min(schedule::latest(current.not_before, current.not_after));
                    renewal.ask_again = Some(now + ask_again.max(Duration::from_secs(1)));
                    source = "the CA's renewal window (ARI)";
                }
                Err(error) => {
                    tracing::debug!(%error, "acme: no renewal information; renewing when a third of the lifetime is left")
                }
            }
        }
        let changed = self
            .renewal
            .as_ref()
            .is_none_or(|old| old.serial != renewal.serial || old.at != renewal.at);
        if changed {
            tracing::info!(
                serial = renewal.serial,
                at = rfc3339(renewal.at),
                by = source,
                "acme: renewal scheduled"
            );
        }
        let at = renewal.at;
        self.renewal = Some(renewal);
        at
    }

    /// How often to look at the state directory for a replica's renewal.
    fn recheck(&self) -> Duration {
        self.certificates
            .current()
            .map_or(WAIT_FOR_REPLICA, |current| {
                (current.lifetime() / 20).clamp(Duration::from_secs(1), Duration::from_secs(600))
            })
    }

    /// The wait after a failure (`error`, if it came from the CA, may carry its
    /// `Retry-After`).
    fn failed(&mut self, error: Option<&AcmeError>) -> Duration {
        let left = self
            .certificates
            .current()
            .and_then(|current| current.not_after.duration_since(SystemTime::now()).ok());
        let retry_after = error.and_then(|_| self.http.take_retry_after());
        self.backoff
            .after_failure(left, retry_after, fastrand::f64())
    }
}
