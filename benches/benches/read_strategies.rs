//! Seed 003: reading a large file by mmap (plain, MADV_SEQUENTIAL, MAP_POPULATE), a
//! 4 MiB buffered reader, 8 MiB chunked reads, 8 MiB O_DIRECT preads into an aligned
//! buffer, and io_uring (1 MiB reads, four in flight), counting zero bytes of each chunk with the simd crate. Each
//! strategy runs in its own process (so its peak RSS and major faults are its own),
//! page-cache warm and cold (posix_fadvise DONTNEED before the run), three rounds;
//! the table gives the median GB/s, the 95th percentile of the time per 8 MiB of
//! data, peak RSS and major faults.
//!
//! A custom harness, not criterion: one iteration reads the whole file, and RSS and
//! faults are per process. The file is <target>/bench-data/read-<MiB>.bin, 1 GiB by
//! default; `IOSERVE_BENCH_FILE_GB` sets it (0.25 to 10).
//!
//! `cargo bench -p benches --bench read_strategies`

#![allow(missing_docs, reason = "a bench binary")]

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Read, Write as _};
use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _};
use std::os::unix::io::AsRawFd as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Bytes per chunk of work (and per latency sample).
const CHUNK: usize = 8 << 20;
const ROUNDS: usize = 3;

const STRATEGIES: [&str; 7] = [
    "mmap",
    "mmap+sequential",
    "mmap+populate",
    "buffered-4MiB",
    "read-8MiB",
    "pread-odirect-8MiB",
    "io_uring-1MiB-x4",
];

/// io_uring: reads of this size, this many in flight.
const URING_READ: usize = 1 << 20;
const URING_DEPTH: usize = 4;

/// The child's exit status when the kernel (or qemu-user) offers no io_uring.
const UNAVAILABLE: i32 = 3;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(position) = args.iter().position(|arg| arg == "--child") {
        let (strategy, path) = (&args[position + 1], PathBuf::from(&args[position + 2]));
        match child(strategy, &path) {
            Ok(line) => println!("{line}"),
            Err(error) => {
                eprintln!("read_strategies: {strategy} on {}: {error}", path.display());
                let unavailable = strategy.starts_with("io_uring")
                    && matches!(error.raw_os_error(), Some(libc::ENOSYS | libc::EPERM));
                std::process::exit(if unavailable { UNAVAILABLE } else { 1 });
            }
        }
        return;
    }
    // `cargo bench` passes --bench; `--list` and filters are criterion conventions.
    if args.iter().any(|arg| arg == "--list") {
        for strategy in STRATEGIES {
            println!("read_strategies/{strategy}: bench");
        }
        return;
    }
    if let Err(error) = parent(filter(&args[1..])) {
        eprintln!("read_strategies: {error}");
        std::process::exit(1);
    }
}

/// The first argument that is neither an option nor the value of one (criterion's
/// convention for a filter).
fn filter(args: &[String]) -> Option<&str> {
    const WITH_VALUE: [&str; 5] = [
        "--warm-up-time",
        "--measurement-time",
        "--sample-size",
        "--save-baseline",
        "--baseline",
    ];
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if WITH_VALUE.contains(&arg.as_str()) {
            args.next();
        } else if !arg.starts_with('-') {
            return Some(arg);
        }
    }
    None
}

/// The file size from `IOSERVE_BENCH_FILE_GB` (default 1).
fn file_bytes() -> io::Result<u64> {
    let gb = match std::env::var("IOSERVE_BENCH_FILE_GB") {
        Ok(text) => {
            text.parse::<f64>()
                .ok()
                .filter(|gb| (0.25..=10.0).contains(gb))
                .ok_or_else(|| {
                    io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("IOSERVE_BENCH_FILE_GB={text}: expected a number of GiB from 0.25 to 10"),
            )
                })?
        }
        Err(_) => 1.0,
    };
    Ok(((gb * 1024.0) as u64) << 20)
}

