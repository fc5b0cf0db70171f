//! `cargo xtask profile`: where the CPU goes when ioserve and nginx serve the load
//! test's hot workloads (the 8 MiB download and the 4 KiB request), as flamegraphs;
//! with `--tls`, the HTTPS load test's 4 KiB requests over HTTP/1.1 and HTTP/2.
//!
//! Each server runs alone; for each workload its client (wrk, h2load) drives it while `perf record -e
//! cpu-clock -F 999 -g` samples every process and thread of it (cpu-clock: a VM often
//! has no hardware counters). `perf script` prints the stacks, inferno folds them and
//! draws target/profile/SERVER-WORKLOAD.svg (kernel frames in their own colours,
//! marked `_[k]`). The summary gives CPU seconds per GiB served (/proc/PID/stat, as the
//! load test reads it; perf's sampling included) and the frames where the samples
//! land: kernel against user, and the frames with the most samples of their own.
//!
//! ioserve is built for this with frame pointers (`-C force-frame-pointers=yes`) and
//! line tables (`CARGO_PROFILE_RELEASE_DEBUG=line-tables-only`), so that perf's
//! frame-pointer unwinding walks its stacks and shows its functions by name; in a
//! target directory of its own (TARGET_DIR/profile/cargo), so that the normal release
//! build, which the load test measures, stays as it is. Debian's nginx and glibc have
//! no frame pointers: kernel stacks are whole, but a user stack that is inside nginx or
//! glibc when sampled ends at that function (`[nginx]`, `malloc`, `__libc_recv`).
//! `--call-graph dwarf` would walk them, at many times the cost per sample.

use std::fmt::Write as _;
use std::fs;
use std::io::Read as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::{anyhow, bail, Context as _, Result};
use inferno::collapse::Collapse as _;

use super::servers::{cpu_seconds, select, servers, start_built, tls_servers, Running, ServerSpec};
use super::tls::TLS_WORKLOADS;
use super::wrk::REPORT_LUA;
use super::{load, prepare_files, Workload, FILES, WORKLOADS};
use crate::util::{certificate, ensure_packages, step};

/// The plain workloads profiled: the 8 MiB download and the 4 KiB request, with their
/// short names in file names.
const PROFILED_WORKLOADS: [(&str, &str); 2] = [("a", "8MiB"), ("b", "4KiB")];

/// The HTTPS workloads profiled with `--tls`: 4 KiB over HTTP/1.1 and over HTTP/2.
const PROFILED_TLS_WORKLOADS: [(&str, &str); 2] = [("b", "tls-4KiB"), ("h2", "tls-h2-4KiB")];

/// The frames listed in the summary, by samples of their own.
const TOP_FRAMES: usize = 8;

/// The command line of `cargo xtask profile`.
#[derive(Debug, clap::Args)]
pub(crate) struct Options {
    /// Seconds of wrk (and perf) per server and workload
    #[arg(long, value_name = "S", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=600))]
    duration: u64,
    /// The servers (comma-separated; the load test's names, Go's FileServer aside): an
    /// exact name picks that server alone, other text every server whose name contains it
    #[arg(
        long,
        value_name = "NAMES",
        value_delimiter = ',',
        default_value = "ioserve-sendfile,nginx"
    )]
    servers: Vec<String>,
    /// Profile the HTTPS load test's 4 KiB workloads (HTTP/1.1 by wrk, HTTP/2 by h2load,
    /// TLS 1.3 in user space) instead of the plain ones
    #[arg(long)]
    tls: bool,
}

/// What one profiled run shows.
struct Profile {
    server: String,
    workload: &'static Workload,
    cpu_s_per_gib: f64,
    samples: Samples,
}

