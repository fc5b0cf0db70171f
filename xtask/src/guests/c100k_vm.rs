//! `cargo xtask c100k-vm`: `loadtest --c100k` with all of its connections held, in a
//! guest whose limits the scenario may raise. A host (a container, a CI runner, this
//! project's VM) can keep the open-file limit below what 100,000 connections need, and
//! a process there cannot raise it without `CAP_SYS_RESOURCE`; in a guest of its own
//! the scenario is root of its kernel. Debian's 6.1 kernel boots under qemu (TCG, two
//! CPUs) with the host's builds in its initramfs: xtask (whose hidden `c100k-guest`
//! task runs the scenario there, as `loadtest --c100k` does on a host), the release
//! ioserve with the package's allocator, and the host's nginx, each with the shared
//! libraries it loads. The report is the scenario's own (c100k.md and c100k.json,
//! under target/c100k-vm), headed by what the guest was, with the guest kernel's TCP
//! counters after the run beside it (netstat.txt).
//!
//! What such a run shows is what does not depend on speed: whether every connection
//! was accepted, answered and held, and the memory each kind costs the servers, on an
//! operator's LTS kernel. Its times are emulation's (TCG runs the guest's code many
//! times slower than the host's CPU), so the polite client's latencies are not the
//! servers' on hardware.

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, ensure, Context as _, Result};

use crate::guests::{self as guest, Arch, Initramfs, Machine, Script};
use crate::util::{ensure_packages, step, target_dir, which};

/// Where the guest keeps the scenario's files and report (its /tmp is a tmpfs).
const GUEST_OUT: &str = "/tmp/c100k";

/// Memory the guest needs beside the connections: the kernel, the served files (1 GiB
/// of them in its tmpfs), the servers' and the client's fixed costs.
const BASE_MIB: u64 = 3 * 1024;

/// Memory per connection held, for the guest's size: both ends' sockets in one kernel
/// (a few KiB each), the servers' and the client's share (tens of KiB for a TLS
/// connection), and the slow downloads' socket buffers spread over all.
const KIB_PER_CONNECTION: u64 = 64;

/// Memory left to the host beside the guest.
const HOST_RESERVE_MIB: u64 = 2 * 1024;

/// `cargo xtask c100k-vm`'s options.
#[derive(clap::Args, Debug)]
pub(crate) struct Options {
    /// Connections held at once in the full mix (90 % idle HTTP/1.1, 9 % HTTP/2 over
    /// TLS, 1 % slow downloads)
    #[arg(long, value_name = "N", default_value_t = 100_000,
          value_parser = clap::value_parser!(u64).range(1_000..=400_000))]
    connections: u64,
    /// Seconds the full mix is held while the polite client runs
    #[arg(long, value_name = "S", default_value_t = 20,
          value_parser = clap::value_parser!(u64).range(1..=600))]
    duration: u64,
    /// Connections connecting and waiting for their answer at once (the host's
    /// `loadtest --c100k`: 256). The guest's CPUs are emulated: a TLS handshake takes
    /// tens of milliseconds of them, and with 256 at once a connection waited its turn
    /// for seconds, some past the servers' header timeouts and the client's 30 s
    #[arg(long, value_name = "N", default_value_t = 32,
          value_parser = clap::value_parser!(u64).range(1..=4096))]
    at_once: u64,
    /// The guest's memory in MiB [default: 3 GiB and 64 KiB per connection]
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1024..=262_144))]
    memory: Option<u64>,
    /// Only these servers (comma-separated, as `loadtest --only` picks them: nginx,
    /// ioserve-sendfile)
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    only: Vec<String>,
    /// The full mix alone, without each kind's memory per connection first (for
    /// ioserve at 100,000 and 32 at once, about 20 minutes of the guest, beside the
    /// mix's 50)
    #[arg(long)]
    mix_only: bool,
    /// Each kind's memory per connection alone, without the full mix after it (for
    /// ioserve at 100,000 and 32 at once, 16 minutes of the guest, boot included,
    /// where the whole run took 100)
    #[arg(long, conflicts_with = "mix_only")]
    memory_only: bool,
}

/// What the hidden `c100k-guest` task, run inside the guest, is told.
#[derive(clap::Args, Debug)]
pub(crate) struct GuestArgs {
    /// Connections held at once.
    #[arg(long)]
    connections: u64,
    /// Seconds the full mix is held.
    #[arg(long)]
    duration: u64,
    /// Connections connecting at once.
    #[arg(long)]
    at_once: u64,
    /// The ioserve executable.
    #[arg(long)]
    ioserve: PathBuf,
    /// Where the files and the report go.
    #[arg(long)]
    out: PathBuf,
    /// The host's command line, for the report.
    #[arg(long)]
    command: String,
    /// Only these servers.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// The full mix alone.
    #[arg(long)]
    mix_only: bool,
    /// Each kind's memory alone, no full mix.
    #[arg(long)]
    memory_only: bool,
}

