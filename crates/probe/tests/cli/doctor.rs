//! `probe doctor`: every area reported, UDP receive-buffer overflows seen.

use crate::support::*;

#[test]
fn doctor_sees_udp_receive_queues_overflowing() {
    use std::net::UdpSocket;
    use std::sync::atomic::{AtomicBool, Ordering};
    // A socket that is never read, with the smallest buffer: every datagram past the
    // first few is a receive-buffer error, for as long as doctor watches.
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    rustix::net::sockopt::set_socket_recv_buffer_size(&sink, 1024).unwrap();
    let target = sink.local_addr().unwrap();
    let stop = AtomicBool::new(false);
    let report = std::thread::scope(|scope| {
        scope.spawn(|| {
            let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
            while !stop.load(Ordering::Relaxed) {
                let _ = sender.send_to(&[0u8; 48], target);
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        });
        let report = probe_json(&["doctor", "--json"]);
        stop.store(true, Ordering::Relaxed);
        report
    });
    let udp = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["area"] == "udp")
        .unwrap_or_else(|| panic!("no udp finding: {report:#}"));
    assert_eq!(udp["severity"], "warn", "{udp:#}");
    assert!(
        udp["evidence"]
            .as_str()
            .unwrap()
            .starts_with("RcvbufErrors +"),
        "{udp:#}"
    );
    assert!(
        udp["fix"].as_str().unwrap().contains("SO_REUSEPORT"),
        "{udp:#}"
    );
    drop(sink);
}

#[test]
fn doctor_reports_every_area_for_a_pid() {
    if !privileged() {
        return;
    }
    let mut target = busy_clock_caller();
    let report = probe_json(&[
        "doctor",
        "--json",
        "-p",
        &target.id().to_string(),
        "--duration",
        "0.5",
    ]);
    target.kill().unwrap();
    target.wait().unwrap();
    let findings = report["findings"].as_array().unwrap();
    let areas: Vec<&str> = findings
        .iter()
        .map(|f| f["area"].as_str().unwrap())
        .collect();
    assert_eq!(
        areas,
        [
            "clock",
            "cpufreq",
            "numa",
            "thp",
            "sendfile",
            "faults",
            "clock-syscalls",
            "runq",
            "udp"
        ]
    );
    // The calibrate loop makes raw clock_gettime syscalls: the fallback signature.
    let clock = findings
        .iter()
        .find(|f| f["area"] == "clock-syscalls")
        .unwrap();
    assert_eq!(clock["severity"], "warn", "{clock:#}");
    for f in findings {
        assert!(!f["evidence"].as_str().unwrap().is_empty());
        if f["severity"] == "warn" {
            assert!(f["fix"].is_string(), "a warning without a fix: {f:#}");
        }
    }
}
