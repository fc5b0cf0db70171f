//! What the metrics report of ACME: the served certificate's expiry, per name, and the
//! orders placed, by result.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use crate::acme::certificates::Certificates;

/// How an order ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrderResult {
    /// A certificate was issued and stored.
    Issued,
    /// The CA refused, failed or could not be reached, or the result could not be
    /// stored.
    Failed,
}

impl OrderResult {
    /// Every result, in the order the metrics list them.
    pub const ALL: [OrderResult; 2] = [OrderResult::Issued, OrderResult::Failed];

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            OrderResult::Issued => "issued",
            OrderResult::Failed => "failed",
        }
    }
}

/// The counters and the certificate the metrics read at each scrape.
#[derive(Debug)]
pub struct AcmeStatus {
    certificates: Arc<Certificates>,
    orders: [AtomicU64; OrderResult::ALL.len()],
}

impl AcmeStatus {
    /// The status of the server serving `certificates`.
    pub fn new(certificates: Arc<Certificates>) -> AcmeStatus {
        AcmeStatus {
            certificates,
            orders: Default::default(),
        }
    }

    /// Counts an order that ended with `result`.
    pub fn order(&self, result: OrderResult) {
        self.orders[result as usize].fetch_add(1, Relaxed);
    }

    /// Orders by result.
    pub fn orders(&self) -> impl Iterator<Item = (OrderResult, u64)> + '_ {
        OrderResult::ALL
            .into_iter()
            .map(|result| (result, self.orders[result as usize].load(Relaxed)))
    }

    /// Each name of the served certificate with its expiry (seconds since the Unix
    /// epoch); nothing before the first certificate.
    pub fn expiry(&self) -> Vec<(String, i64)> {
        self.certificates
            .current()
            .map(|certificate| {
                let expiry = certificate.expiry_timestamp();
                certificate
                    .names
                    .iter()
                    .map(|name| (name.clone(), expiry))
                    .collect()
            })
            .unwrap_or_default()
    }
}