/// Where the data file and the report go: `CARGO_TARGET_DIR` when set (as
/// run-benches.sh does on an ARM runner), else the workspace's target directory when
/// run by cargo, else ./target.
fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir);
    }
    match std::env::var_os("CARGO_MANIFEST_DIR") {
        Some(manifest) => Path::new(&manifest).join("../target"),
        None => PathBuf::from("target"),
    }
}

/// Creates the data file once: pseudo-random bytes with about one zero in 16.
fn data_file(bytes: u64) -> io::Result<PathBuf> {
    let dir = target_dir().join("bench-data");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("read-{}MiB.bin", bytes >> 20));
    if path.metadata().is_ok_and(|m| m.len() == bytes) {
        return Ok(path);
    }
    let partial = path.with_extension("partial");
    let mut file = File::create(&partial)?;
    let mut keys = benches::KeyStream::new(3);
    let mut chunk = vec![0u8; CHUNK];
    for _ in 0..bytes / CHUNK as u64 {
        for byte in chunk.iter_mut() {
            *byte = (keys.next_u64() >> 56) as u8 % 16;
        }
        file.write_all(&chunk)?;
    }
    file.sync_all()?;
    std::fs::rename(&partial, &path)?;
    Ok(path)
}

fn parent(filter: Option<&str>) -> io::Result<()> {
    let bytes = file_bytes()?;
    let path = data_file(bytes)?;
    let exe = std::env::current_exe()?;
    println!(
        "read_strategies: {} MiB file {}, {ROUNDS} rounds, medians",
        bytes >> 20,
        path.display()
    );
    println!("| strategy | cache | GB/s | p95 ms per 8 MiB | peak RSS MiB | major faults |");
    println!("|---|---|---|---|---|---|");
    let mut table = String::from(
        "| strategy | cache | GB/s | p95 ms per 8 MiB | peak RSS MiB | major faults |\n|---|---|---|---|---|---|\n",
    );
    for strategy in STRATEGIES
        .iter()
        .filter(|s| filter.is_none_or(|f| s.contains(f) || "read_strategies".contains(f)))
    {
        for cold in [false, true] {
            let mut runs: Vec<Run> = Vec::new();
            for _ in 0..ROUNDS {
                if cold {
                    drop_cache(&path)?;
                } else {
                    warm_cache(&path)?;
                }
                let output = child_command(&exe)
                    .args(["--child", strategy])
                    .arg(&path)
                    .output()?;
                if output.status.code() == Some(UNAVAILABLE) {
                    break;
                }
                if !output.status.success() {
                    return Err(io::Error::other(format!(
                        "{strategy} failed ({}): {}",
                        output.status,
                        String::from_utf8_lossy(&output.stderr).trim()
                    )));
                }
                runs.push(Run::parse(&String::from_utf8_lossy(&output.stdout))?);
            }
            let cache = if cold { "cold" } else { "warm" };
            if runs.is_empty() {
                let line =
                    format!("| {strategy} | {cache} | unavailable: no io_uring here | | | |");
                println!("{line}");
                table.push_str(&line);
                table.push('\n');
                continue;
            }
            runs.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
            let median = &runs[runs.len() / 2];
            let line = format!(
                "| {strategy} | {cache} | {:.2} | {:.1} | {:.0} | {} |",
                bytes as f64 / median.seconds / 1e9,
                median.p95_ms,
                median.max_rss_kib as f64 / 1024.0,
                median.major_faults
            );
            println!("{line}");
            table.push_str(&line);
            table.push('\n');
        }
    }
    // For `cargo xtask bench`'s report.
    let report_dir = target_dir().join("bench-report");
    std::fs::create_dir_all(&report_dir)?;
    let heading = format!(
        "## read_strategies — seed 003: reading a {} MiB file, median of {ROUNDS} rounds, each in its own process\n\n",
        bytes >> 20
    );
    std::fs::write(report_dir.join("read_strategies.md"), heading + &table)?;
    Ok(())
}