/// Records the profiles, writes the flamegraphs and target/profile/summary.md.
pub(crate) fn run(options: &Options) -> Result<()> {
    ensure_packages(&[("nginx", "nginx"), ("wrk", "wrk"), ("linux-perf", "perf")])?;
    let target = crate::util::target_dir()?;
    let out = target.join("profile");
    fs::create_dir_all(&out)?;
    let specs = if options.tls {
        ensure_packages(&[("nghttp2-client", "h2load")])?;
        let certs = out.join("tls");
        fs::create_dir_all(&certs)?;
        chosen_servers(
            tls_servers(&certificate::self_signed(&certs)?),
            &options.servers,
        )?
    } else {
        chosen_servers(servers(), &options.servers)?
    };
    let workloads = profiled(options.tls);
    let cargo_dir = out.join("cargo");
    let mut build = crate::release::dist::packaged_release_build()?;
    build
        .arg("--target-dir")
        .arg(&cargo_dir)
        .env("CARGO_PROFILE_RELEASE_DEBUG", "line-tables-only")
        .env("RUSTFLAGS", "-C force-frame-pointers=yes");
    step(
        "build ioserve (release, frame pointers, line tables)",
        build,
    )?;
    let ioserve = cargo_dir.join("release/ioserve");
    let www = out.join("www");
    let files: Vec<(&str, u64)> = FILES
        .into_iter()
        .filter(|(name, _)| workloads.iter().any(|(w, _)| w.path.ends_with(name)))
        .collect();
    prepare_files(&www, &files)?;
    fs::write(out.join("report.lua"), REPORT_LUA)?;

    let mut profiles = Vec::new();
    for spec in specs {
        let server = start_built(&spec, &www, &out, &ioserve)?;
        eprintln!("xtask profile: {} on {}", spec.name, server.addr);
        for &(workload, short) in &workloads {
            // Warm-up, not recorded: page cache, connections, open-file caches.
            load(&server, workload, 1, &out)?;
            let profile = record(&server, workload, short, options.duration, &out)?;
            eprint!("{}", summary(&profile));
            profiles.push(profile);
        }
    }
    let text: String = profiles.iter().map(summary).collect();
    println!("{text}");
    fs::write(out.join("summary.md"), &text)?;
    eprintln!(
        "xtask profile: wrote {}/{{SERVER-WORKLOAD.svg,summary.md}}",
        out.display()
    );
    Ok(())
}

/// The servers `--servers` names among `servers` (Go's FileServer aside: it needs a
/// Go build).
fn chosen_servers(servers: Vec<ServerSpec>, names: &[String]) -> Result<Vec<ServerSpec>> {
    let candidates: Vec<ServerSpec> = servers
        .into_iter()
        .filter(|s| s.name != "go-fileserver")
        .collect();
    let known: Vec<String> = candidates.iter().map(|s| s.name.clone()).collect();
    select(candidates, names).map_err(|_| {
        anyhow!(
            "--servers {} matches no server; servers: {}",
            names.join(","),
            known.join(", ")
        )
    })
}

/// The workloads profiled, plain or over HTTPS, each with its short name in file
/// names (`8MiB`, `tls-h2-4KiB`).
fn profiled(tls: bool) -> Vec<(&'static Workload, &'static str)> {
    let (all, chosen): (&'static [Workload], &[(&str, &'static str)]) = match tls {
        false => (&WORKLOADS, &PROFILED_WORKLOADS),
        true => (&TLS_WORKLOADS, &PROFILED_TLS_WORKLOADS),
    };
    chosen
        .iter()
        .filter_map(|(key, short)| Some((all.iter().find(|w| w.key == *key)?, *short)))
        .collect()
}

/// One run of the workload's client under perf record; writes SERVER-SHORT.svg and
/// returns the figures.
fn record(
    server: &Running,
    workload: &'static Workload,
    short: &str,
    seconds: u64,
    out: &Path,
) -> Result<Profile> {
    let name = format!("{}-{short}", server.name);
    let data = out.join(format!("{name}.perf.data"));
    // perf would keep an earlier run's data as .old beside it.
    let _ = fs::remove_file(&data);
    let pids = server.pids();
    let pid_list: Vec<String> = pids.iter().map(u32::to_string).collect();
    let mut perf = Command::new("perf");
    perf.args(["record", "-e", "cpu-clock", "-F", "999", "-g", "-p"])
        .arg(pid_list.join(","))
        .arg("-o")
        .arg(&data)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut perf = perf.spawn().context("cannot start perf record")?;
    // perf attaches within milliseconds; a profile loses nothing by waiting for it.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let cpu_before = cpu_seconds(&pids);
    let result = load(server, workload, seconds, out);
    let cpu = cpu_seconds(&pids) - cpu_before;
    stop(&mut perf)?;
    let result = result?;
    let gib = result.bytes_per_s * result.seconds / f64::from(1u32 << 30);

    let script = Command::new("perf")
        .arg("script")
        .arg("-i")
        .arg(&data)
        .stdin(Stdio::null())
        .output()
        .context("cannot run perf script")?;
    if !script.status.success() {
        bail!(
            "perf script -i {} failed: {}",
            data.display(),
            String::from_utf8_lossy(&script.stderr)
        );
    }
    let folded = fold(&script.stdout)?;
    fs::write(out.join(format!("{name}.folded")), &folded)?;
    let mut svg = Vec::new();
    let mut graph = inferno::flamegraph::Options::default();
    graph.title = format!("{} serving {}", server.name, workload.title);
    graph.count_name = "ns".into();
    graph.subtitle = Some(format!(
        "perf record -e cpu-clock -F 999 -g, {seconds} s of wrk; kernel frames end in _[k]"
    ));
    inferno::flamegraph::from_lines(&mut graph, folded.lines(), &mut svg)
        .with_context(|| format!("cannot draw the flamegraph of {name}"))?;
    fs::write(out.join(format!("{name}.svg")), svg)?;
    Ok(Profile {
        server: server.name.clone(),
        workload,
        cpu_s_per_gib: if gib > 0.0 { cpu / gib } else { f64::NAN },
        samples: Samples::of(&folded),
    })
}