/// `cargo xtask c100k-vm`: builds ioserve, boots the guest, and writes and prints the
/// report; fails when the scenario failed in the guest.
pub(crate) fn run(options: &Options) -> Result<()> {
    ensure!(
        cfg!(target_arch = "x86_64"),
        "c100k-vm boots an x86_64 guest with the host's x86_64 builds: run it on x86_64"
    );
    let arch = Arch::X86_64;
    arch.ensure_tools()?;
    ensure_packages(&[("nginx", "nginx")])?;
    // A name the guest's run would not know fails here, not after the boot; a name
    // that picks a server is part of one (letters, digits and dashes), which the
    // guest's script carries as it is.
    ensure!(
        options.only.iter().all(|name| !name.is_empty()),
        "--only has an empty name: give servers' names, as nginx,ioserve-sendfile"
    );
    crate::load::loadtest::c100k_check_only(&options.only)?;
    let memory = guest_mib(options);
    let available = available_mib()?;
    ensure!(
        memory + HOST_RESERVE_MIB <= available,
        "the guest's {memory} MiB and {HOST_RESERVE_MIB} MiB for the host are more than \
         the {available} MiB available here: pass --memory with less, or --connections \
         with fewer"
    );
    step(
        "build ioserve (release)",
        crate::release::dist::packaged_release_build()?,
    )?;
    let ioserve = target_dir()?.join("release/ioserve");
    let xtask = std::env::current_exe().context("cannot find xtask's own executable")?;
    let nginx = which("nginx").context("nginx is not on PATH")?;
    let kernel = guest::debian_kernel(arch)?;

    let mut initramfs = Initramfs::new(arch)?;
    initramfs
        .host_program("xtask", &xtask)?
        .host_program("ioserve", &ioserve)?
        .host_program("nginx", &nginx)?;
    // nginx started as root runs its workers as nobody:nogroup, and opens its built-in
    // error log's path before it reads the configuration.
    initramfs
        .directory("etc")
        .data(
            "etc/passwd",
            b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
        )
        .data("etc/group", b"root:x:0:\nnogroup:x:65534:\n")
        .directory("var")
        .directory("var/log")
        .directory("var/log/nginx");

    let command = crate::load::loadtest::c100k_command_line();
    ensure!(
        !command.contains('\''),
        "the command line ({command}) has a single quote, which the guest's script cannot carry"
    );
    let mut guest_task = format!(
        "xtask c100k-guest --connections {} --duration {} --at-once {} \
         --ioserve /bin/ioserve --out {GUEST_OUT} --command '{command}'",
        options.connections, options.duration, options.at_once
    );
    if !options.only.is_empty() {
        guest_task.push_str(&format!(" --only {}", options.only.join(",")));
    }
    if options.mix_only {
        guest_task.push_str(" --mix-only");
    }
    if options.memory_only {
        guest_task.push_str(" --memory-only");
    }
    let mut script = Script::default();
    script
        .run("kernel", "uname -r")
        // Debian's kernel backs anonymous memory with huge pages `always`: what the
        // servers' memory per connection is measured under.
        .run("thp", "cat /sys/kernel/mm/transparent_hugepage/enabled")
        .run("c100k", &guest_task)
        .run("report", &format!("cat {GUEST_OUT}/c100k.md"))
        // The JSON ends without a newline, which the section's end marker needs.
        .run("json", &format!("sh -c 'cat {GUEST_OUT}/c100k.json; echo'"))
        // The guest kernel's TCP counters (aborts on timeout or memory, prunes and
        // drops) and socket memory after the run, for what the report counts as
        // refused, failed or dropped.
        .run(
            "netstat",
            "cat /proc/net/netstat /proc/net/snmp /proc/net/sockstat",
        );
    let machine = Machine {
        arch,
        name: "c100k".into(),
        nodes: vec![(2, u32::try_from(memory).context("--memory is too large")?)],
        append: String::new(),
        // Opening, holding and closing each kind on fresh servers, under emulation:
        // minutes per 10,000 connections, with a wide margin.
        timeout: Duration::from_secs(1_800 + options.connections / 10),
        single_threaded: false,
    };
    let sections = machine.boot("c100k-vm", &kernel, &initramfs.finish(&script))?;
    let kernel_release = sections.ok("kernel").map_err(anyhow::Error::msg)?.join(" ");
    let huge_pages = sections
        .ok("thp")
        .ok()
        .and_then(|lines| lines.iter().find_map(|line| thp_mode(line)))
        .unwrap_or("unknown");
    if let Err(why) = sections.ok("c100k") {
        bail!("the c100k scenario failed in the guest: {why}");
    }
    let report = sections
        .ok("report")
        .map_err(anyhow::Error::msg)?
        .join("\n");
    let json = sections.ok("json").map_err(anyhow::Error::msg)?.join("\n");
    let out = target_dir()?.join("c100k-vm");
    fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let md = format!(
        "In a qemu guest (TCG, 2 CPUs, {memory} MiB) on Debian's kernel {kernel_release} \
         (transparent huge pages: {huge_pages}): the counts and the memory per \
         connection are that kernel's and the servers' own; the times (the polite client's latencies) are emulation's, many times \
         slower than the host's CPU.\n\n{report}\n"
    );
    let (md_path, json_path) = (out.join("c100k.md"), out.join("c100k.json"));
    fs::write(&md_path, &md).with_context(|| format!("cannot write {}", md_path.display()))?;
    fs::write(&json_path, json).with_context(|| format!("cannot write {}", json_path.display()))?;
    if let Ok(counters) = sections.ok("netstat") {
        let path = out.join("netstat.txt");
        fs::write(&path, counters.join("\n"))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    println!("{md}");
    eprintln!(
        "xtask c100k-vm: wrote {} and {}",
        md_path.display(),
        json_path.display()
    );
    Ok(())
}

/// The hidden `c100k-guest` task: the scenario inside the guest, where there is no
/// cargo and no repository.
pub(crate) fn in_guest(args: &GuestArgs) -> Result<()> {
    let scenario = crate::load::loadtest::C100kScenario {
        connections: usize::try_from(args.connections)?,
        hold: Duration::from_secs(args.duration),
        only: args.only.clone(),
        command: args.command.clone(),
        at_once: usize::try_from(args.at_once)?,
        memory: !args.mix_only,
        full_mix: !args.memory_only,
    };
    crate::load::loadtest::c100k_in_guest(&scenario, &args.ioserve, &args.out)
}

/// The mode the kernel's transparent huge pages are in, from
/// /sys/kernel/mm/transparent_hugepage/enabled (`always [madvise] never`: the one in
/// brackets).
fn thp_mode(enabled: &str) -> Option<&str> {
    enabled
        .split_whitespace()
        .find_map(|word| word.strip_prefix('[')?.strip_suffix(']'))
}

/// The guest's memory in MiB for `connections` held at once, unless `--memory` gave it.
fn guest_mib(options: &Options) -> u64 {
    options
        .memory
        .unwrap_or(BASE_MIB + options.connections * KIB_PER_CONNECTION / 1024)
}

/// MemAvailable from /proc/meminfo, in MiB.
fn available_mib() -> Result<u64> {
    Ok(crate::util::meminfo_kib("MemAvailable")? / 1024)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        options: Options,
    }

    fn parse(args: &[&str]) -> Result<Options, clap::Error> {
        Cli::try_parse_from(std::iter::once("c100k-vm").chain(args.iter().copied()))
            .map(|cli| cli.options)
    }

    #[test]
    fn the_guest_is_sized_for_its_connections_unless_told() {
        let defaults = parse(&[]).unwrap();
        assert_eq!(
            (defaults.connections, defaults.duration, defaults.at_once),
            (100_000, 20, 32)
        );
        assert_eq!(guest_mib(&defaults), 3 * 1024 + 6_250);
        let small = parse(&["--connections", "10000"]).unwrap();
        assert_eq!(guest_mib(&small), 3 * 1024 + 625);
        let told = parse(&["--memory", "4096"]).unwrap();
        assert_eq!(guest_mib(&told), 4096);
        assert!(defaults.only.is_empty() && !defaults.mix_only && !defaults.memory_only);
        let picked = parse(&["--only", "ioserve-sendfile,nginx", "--mix-only"]).unwrap();
        assert_eq!(picked.only, ["ioserve-sendfile", "nginx"]);
        assert!(picked.mix_only);
        assert!(parse(&["--memory-only"]).unwrap().memory_only);
        for bad in [
            &["--connections", "999"][..],
            &["--connections", "400001"],
            &["--duration", "0"],
            &["--memory", "512"],
            &["--at-once", "0"],
            &["--mix-only", "yes"],
            &["--mix-only", "--memory-only"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_huge_pages_mode_is_the_bracketed_one() {
        assert_eq!(thp_mode("[always] madvise never"), Some("always"));
        assert_eq!(thp_mode("always [madvise] never"), Some("madvise"));
        assert_eq!(thp_mode("always madvise never"), None);
        assert_eq!(thp_mode(""), None);
    }
}