/// The command that re-executes this bench: directly, or through the emulator named
/// by `IOSERVE_BENCH_RUNNER` (e.g. "qemu-aarch64 -L /usr/aarch64-linux-gnu", which
/// `cargo xtask cross --smoke` sets: under qemu-user a child cannot exec the guest
/// binary by itself).
fn child_command(exe: &Path) -> Command {
    let runner = std::env::var("IOSERVE_BENCH_RUNNER").unwrap_or_default();
    let mut words = runner.split_whitespace();
    match words.next() {
        Some(program) => {
            let mut command = Command::new(program);
            command.args(words).arg(exe);
            command
        }
        None => Command::new(exe),
    }
}

/// Evicts the file from the page cache.
fn drop_cache(path: &Path) -> io::Result<()> {
    let file = File::open(path)?;
    file.sync_all()?;
    // SAFETY: a valid descriptor; offset 0 and length 0 mean the whole file.
    let result = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if result != 0 {
        return Err(io::Error::from_raw_os_error(result));
    }
    Ok(())
}

/// Reads the file once so that it is cached.
fn warm_cache(path: &Path) -> io::Result<()> {
    let mut file = File::open(path)?;
    let mut buffer = vec![0u8; CHUNK];
    while file.read(&mut buffer)? > 0 {}
    Ok(())
}

/// One child's report.
struct Run {
    seconds: f64,
    p95_ms: f64,
    max_rss_kib: u64,
    major_faults: u64,
}

impl Run {
    fn parse(line: &str) -> io::Result<Run> {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let bad = || io::Error::other(format!("bad child report '{}'", line.trim()));
        let [seconds, p95_ms, max_rss_kib, major_faults, _zeros] = fields.as_slice() else {
            return Err(bad());
        };
        Ok(Run {
            seconds: seconds.parse().map_err(|_| bad())?,
            p95_ms: p95_ms.parse().map_err(|_| bad())?,
            max_rss_kib: max_rss_kib.parse().map_err(|_| bad())?,
            major_faults: major_faults.parse().map_err(|_| bad())?,
        })
    }
}

/// Reads the whole file with `strategy`, timing each 8 MiB of data; prints
/// "seconds p95_ms max_rss_kib major_faults zeros".
fn child(strategy: &str, path: &Path) -> io::Result<String> {
    let started = Instant::now();
    let mut chunk_ns: Vec<u64> = Vec::new();
    let mut zeros = 0usize;
    let mut chunk_started = Instant::now();
    let mut since_sample = 0usize;
    // Counts the zeros of each piece read and takes a latency sample per 8 MiB.
    let mut work = |chunk: &[u8]| {
        zeros += ioserve_simd::count::count(chunk, 0);
        since_sample += chunk.len();
        if since_sample >= CHUNK {
            chunk_ns.push(chunk_started.elapsed().as_nanos() as u64);
            chunk_started = Instant::now();
            since_sample = 0;
        }
    };
    read_with(strategy, path, &mut work)?;
    let seconds = started.elapsed().as_secs_f64();
    chunk_ns.sort_unstable();
    let p95 = chunk_ns
        .get(chunk_ns.len() * 95 / 100)
        .copied()
        .unwrap_or(0);
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    Ok(format!(
        "{seconds} {} {} {} {zeros}",
        p95 as f64 / 1e6,
        usage.ru_maxrss,
        usage.ru_majflt
    ))
}

/// Reads the whole file at `path` the way `strategy` names, handing each piece to
/// `work` in file order.
fn read_with(strategy: &str, path: &Path, work: &mut impl FnMut(&[u8])) -> io::Result<()> {
    match strategy {
        "mmap" | "mmap+sequential" | "mmap+populate" => {
            let file = File::open(path)?;
            let mut options = memmap2::MmapOptions::new();
            if strategy == "mmap+populate" {
                options.populate();
            }
            // SAFETY: the bench's own file, not modified while mapped.
            let map = unsafe { options.map(&file)? };
            if strategy == "mmap+sequential" {
                map.advise(memmap2::Advice::Sequential)?;
            }
            map.chunks(CHUNK).for_each(work);
        }
        "buffered-4MiB" => {
            read_in_chunks(BufReader::with_capacity(4 << 20, File::open(path)?), work)?;
        }
        "read-8MiB" => read_in_chunks(File::open(path)?, work)?,
        "pread-odirect-8MiB" => {
            let file = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(path)?;
            let mut buffer = AlignedBuffer::new(CHUNK, 4096);
            let mut offset = 0u64;
            loop {
                let chunk = buffer.as_mut_slice();
                let filled = file.read_at(chunk, offset)?;
                if filled == 0 {
                    break;
                }
                offset += filled as u64;
                work(&chunk[..filled]);
            }
        }
        "io_uring-1MiB-x4" => read_with_io_uring(path, work)?,
        other => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("unknown strategy {other}"),
            ))
        }
    }
    Ok(())
}

