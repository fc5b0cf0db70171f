//! Scenario 5, renewal: pebble's `shortlived` profile issues 60-second certificates;
//! for three minutes a fresh handshake each second must present a certificate that
//! has not expired, at least three distinct serials must appear, and renewals must go
//! on after pebble is killed for 15 s and a new pebble (a new root, no accounts)
//! takes its place on the same ports. The outage starts just after a renewal, so that
//! the certificate served through it has most of its minute left: pebble's renewal
//! window for a 60 s certificate spans its whole life, and one renewed late in it
//! would expire during a 15 s outage, which no client can prevent. The handshakes do not verify the chain (it leads
//! to either pebble's root); a verified download against the new root closes the
//! scenario.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context as _, Result};

use super::client::{self, ServedCert};
use super::process::{wait_until, Look};
use super::scenarios::{
    check_state_dir, expect_issued_by_pebble, stop_cleanly, unix_now, Setup, FILE, METRICS_WAIT,
};
use super::server::{AcmeServer, EXPIRY_GAUGE, ORDERS_TOTAL};
use super::{Env, DOMAIN, ISSUANCE_WAIT};

/// The shortlived profile's validity period.
const VALIDITY_S: u64 = 60;
/// How long the handshakes go on once the first certificate is there.
const RUN_FOR: Duration = Duration::from_secs(180);
/// From when, after the first certificate, pebble is killed: at the first renewal
/// seen from then on (within 54 s, the latest a renewal is scheduled).
const OUTAGE_FROM: Duration = Duration::from_secs(40);
/// How long pebble stays down.
const OUTAGE: Duration = Duration::from_secs(15);
/// One handshake per this.
const EVERY: Duration = Duration::from_secs(1);
/// The fewest distinct serials the run must see.
const MIN_SERIALS: usize = 3;

/// Where the run is with respect to pebble's outage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    /// The first pebble runs.
    Before,
    /// No pebble runs.
    Outage,
    /// The second pebble runs.
    After,
}

/// A serial seen in the run: when first and last, and its certificate.
struct Seen {
    first: Duration,
    last: Duration,
    phase: Phase,
    cert: ServedCert,
}

