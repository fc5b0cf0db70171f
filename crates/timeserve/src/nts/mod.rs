//! Network Time Security (RFC 8915): the key exchange over TLS that hands a client
//! its keys and cookies ([`ke`], [`records`]), the cookies that carry those keys
//! back to any worker ([`cookie`]), the master secret they are sealed under
//! ([`secret_file`]), the authenticated NTP exchange on the UDP workers
//! ([`extension`], [`responder`]), and a client's side of it ([`client`]).
//!
//! One AEAD algorithm is offered: AEAD_AES_SIV_CMAC_256, the one RFC 8915 makes
//! mandatory and the one chrony, NTPsec and ntpd-rs use by default. (The 384 and 512
//! variants add key length, not a property a time client needs.)

pub mod client;
pub mod cookie;
pub mod extension;
pub mod ke;
pub mod records;
pub mod responder;
pub mod secret_file;

use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::nts::cookie::MasterSecret;
pub use crate::nts::cookie::AEAD_AES_SIV_CMAC_256;

/// The master secret shared by the key exchange and every UDP worker; replaced as a
/// whole when SIGHUP re-reads the secret file.
#[derive(Clone, Debug)]
pub struct SharedSecret(Arc<ArcSwap<MasterSecret>>);

impl SharedSecret {
    /// Shares `secret`.
    pub fn new(secret: MasterSecret) -> SharedSecret {
        SharedSecret(Arc::new(ArcSwap::from_pointee(secret)))
    }

    /// The secret now.
    pub fn load(&self) -> Arc<MasterSecret> {
        self.0.load_full()
    }

    /// Replaces the secret for everyone who loads it next.
    pub fn replace(&self, secret: MasterSecret) {
        self.0.store(Arc::new(secret));
    }
}

impl PartialEq for SharedSecret {
    fn eq(&self, other: &SharedSecret) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
