//! `probe doctor`: the system checks of [`ioserve_probe::doctor`] plus the measured ones
//! of [`ioserve_probe::checkup`], printed by [`ioserve_probe::present::doctor`].

use std::time::{Duration, Instant};

use ioserve_probe::checkup;
use ioserve_probe::cli::DoctorArgs;
use ioserve_probe::doctor;
use ioserve_probe::present;
use ioserve_probe::privilege;
use ioserve_probe::signals::Signals;

/// The shortest window over which UDP receive-buffer errors are watched.
const UDP_WINDOW: Duration = Duration::from_secs(1);

pub fn run(args: &DoctorArgs, signals: &Signals) -> anyhow::Result<()> {
    let bpf = privilege::require_bpf();
    if args.pid.is_some() {
        // The process checks need the probes: fail early and clearly.
        if let Err(err) = &bpf {
            anyhow::bail!("{err} (needed for --pid)");
        }
    }
    // UDP drops are counted over the whole run (at least UDP_WINDOW).
    let udp_before = (doctor::UdpCounters::read(&args.root), Instant::now());
    let mut findings = vec![checkup::clock_finding(&args.root, &bpf)];
    findings.push(doctor::cpufreq(&args.root));
    findings.push(doctor::numa(&args.root));
    findings.push(doctor::transparent_huge_pages(&args.root));
    if let Some(pid) = args.pid {
        findings.extend(checkup::process_findings(
            pid,
            args.duration,
            signals,
            || {
                note!(
                    "Watching pid {pid} for {:.1} s...",
                    args.duration.as_secs_f64()
                )
            },
        )?);
    }
    std::thread::sleep(UDP_WINDOW.saturating_sub(udp_before.1.elapsed()));
    findings.push(doctor::udp_receive_buffers(
        &udp_before.0,
        &doctor::UdpCounters::read(&args.root),
        udp_before.1.elapsed(),
    ));
    out!("{}", present::doctor::render(&findings, args.json)?);
    Ok(())
}