/// Reads `reader` to its end in full CHUNK-sized pieces (the last may be shorter).
fn read_in_chunks(mut reader: impl Read, work: &mut impl FnMut(&[u8])) -> io::Result<()> {
    let mut chunk = vec![0u8; CHUNK];
    loop {
        let filled = read_full(&mut reader, &mut chunk)?;
        if filled == 0 {
            return Ok(());
        }
        work(&chunk[..filled]);
    }
}

/// Reads the file with io_uring, URING_DEPTH reads of URING_READ bytes in flight,
/// handing each completed buffer to `work` (in completion order) before reusing it.
fn read_with_io_uring(path: &Path, work: &mut impl FnMut(&[u8])) -> io::Result<()> {
    use io_uring::{opcode, types, IoUring};

    let file = File::open(path)?;
    let len = file.metadata()?.len();
    let fd = types::Fd(file.as_raw_fd());
    let mut ring = IoUring::new(URING_DEPTH as u32)?;
    let mut buffers: Vec<Vec<u8>> = (0..URING_DEPTH).map(|_| vec![0u8; URING_READ]).collect();
    let mut next_offset = 0u64;
    let mut in_flight = 0;
    // Queues a read into buffer `index` at the next offset, if any is left.
    let mut submit =
        |ring: &mut IoUring, buffers: &mut [Vec<u8>], index: usize| -> io::Result<bool> {
            if next_offset >= len {
                return Ok(false);
            }
            let buffer = &mut buffers[index];
            let entry = opcode::Read::new(fd, buffer.as_mut_ptr(), URING_READ as u32)
                .offset(next_offset)
                .build()
                .user_data(index as u64);
            next_offset += URING_READ as u64;
            // SAFETY: the fd and the buffer stay alive and untouched until this read's
            // completion is reaped below (each buffer has at most one read in flight).
            unsafe { ring.submission().push(&entry) }
                .map_err(|_| io::Error::other("io_uring submission queue full"))?;
            Ok(true)
        };
    for index in 0..URING_DEPTH {
        if submit(&mut ring, &mut buffers, index)? {
            in_flight += 1;
        }
    }
    while in_flight > 0 {
        ring.submit_and_wait(1)?;
        let completed: Vec<(usize, i32)> = ring
            .completion()
            .map(|cqe| (cqe.user_data() as usize, cqe.result()))
            .collect();
        for (index, result) in completed {
            in_flight -= 1;
            if result < 0 {
                return Err(io::Error::from_raw_os_error(-result));
            }
            work(&buffers[index][..result as usize]);
            if submit(&mut ring, &mut buffers, index)? {
                in_flight += 1;
            }
        }
    }
    Ok(())
}

/// Fills `buffer` unless the file ends first; returns the bytes read.
fn read_full(reader: &mut impl Read, buffer: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match reader.read(&mut buffer[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

/// A heap buffer aligned for O_DIRECT.
struct AlignedBuffer {
    pointer: *mut u8,
    layout: std::alloc::Layout,
}

impl AlignedBuffer {
    fn new(len: usize, align: usize) -> AlignedBuffer {
        let layout = std::alloc::Layout::from_size_align(len, align).expect("a valid layout");
        // SAFETY: the layout has a non-zero size.
        let pointer = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!pointer.is_null(), "out of memory for the O_DIRECT buffer");
        AlignedBuffer { pointer, layout }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `pointer` holds `layout.size()` initialised (zeroed) bytes owned by self.
        unsafe { std::slice::from_raw_parts_mut(self.pointer, self.layout.size()) }
    }
}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.pointer, self.layout) };
    }
}