/// Stops perf record with SIGINT, as Ctrl-C would, so that it writes its data out.
fn stop(perf: &mut Child) -> Result<()> {
    let pid = rustix::process::Pid::from_child(perf);
    rustix::process::kill_process(pid, rustix::process::Signal::INT)
        .context("cannot stop perf record")?;
    let mut said = String::new();
    if let Some(mut stderr) = perf.stderr.take() {
        stderr.read_to_string(&mut said)?;
    }
    let status = perf.wait()?;
    // perf record writes its data out, then ends by the SIGINT it caught.
    if !status.success() && status.signal() != Some(rustix::process::Signal::INT.as_raw()) {
        bail!("perf record failed ({status}): {said}");
    }
    Ok(())
}

/// `perf script` output folded into one line per stack (`frame;frame;... count`),
/// kernel frames marked `_[k]`.
fn fold(perf_script: &[u8]) -> Result<String> {
    let mut options = inferno::collapse::perf::Options::default();
    options.annotate_kernel = true;
    let mut folded = Vec::new();
    inferno::collapse::perf::Folder::from(options)
        .collapse(perf_script, &mut folded)
        .context("cannot fold perf script's stacks")?;
    String::from_utf8(folded).context("folded stacks are not UTF-8")
}

/// Where the samples of one profile land, weighed by their period (cpu-clock's
/// nanoseconds), as the folded stacks count them.
#[derive(Debug, PartialEq)]
struct Samples {
    total: u64,
    /// Of it, samples whose innermost frame is the kernel's.
    kernel: u64,
    /// Frames by samples of their own (innermost), most first.
    top: Vec<(String, u64)>,
}

