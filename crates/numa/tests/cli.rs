//! The `numa` binary against numactl: on the fixtures (snapshots of multi-node guests)
//! and on this host.

use std::process::Command;

fn numa(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_numa"))
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

use testdata::numa_snapshot as fixture;

#[test]
fn hardware_on_the_fixtures_is_numactls_text() {
    for name in ["sysfs-4node", "sysfs-3node-cpuless"] {
        let root = fixture(name);
        let (code, out, err) = numa(&["--hardware", "--root", root.to_str().unwrap()]);
        assert_eq!(code, 0, "{err}");
        // The snapshot's numactl text and its meminfo were read moments apart.
        same_report(
            &out,
            &std::fs::read_to_string(root.join("numactl-hardware.txt")).unwrap(),
            8,
        );
        let (_, json, _) = numa(&["-H", "--json", "--root", root.to_str().unwrap()]);
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert!(value["nodes"].as_array().unwrap().len() >= 3);
    }
}

#[test]
fn hardware_on_this_host_matches_debians_numactl() {
    let Ok(output) = Command::new("numactl").arg("--hardware").output() else {
        panic!("numactl is not installed: `cargo xtask ci` installs it (apt-get install numactl)");
    };
    let theirs = String::from_utf8(output.stdout).unwrap();
    let (code, ours, err) = numa(&["--hardware"]);
    assert_eq!(code, 0, "{err}");
    same_report(&ours, &theirs, 64);
}

/// Equal line for line, except that free memory may differ by `free_mb_tolerance`: it
/// moves between two readings.
fn same_report(ours: &str, theirs: &str, free_mb_tolerance: u64) {
    assert_eq!(
        ours.lines().count(),
        theirs.lines().count(),
        "ours:\n{ours}\ntheirs:\n{theirs}"
    );
    for (a, b) in ours.lines().zip(theirs.lines()) {
        if let (Some(x), Some(y)) = (free_mb(a), free_mb(b)) {
            assert!(x.abs_diff(y) <= free_mb_tolerance, "{a} vs {b}");
        } else {
            assert_eq!(a, b);
        }
    }
}

fn free_mb(line: &str) -> Option<u64> {
    line.split_once(" free: ")?
        .1
        .strip_suffix(" MB")?
        .parse()
        .ok()
}

#[test]
fn a_missing_tree_is_an_error_naming_it() {
    let (code, _, err) = numa(&["--hardware", "--root", "/no/such/root"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("/no/such/root/sys/devices/system/node"),
        "{err}"
    );
}

fn numactl(args: &[&str]) -> String {
    let output = Command::new("numactl")
        .args(args)
        .output()
        .expect("numactl is installed (cargo xtask ci installs it)");
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn show_under_each_policy_matches_numactl() {
    let numa_bin = env!("CARGO_BIN_EXE_numa");
    for option in [
        None,
        Some("--preferred=0"),
        Some("--membind=0"),
        Some("--localalloc"),
        Some("--preferred-many=0"),
        Some("--interleave=all"),
        Some("--physcpubind=0"),
        Some("--cpunodebind=0"),
        Some("-m0"),
    ] {
        // Each tool applies the option, then runs itself with --show.
        let (ours, theirs) = match option {
            Some(option) => (
                numa(&[option, numa_bin, "--show"]).1,
                numactl(&[option, "numactl", "--show"]),
            ),
            None => (numa(&["--show"]).1, numactl(&["--show"])),
        };
        assert_eq!(ours, theirs, "{option:?}");
    }
}

#[test]
fn bad_lists_name_the_input_and_the_valid_nodes() {
    let valid = numactl(&["--show"])
        .lines()
        .find_map(|l| l.strip_prefix("membind: "))
        .unwrap()
        .trim()
        .replace(' ', ",");
    let (code, _, err) = numa(&["--membind=7", "true"]);
    assert_eq!(code, 1);
    assert!(
        err.starts_with("numa: invalid node specification '7': node 7 is not available"),
        "{err}"
    );
    assert!(err.contains(&format!("valid nodes: {valid}")), "{err}");
    let (code, _, err) = numa(&["--cpunodebind=x", "true"]);
    assert_eq!(code, 1);
    assert!(err.contains("'x'") && err.contains("valid nodes"), "{err}");
    let (code, _, err) = numa(&["--membind=0", "--interleave=0", "true"]);
    assert_eq!(code, 1);
    assert!(err.starts_with("numa: Conflicting policies"), "{err}");
    let (code, _, err) = numa(&["--membind=0", "/no/such/program"]);
    assert_eq!(code, 1);
    assert!(err.contains("execution of `/no/such/program'"), "{err}");
}

#[test]
fn the_command_runs_with_the_policy() {
    // `numa --membind=0 numa --show` shows the policy the child inherited.
    let numa_bin = env!("CARGO_BIN_EXE_numa");
    let (code, out, _) = numa(&["--membind=0", "--", numa_bin, "--show"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("policy: bind\n"), "{out}");
}

#[test]
fn stat_is_numastats_table() {
    let output = Command::new("numastat")
        .output()
        .expect("numastat comes with numactl");
    let theirs = String::from_utf8(output.stdout).unwrap();
    let (code, ours, err) = numa(&["stat"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        ours.lines().count(),
        theirs.lines().count(),
        "ours:\n{ours}\ntheirs:\n{theirs}"
    );
    for (a, b) in ours.lines().zip(theirs.lines()) {
        // The counters move between the two readings; names and layout must not.
        assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
        let (words_a, words_b): (Vec<&str>, Vec<&str>) = (
            a.split_whitespace().collect(),
            b.split_whitespace().collect(),
        );
        assert_eq!(words_a.len(), words_b.len());
        assert_eq!(words_a[0], words_b[0]);
    }
}

#[test]
fn stat_intervals_json_and_processes() {
    let (code, out, err) = numa(&["stat", "--interval", "0.1", "--count", "2", "--json"]);
    assert_eq!(code, 0, "{err}");
    let samples: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(samples.len(), 2);
    for sample in &samples {
        for row in sample["rows"].as_array().unwrap() {
            assert!(
                row[1]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|v| v.as_f64().unwrap() >= 0.0),
                "{row}"
            );
        }
    }
    let pid = std::process::id().to_string();
    let (code, out, _) = numa(&["stat", "-p", &pid]);
    assert_eq!(code, 0);
    assert!(
        out.contains(&format!("for PID {pid} (cli-")) && out.contains("Heap"),
        "{out}"
    );
    // Durations take the toolkit's one syntax; a bad one is a usage error (exit 1, as
    // numastat's).
    let (code, _, err) = numa(&["stat", "--interval", "0"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("--interval") && err.contains("'0' is not a duration above zero"),
        "{err}"
    );
    let (code, _, err) = numa(&["stat", "--interval", "100ms", "--count", "1"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = numa(&["stat", "-m"]);
    assert_eq!(code, 0);
    assert!(out.contains("MemTotal") && out.contains("Total"), "{out}");
}

#[test]
fn version_is_long_only_because_v_is_verify() {
    let (code, out, err) = numa(&["--version"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), format!("numa {}", env!("CARGO_PKG_VERSION")));
    // -V stays numactl's --verify: with no shared memory segment it is refused, not a
    // version.
    let (code, out, _) = numa(&["-V"]);
    assert_ne!(out.trim(), format!("numa {}", env!("CARGO_PKG_VERSION")));
    assert_ne!(code, 0);
}