/// 5: renewal of 60 s certificates for three minutes, across a pebble restart.
pub(crate) fn renewal(env: &Env) -> Result<()> {
    let mut setup = Setup::new(env, |settings| settings.shortlived_validity = VALIDITY_S)?;
    setup.args.profile = Some("shortlived");
    let mut server = AcmeServer::start(env, "ioserve", &setup.args)?;
    let line = server.wait_for_certificate(ISSUANCE_WAIT)?;
    eprintln!("xtask acme: {}", line.trim());
    let first = server.served()?;
    ensure!(
        first.not_after - first.not_before < VALIDITY_S as i64 + 5,
        "expected a {VALIDITY_S} s certificate (--acme-profile shortlived); the one served is \
         valid from {} to {} ({} s)",
        first.not_before,
        first.not_after,
        first.not_after - first.not_before
    );

    let started = Instant::now();
    let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
    let mut phase = Phase::Before;
    let mut outage_started: Option<Instant> = None;
    let mut new_issuer = None;
    let mut handshakes = 0usize;
    let mut least_margin = i64::MAX;
    while started.elapsed() < RUN_FOR {
        let round = Instant::now();
        if phase == Phase::Outage && outage_started.is_some_and(|at| at.elapsed() >= OUTAGE) {
            setup.pebble.start_again()?;
            let intermediate = setup.pebble.intermediate()?;
            let issuer = client::subject(intermediate.as_bytes())?;
            eprintln!(
                "xtask acme: at {:.0?}: a new pebble, issuing as {issuer}",
                started.elapsed()
            );
            new_issuer = Some(issuer);
            phase = Phase::After;
        }
        server.alive()?;
        let now = unix_now();
        let at = started.elapsed();
        let served = server.served().with_context(|| {
            format!("handshake at {at:.0?} of the run ({phase:?} pebble's outage)")
        })?;
        served.must_name(DOMAIN)?;
        ensure!(
            served.not_after > now,
            "at {at:.0?} of the run ({phase:?} pebble's outage) ioserve served an expired \
             certificate: serial {}, notAfter {} <= now {now}",
            served.serial,
            served.not_after
        );
        least_margin = least_margin.min(served.not_after - now);
        handshakes += 1;
        let renewed = !seen.contains_key(&served.serial);
        seen.entry(served.serial.clone())
            .and_modify(|entry| entry.last = at)
            .or_insert(Seen {
                first: at,
                last: at,
                phase,
                cert: served,
            });
        if phase == Phase::Before && renewed && at >= OUTAGE_FROM {
            setup.pebble.kill();
            phase = Phase::Outage;
            outage_started = Some(Instant::now());
            eprintln!(
                "xtask acme: at {at:.0?}, just after a renewal: pebble killed for {OUTAGE:?}"
            );
        }
        std::thread::sleep(EVERY.saturating_sub(round.elapsed()));
    }

    eprintln!(
        "xtask acme: {handshakes} handshakes over {:.0?}, none expired (least time left {least_margin} s); serials:",
        started.elapsed()
    );
    let mut by_first: Vec<(&String, &Seen)> = seen.iter().collect();
    by_first.sort_by_key(|(_, entry)| entry.first);
    for (serial, entry) in by_first {
        eprintln!(
            "  {serial:<18} seen {:>5.1} s..{:>5.1} s ({:?}), valid {}..{}, {}",
            entry.first.as_secs_f64(),
            entry.last.as_secs_f64(),
            entry.phase,
            entry.cert.not_before,
            entry.cert.not_after,
            entry.cert.issuer
        );
    }
    ensure!(
        seen.len() >= MIN_SERIALS,
        "expected at least {MIN_SERIALS} distinct serials in {RUN_FOR:?} of {VALIDITY_S} s \
         certificates; saw {}: {:?}",
        seen.len(),
        seen.keys().collect::<Vec<_>>()
    );
    let new_issuer = new_issuer.context("pebble was never restarted")?;
    let renewed_after = seen
        .values()
        .filter(|entry| entry.phase == Phase::After && entry.cert.issuer == new_issuer)
        .count();
    ensure!(
        renewed_after >= 1,
        "expected renewals from the new pebble (issuer {new_issuer}) after its restart; none of \
         the {} serials served came from it",
        seen.len()
    );
    let current = server.served()?;
    expect_issued_by_pebble(&setup.pebble, &current)?;
    let root = setup.pebble.root()?;
    client::download_matches(&root, DOMAIN, server.addr.port(), FILE, &setup.file)?;
    // The gauge follows the served certificate; a renewal may fall between the two
    // reads, so both are read again until they agree.
    wait_until(
        &format!("{EXPIRY_GAUGE} to equal the served certificate's notAfter"),
        METRICS_WAIT,
        || {
            let served = server.served()?;
            Ok(match server.metric(EXPIRY_GAUGE, &[("name", DOMAIN)])? {
                Some(value) if value == served.not_after as f64 => Look::Holds(()),
                value => Look::Not(format!(
                    "gauge {value:?}, served notAfter {}",
                    served.not_after
                )),
            })
        },
    )?;
    let issued = server
        .metric(ORDERS_TOTAL, &[("result", "issued")])?
        .unwrap_or(0.0);
    ensure!(
        issued >= seen.len() as f64,
        "expected {ORDERS_TOTAL}{{result=\"issued\"}} >= {} (the serials served); it is {issued}",
        seen.len()
    );
    eprintln!(
        "xtask acme: {renewed_after} serial(s) from the new pebble; {issued} orders issued in all"
    );
    stop_cleanly(&mut server)?;
    check_state_dir(&setup.args.state)
}
