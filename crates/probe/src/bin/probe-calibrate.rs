//! `probe-calibrate`: workloads with known syscall and fault counts, for checking a
//! tracer (probe, strace -c, perf trace, bpftrace) against the truth.
//!
//! ```text
//! probe-calibrate syscalls --count N     # N syscall(SYS_clock_gettime) + N getppid
//! probe-calibrate syscalls --count N --threads T  # the same in each of T threads
//! probe-calibrate faults --pages N       # touches N fresh anonymous pages
//! probe-calibrate copy --via sendfile|read-write --file F --connect HOST:PORT
//! ```

use std::fs::File;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser as _;
use ioserve_probe::cli::calibrate::{Cli, CopyVia, Workload};

fn main() -> ExitCode {
    match run(Cli::parse().workload) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("probe-calibrate: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// `count` syscall(SYS_clock_gettime, CLOCK_MONOTONIC) and `count` getppid calls.
fn known_syscalls(count: u64) {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    for _ in 0..count {
        // SAFETY: the clock_gettime syscall writes one timespec into `ts`; getppid
        // takes no arguments.
        unsafe {
            libc::syscall(
                libc::SYS_clock_gettime,
                libc::CLOCK_MONOTONIC,
                &mut ts as *mut libc::timespec,
            );
            libc::syscall(libc::SYS_getppid);
        }
    }
}

fn run(workload: Workload) -> anyhow::Result<()> {
    match workload {
        Workload::Syscalls { count, threads: 0 } => {
            known_syscalls(count);
            Ok(())
        }
        Workload::Syscalls { count, threads } => {
            std::thread::scope(|scope| {
                for _ in 0..threads {
                    scope.spawn(|| known_syscalls(count));
                }
            });
            Ok(())
        }
        Workload::Faults { pages } => {
            let page = rustix::param::page_size();
            let len = pages as usize * page;
            let mut map = memmap2::MmapMut::map_anon(len)
                .with_context(|| format!("mapping {pages} pages"))?;
            // One fault per page only without transparent huge pages: with THP
            // `always` (Debian's arm64 kernel) a 2 MiB region faults in once.
            map.advise(memmap2::Advice::NoHugePage)
                .context("madvise(MADV_NOHUGEPAGE)")?;
            for offset in (0..len).step_by(page) {
                map[offset] = 1;
            }
            std::hint::black_box(&map);
            Ok(())
        }
        Workload::Copy { via, file, connect } => {
            let mut source =
                File::open(&file).with_context(|| format!("opening {}", file.display()))?;
            let len = source.metadata()?.len();
            let mut socket =
                TcpStream::connect(&connect).with_context(|| format!("connecting to {connect}"))?;
            match via {
                CopyVia::Sendfile => {
                    let mut offset = 0u64;
                    while offset < len {
                        let remaining = (len - offset) as usize;
                        let sent =
                            rustix::fs::sendfile(&socket, &source, Some(&mut offset), remaining)
                                .context("sendfile")?;
                        if sent == 0 {
                            break;
                        }
                    }
                }
                CopyVia::ReadWrite => {
                    let mut buffer = vec![0u8; 64 * 1024];
                    loop {
                        let n = source.read(&mut buffer).context("read")?;
                        if n == 0 {
                            break;
                        }
                        socket.write_all(&buffer[..n]).context("write")?;
                    }
                }
            }
            Ok(())
        }
    }
}