impl Samples {
    /// Reads folded stacks (`frame;frame;... count` per line).
    fn of(folded: &str) -> Samples {
        let mut by_frame: Vec<(String, u64)> = Vec::new();
        let (mut total, mut kernel) = (0, 0);
        for line in folded.lines() {
            let Some((stack, count)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(count) = count.parse::<u64>() else {
                continue;
            };
            let leaf = stack.rsplit(';').next().unwrap_or(stack);
            total += count;
            if leaf.ends_with("_[k]") {
                kernel += count;
            }
            match by_frame.iter_mut().find(|(frame, _)| frame == leaf) {
                Some((_, samples)) => *samples += count,
                None => by_frame.push((leaf.to_string(), count)),
            }
        }
        by_frame.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        by_frame.truncate(TOP_FRAMES);
        Samples {
            total,
            kernel,
            top: by_frame,
        }
    }

    /// `part` as a percentage of all samples.
    fn share(&self, part: u64) -> f64 {
        100.0 * part as f64 / self.total.max(1) as f64
    }
}

/// A profile's lines of the summary.
fn summary(profile: &Profile) -> String {
    let samples = &profile.samples;
    let mut text = format!(
        "{} ({}) {}: {:.3} CPU s/GiB; samples {:.0}% in the kernel, {:.0}% in user space; most in:\n",
        profile.server,
        profile.workload.key,
        profile.workload.title,
        profile.cpu_s_per_gib,
        samples.share(samples.kernel),
        samples.share(samples.total - samples.kernel),
    );
    for (frame, count) in &samples.top {
        let _ = writeln!(text, "  {:5.1}%  {frame}", samples.share(*count));
    }
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const FOLDED: &str =
        "ioserve;main;serve;sendfile_[k];do_splice_direct_[k];copy_page_to_iter_[k] 60
ioserve;main;serve;epoll_wait_[k] 25
ioserve;main;serve;ioserve::http::parse 10
ioserve;main;serve;sendfile_[k];tcp_sendmsg_locked_[k] 5
not a folded line
";

    #[test]
    fn counts_samples_by_innermost_frame_and_kernel_share() {
        let samples = Samples::of(FOLDED);
        assert_eq!((samples.total, samples.kernel), (100, 90));
        assert_eq!(
            samples.top,
            [
                ("copy_page_to_iter_[k]".to_string(), 60),
                ("epoll_wait_[k]".to_string(), 25),
                ("ioserve::http::parse".to_string(), 10),
                ("tcp_sendmsg_locked_[k]".to_string(), 5),
            ]
        );
        assert_eq!(samples.share(samples.kernel), 90.0);
        assert_eq!(Samples::of("").share(0), 0.0);
    }

    #[test]
    fn summary_names_the_server_workload_and_frames() {
        let profile = Profile {
            server: "nginx".into(),
            workload: &WORKLOADS[0],
            cpu_s_per_gib: 0.25,
            samples: Samples::of(FOLDED),
        };
        let text = summary(&profile);
        assert!(
            text.starts_with(
                "nginx (a) 8 MiB file, 100 connections: 0.250 CPU s/GiB; samples 90% in the kernel, 10% in user space; most in:\n"
            ),
            "{text}"
        );
        assert!(text.contains("   60.0%  copy_page_to_iter_[k]\n"), "{text}");
    }

    #[test]
    fn folds_perf_script_stacks_with_kernel_frames_marked() {
        let script = "ioserve 1234/1235 [000] 100.000001: 1001001 cpu-clock:
\tffffffff81000001 copy_page_to_iter+0x11 ([kernel.kallsyms])
\tffffffff81000002 filemap_read+0x22 ([kernel.kallsyms])
\t    55555555a001 ioserve::serve+0x33 (/usr/bin/ioserve)

";
        let folded = fold(script.as_bytes()).unwrap();
        // Weighed by the sample's period: cpu-clock's nanoseconds.
        assert_eq!(
            folded.trim(),
            "ioserve;ioserve::serve;filemap_read_[k];copy_page_to_iter_[k] 1001001"
        );
    }

    #[test]
    fn options() {
        use clap::Parser as _;
        let parse = |args: &[&str]| {
            crate::Cli::try_parse_from(["xtask", "profile"].iter().chain(args)).map(|cli| match cli
                .task
            {
                crate::Task::Profile(options) => options,
                other => panic!("parsed as {other:?}"),
            })
        };
        let o = parse(&[]).unwrap();
        assert_eq!((o.duration, o.servers.len(), o.tls), (10, 2, false));
        let o = parse(&["--duration", "3", "--servers", "ioserve", "--tls"]).unwrap();
        assert_eq!(
            (o.duration, o.servers, o.tls),
            (3, vec!["ioserve".to_string()], true)
        );
        assert!(parse(&["--duration", "0"]).is_err());
    }

    #[test]
    fn profiled_workloads_are_found_by_key() {
        let names = |tls| -> Vec<(&str, &str)> {
            profiled(tls)
                .into_iter()
                .map(|(w, short)| (w.path, short))
                .collect()
        };
        assert_eq!(names(false), [("/8m.bin", "8MiB"), ("/4k.bin", "4KiB")]);
        assert_eq!(
            names(true),
            [("/4k.bin", "tls-4KiB"), ("/4k.bin", "tls-h2-4KiB")]
        );
        assert!(matches!(
            profiled(true)[1].0.client,
            super::super::Client::H2load
        ));
    }

    #[test]
    fn servers_are_the_load_tests_without_go() {
        let names = |only: &[&str]| {
            let only: Vec<String> = only.iter().map(|o| o.to_string()).collect();
            chosen_servers(servers(), &only)
                .map(|specs| specs.into_iter().map(|s| s.name).collect::<Vec<_>>())
        };
        assert_eq!(
            names(&["ioserve-sendfile", "nginx"]).unwrap(),
            ["nginx", "ioserve-sendfile"]
        );
        assert_eq!(
            names(&["ioserve"]).unwrap().len(),
            6,
            "four strategies, inline cold reads, multi"
        );
        let error = names(&["go"]).unwrap_err().to_string();
        assert!(
            error.starts_with("--servers go matches no server; servers: nginx, ioserve-sendfile,"),
            "{error}"
        );
    }
}
