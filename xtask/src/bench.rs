//! `cargo xtask bench`: runs the criterion benches (and the Go peers), then the simd
//! bench again in a `-C target-cpu=native` build, and writes
//! target/bench-report/report.md (one table per seed's group and build, with the ratio
//! of ours to the best peer), results.json (every median behind it) and one SVG chart
//! per group and build: throughput against input size where a group sweeps sizes, bars
//! otherwise. The numbers are criterion's medians, read back from its JSON estimates;
//! nothing is computed that criterion did not measure.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context as _, Result};
use serde::Serialize;

use crate::util::svg::{Anchor, Stroke, Svg, PALETTE};
use crate::util::{cargo, project_root, step};

/// The command-line options.
#[derive(Debug, clap::Args)]
pub(crate) struct Options {
    /// A 256 MiB file for the read strategies instead of 1 GiB, fewer samples
    #[arg(long)]
    quick: bool,
    /// Only the benchmark ids matching this regex, e.g. 'base64|hash'
    #[arg(long, value_name = "REGEX")]
    filter: Option<String>,
    /// Skip the simd bench's second, `-C target-cpu=native` build
    #[arg(long)]
    no_native: bool,
    /// Only the simd bench, in both builds, from one run into fresh criterion
    /// directories: writes target/bench-report/simd-table.md, a table per build and
    /// kernel with a row per size (ours, the fastest peer, the ratio) under a header
    /// naming the CPU, the implementations dispatched (SIMD_DISABLE applies), the date,
    /// the commit and the command; on an x86_64 CPU with AVX-512 and no SIMD_DISABLE,
    /// the same again with SIMD_DISABLE=avx512bw (the AVX2 paths). Honours --quick,
    /// --filter and --no-native
    #[arg(long)]
    simd_table: bool,
    /// With --simd-table: also put the table between the markers
    /// `<!-- simd-table:start -->` and `<!-- simd-table:end -->` in crates/simd/README.md
    #[arg(long, requires = "simd_table")]
    write_readme: bool,
}

/// The simd bench's groups: the ones run in both builds.
const SIMD_GROUPS: [&str; 5] = ["base64_encode", "base64_decode", "hash", "adler32", "count"];

/// Which compilation a measurement comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Build {
    /// The default target (x86-64 baseline: SSE2): peers that choose at compile time
    /// get no AES or AVX2; ours and the runtime-dispatching peers choose at run time.
    Portable,
    /// `RUSTFLAGS="-C target-cpu=native"` (and `CXXFLAGS=-march=native` for simdutf).
    Native,
}

impl Build {
    fn describe(self) -> &'static str {
        match self {
            Build::Portable => "portable build",
            Build::Native => "`-C target-cpu=native` build",
        }
    }

    /// The suffix of its chart files.
    fn file_suffix(self) -> &'static str {
        match self {
            Build::Portable => "",
            Build::Native => "-native",
        }
    }
}

/// What the report knows about a group: its seed, which functions are ours and which
/// are limits (memcpy) rather than peers.
struct GroupInfo {
    /// The group id, or its prefix when it ends in '/'.
    id: &'static str,
    seed: &'static str,
    ours: &'static [&'static str],
    limits: &'static [&'static str],
}

const GROUPS: &[GroupInfo] = &[
    GroupInfo {
        id: "maps/",
        seed: "001: concurrent maps",
        ours: &["ShardedMap"],
        limits: &[],
    },
    GroupInfo {
        id: "false_sharing",
        seed: "001: false sharing",
        ours: &["padded", "striped"],
        limits: &["alone"],
    },
    GroupInfo {
        id: "base64_encode",
        seed: "002: base64 encode",
        ours: &["simd"],
        limits: &["memcpy"],
    },
    GroupInfo {
        id: "base64_decode",
        seed: "002: base64 decode",
        ours: &["simd"],
        limits: &["memcpy"],
    },
    GroupInfo {
        id: "hash",
        seed: "002: AES hash",
        ours: &["simd", "simd-map"],
        limits: &["memcpy"],
    },
    GroupInfo {
        id: "adler32",
        seed: "003: adler32",
        ours: &["simd"],
        limits: &["memcpy"],
    },
    GroupInfo {
        id: "count",
        seed: "003: byte count",
        ours: &["simd"],
        limits: &["memcpy"],
    },
    GroupInfo {
        id: "clock_read",
        seed: "004 and 002: reading the time",
        ours: &[
            "ioserve/CachedClock::now",
            "ioserve/CachedClock::now_system",
        ],
        limits: &[],
    },
];

fn group_info(group: &str) -> Option<&'static GroupInfo> {
    GROUPS.iter().find(|info| {
        if let Some(prefix) = info.id.strip_suffix('/') {
            group.starts_with(prefix) && group[prefix.len()..].starts_with('/')
        } else {
            group == info.id
        }
    })
}

/// One measured median.
#[derive(Clone, Debug, Serialize)]
struct Row {
    group: String,
    function: String,
    /// The parameter (size, thread count), empty when there is none.
    value: String,
    /// ns per iteration: criterion's median, or for `source` "interleaved" (the simd
    /// table) the fastest of the interleaved rounds.
    median_ns: f64,
    /// Bytes per iteration, for GB/s.
    bytes: Option<u64>,
    /// Elements per iteration, for ns per element.
    elements: Option<u64>,
    source: &'static str,
    build: Build,
}

impl Row {
    /// The figure the report shows: GB/s for byte throughput (higher is better), else
    /// ns per element or per iteration (lower is better).
    fn figure(&self) -> f64 {
        match (self.bytes, self.elements) {
            (Some(bytes), _) => bytes as f64 / self.median_ns,
            (None, Some(elements)) => self.median_ns / elements.max(1) as f64,
            (None, None) => self.median_ns,
        }
    }

    fn higher_is_better(&self) -> bool {
        self.bytes.is_some()
    }
}

pub(crate) fn run(options: &Options) -> Result<()> {
    if options.simd_table {
        return run_simd_table(options);
    }
    let target = crate::util::target_dir()?;
    let out = target.join("bench-report");
    let read_strategies = out.join("read_strategies.md");
    // The read-strategy bench writes its own table (it is not a criterion bench).
    fs::remove_file(&read_strategies).ok();
    let mut command = cargo(&bench_args("*", options));
    if options.quick && std::env::var_os("IOSERVE_BENCH_FILE_GB").is_none() {
        command.env("IOSERVE_BENCH_FILE_GB", "0.25");
    }
    step("cargo bench --package benches", command)?;
    let mut rows = criterion_rows(&target.join("criterion"), Build::Portable)?;
    if !options.no_native && wants(options, &SIMD_GROUPS) {
        let native_home = target.join("criterion-native");
        step(
            "cargo bench --package benches --bench simd, -C target-cpu=native",
            native_command(options, &native_home)?,
        )?;
        rows.extend(criterion_rows(&native_home, Build::Native)?);
    }
    if let Some(filter) = &options.filter {
        // Keep this run's benchmarks, not older results of the others: criterion takes
        // the filter as a regex; here its `|` alternatives are matched as substrings
        // of the benchmark id, which agrees for plain names.
        rows.retain(|row| {
            let id = format!("{}/{}/{}", row.group, row.function, row.value);
            filter.split('|').any(|part| id.contains(part))
        });
    }
    // Go's sync.Map belongs to the maps groups: run it unless the filter leaves them out.
    if wants(options, &["maps"]) {
        match go_sync_map_rows(options.quick) {
            Ok(go_rows) => rows.extend(go_rows),
            Err(error) => eprintln!("xtask bench: Go peer skipped: {error:#}"),
        }
    }
    if rows.is_empty() && !read_strategies.exists() {
        bail!("no results: nothing under target/criterion matched, and no read-strategy table");
    }
    fs::create_dir_all(&out)?;
    fs::write(
        out.join("results.json"),
        serde_json::to_string_pretty(&rows)?,
    )?;
    let mut report = report(&rows);
    if let Ok(table) = fs::read_to_string(&read_strategies) {
        report.push('\n');
        report.push_str(&table);
    }
    fs::write(out.join("report.md"), &report)?;
    for ((group, build), group_rows) in by_group(&rows) {
        let file = format!(
            "{}{}.svg",
            group.replace(['/', ' '], "_"),
            build.file_suffix()
        );
        fs::write(out.join(file), svg_chart(&group, build, &group_rows))?;
    }
    println!("{report}");
    eprintln!(
        "xtask bench: wrote {}/report.md, results.json and one SVG per group and build",
        out.display()
    );
    Ok(())
}

/// `cargo bench` of `bench` ("*" for all) with the options' timing and filter.
fn bench_args<'a>(bench: &'a str, options: &'a Options) -> Vec<&'a str> {
    let mut args = vec![
        "bench",
        "--package",
        "benches",
        "--bench",
        bench,
        "--",
        "--noplot",
    ];
    if options.quick {
        args.extend([
            "--warm-up-time",
            "0.2",
            "--measurement-time",
            "0.4",
            "--sample-size",
            "10",
        ]);
    }
    if let Some(filter) = &options.filter {
        args.push(filter);
    }
    args
}

/// The simd bench built for this CPU ([`crate::for_this_cpu`]) with its own criterion
/// directory.
fn native_command(options: &Options, criterion_home: &Path) -> Result<Command> {
    let mut command = cargo(&bench_args("simd", options));
    crate::util::for_this_cpu(&mut command)?.env("CRITERION_HOME", criterion_home);
    Ok(command)
}

/// Whether the filter (if any) can select one of `groups`: one of its `|`
/// alternatives and a group name contains the other.
fn wants(options: &Options, groups: &[&str]) -> bool {
    options.filter.as_ref().is_none_or(|filter| {
        filter.split('|').any(|part| {
            groups
                .iter()
                .any(|group| group.contains(part) || part.contains(group))
        })
    })
}

/// Every benchmark in criterion's output directory (its latest run of each), from
/// `build`.
fn criterion_rows(root: &Path, build: Build) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|name| name == "new") {
                    if let Some(row) = read_estimate(&path, build)? {
                        rows.push(row);
                    }
                } else if path
                    .file_name()
                    .is_none_or(|name| name != "base" && name != "change")
                {
                    stack.push(path);
                }
            }
        }
    }
    rows.sort_by(|a, b| (&a.group, &a.value, &a.function).cmp(&(&b.group, &b.value, &b.function)));
    Ok(rows)
}

fn read_estimate(dir: &Path, build: Build) -> Result<Option<Row>> {
    let (Ok(benchmark), Ok(estimates)) = (
        fs::read_to_string(dir.join("benchmark.json")),
        fs::read_to_string(dir.join("estimates.json")),
    ) else {
        return Ok(None);
    };
    let benchmark: serde_json::Value = serde_json::from_str(&benchmark)
        .with_context(|| format!("{}/benchmark.json", dir.display()))?;
    let estimates: serde_json::Value = serde_json::from_str(&estimates)
        .with_context(|| format!("{}/estimates.json", dir.display()))?;
    let Some(median_ns) = estimates["median"]["point_estimate"].as_f64() else {
        return Ok(None);
    };
    Ok(Some(Row {
        group: benchmark["group_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        function: benchmark["function_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        value: benchmark["value_str"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        median_ns,
        bytes: benchmark["throughput"]["Bytes"].as_u64(),
        elements: benchmark["throughput"]["Elements"].as_u64(),
        source: "criterion",
        build,
    }))
}

/// Go's sync.Map beside the maps group (`go test -bench` in benches/peers/go-syncmap;
/// ns/op is wall time per operation over all goroutines, as the criterion rows).
fn go_sync_map_rows(quick: bool) -> Result<Vec<Row>> {
    let go = crate::util::find_go()?;
    let benchtime = if quick { "200ms" } else { "1s" };
    let output = Command::new(&go)
        .current_dir(project_root().join("benches/peers/go-syncmap"))
        .args([
            "test",
            "-run",
            "^$",
            "-bench",
            ".",
            "-benchtime",
            benchtime,
            "-count",
            "1",
        ])
        .output()
        .context("cannot run go test -bench")?;
    if !output.status.success() {
        bail!(
            "go test -bench failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let mut rows = Vec::new();
    // BenchmarkSyncMap/read90/1t-2   12345678   95.3 ns/op
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [name, _, ns, "ns/op", ..] = fields.as_slice() else {
            continue;
        };
        let Some(rest) = name.strip_prefix("BenchmarkSyncMap/") else {
            continue;
        };
        let rest = rest.rsplit_once('-').map_or(rest, |(head, _)| head);
        let Some((mix, threads)) = rest.split_once('/') else {
            continue;
        };
        let median_ns: f64 = ns
            .parse()
            .with_context(|| format!("bad ns/op in '{line}'"))?;
        rows.push(Row {
            group: format!("maps/{mix}"),
            function: "Go sync.Map".to_owned(),
            value: threads.to_owned(),
            median_ns,
            bytes: None,
            elements: Some(1),
            source: "go test -bench",
            build: Build::Portable,
        });
    }
    Ok(rows)
}

/// The rows of each group and build.
fn by_group(rows: &[Row]) -> BTreeMap<(String, Build), Vec<Row>> {
    let mut groups: BTreeMap<(String, Build), Vec<Row>> = BTreeMap::new();
    for row in rows {
        groups
            .entry((row.group.clone(), row.build))
            .or_default()
            .push(row.clone());
    }
    groups
}

/// Sorts parameter values numerically where they start with a number ("16B" <
/// "1KiB" by their byte counts; "1t" < "2t").
fn value_key(value: &str) -> (u64, String) {
    let digits: String = value.chars().take_while(char::is_ascii_digit).collect();
    let number: u64 = digits.parse().unwrap_or(0);
    let scale = match &value[digits.len()..] {
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => 1,
    };
    (number * scale, value.to_owned())
}

fn report(rows: &[Row]) -> String {
    let mut out = String::from(
        "# Bench report\n\nMedians from criterion (and `go test -bench` for Go's sync.Map), \
         from `cargo xtask bench`. GB/s where a group counts bytes (higher is better), \
         otherwise ns per operation (lower is better). \"ours / best peer\" is the speed \
         ratio of our best entry to the best peer (above 1: ours is faster); limits such \
         as memcpy are not peers. The simd groups appear twice: the portable build and \
         a `-C target-cpu=native` build (where peers that choose their instructions at \
         compile time get AES and AVX2; ours chooses at run time in both).\n",
    );
    let groups = by_group(rows);
    let built_twice = |group: &str| {
        groups.contains_key(&(group.to_owned(), Build::Portable))
            && groups.contains_key(&(group.to_owned(), Build::Native))
    };
    for ((group, build), group_rows) in &groups {
        let table = GroupTable::new(group, group_rows);
        let unit = table.unit();
        let seed = table.info.map_or("", |info| info.seed);
        let seed = if seed.is_empty() {
            String::new()
        } else {
            format!(" — seed {seed}")
        };
        let build = if built_twice(group) {
            format!(", {}", build.describe())
        } else {
            String::new()
        };
        let _ = write!(out, "\n## {group} ({unit}){seed}{build}\n\n");
        let mut values: Vec<String> = group_rows.iter().map(|row| row.value.clone()).collect();
        values.sort_by_key(|value| value_key(value));
        values.dedup();
        if values.len() == 1 {
            // One measurement per function (no size or thread parameter): a column.
            table.column(&mut out);
        } else {
            table.grid(&mut out, values);
        }
    }
    out
}

/// One group's rows and what each function is to the report: ours, a peer, a limit.
struct GroupTable<'a> {
    info: Option<&'static GroupInfo>,
    rows: &'a [Row],
    /// Ours first, then peers, then limits; by name within each.
    functions: Vec<String>,
}

impl<'a> GroupTable<'a> {
    fn new(group: &str, rows: &'a [Row]) -> GroupTable<'a> {
        let mut table = GroupTable {
            info: group_info(group),
            rows,
            functions: Vec::new(),
        };
        let mut functions: Vec<String> = rows.iter().map(|row| row.function.clone()).collect();
        functions.sort();
        functions.dedup();
        functions.sort_by_key(|f| (!table.is_ours(f), table.is_limit(f), f.clone()));
        table.functions = functions;
        table
    }

    fn is_ours(&self, function: &str) -> bool {
        self.info.is_some_and(|info| info.ours.contains(&function))
    }

    fn is_limit(&self, function: &str) -> bool {
        self.info
            .is_some_and(|info| info.limits.contains(&function))
    }

    fn unit(&self) -> &'static str {
        if self.rows[0].higher_is_better() {
            "GB/s"
        } else {
            "ns/op"
        }
    }

    /// One figure per function, with its role.
    fn column(&self, out: &mut String) {
        let _ = writeln!(out, "| function | {} | role |\n|---|---|---|", self.unit());
        for function in &self.functions {
            if let Some(row) = self.rows.iter().find(|row| &row.function == function) {
                let role = if self.is_ours(function) {
                    "ours"
                } else if self.is_limit(function) {
                    "limit"
                } else {
                    "peer"
                };
                let _ = writeln!(out, "| {function} | {:.2} | {role} |", row.figure());
            }
        }
    }

    /// A row per parameter value, a column per function, and the speed ratio of our
    /// best entry to the best peer.
    fn grid(&self, out: &mut String, values: Vec<String>) {
        let functions = &self.functions;
        let _ = writeln!(out, "| | {} | ours / best peer |", functions.join(" | "));
        let _ = writeln!(out, "|---|{}---|", "---|".repeat(functions.len()));
        for value in values {
            let at: Vec<&Row> = self.rows.iter().filter(|row| row.value == value).collect();
            let cells: Vec<String> = functions
                .iter()
                .map(|f| {
                    at.iter()
                        .find(|row| &row.function == f)
                        .map_or(String::new(), |row| format!("{:.2}", row.figure()))
                })
                .collect();
            let label = if value.is_empty() {
                "-".to_owned()
            } else {
                value
            };
            let ratio = self.ratio(&at);
            let _ = writeln!(out, "| {label} | {} | {ratio} |", cells.join(" | "));
        }
    }

    /// Our best entry and the best peer among rows `at` one parameter value (limits
    /// are neither): the one definition of "ours against the best peer", for
    /// report.md's grids and `--simd-table`.
    fn best<'r>(&self, at: &[&'r Row]) -> (Option<&'r Row>, Option<&'r Row>) {
        let higher = at.first().is_some_and(|row| row.higher_is_better());
        let best = |pick: &dyn Fn(&str) -> bool| {
            at.iter()
                .copied()
                .filter(|row| pick(&row.function))
                .reduce(|a, b| {
                    let b_is_better = if higher {
                        b.figure() > a.figure()
                    } else {
                        b.figure() < a.figure()
                    };
                    if b_is_better {
                        b
                    } else {
                        a
                    }
                })
        };
        (
            best(&|f| self.is_ours(f)),
            best(&|f| !self.is_ours(f) && !self.is_limit(f)),
        )
    }

    /// Ours over the best peer among rows `at` one parameter value, as "1.23x" (above
    /// 1: ours is faster); empty without both.
    fn ratio(&self, at: &[&Row]) -> String {
        match self.best(at) {
            (Some(ours), Some(peer)) if ours.higher_is_better() => {
                format!("{:.2}x", ours.figure() / peer.figure())
            }
            (Some(ours), Some(peer)) => format!("{:.2}x", peer.figure() / ours.figure()),
            _ => String::new(),
        }
    }
}

/// The markers around the generated table in crates/simd/README.md.
const README_START: &str = "<!-- simd-table:start -->";
const README_END: &str = "<!-- simd-table:end -->";

/// Interleaved rounds of the simd bench for `--simd-table` (`--quick`: [`QUICK_ROUNDS`]).
const ROUNDS: usize = 200;
/// Interleaved rounds with `--quick`.
const QUICK_ROUNDS: usize = 20;

/// `cargo xtask bench --simd-table`: the simd bench alone in its interleaved rounds
/// (`SIMD_BENCH_ROUNDS`: every function of a group and size in turn, round after
/// round, each keeping its fastest; criterion runs one function for seconds before the
/// next, and on this project's shared 2-core VM a row then moved by 20 % to 1.6x
/// between runs, more than most of the margins the table is read for), in each build,
/// written into a directory emptied first (so that every figure is of this run), then
/// [`simd_table`] into target/bench-report/simd-table.md and, with --write-readme,
/// between the markers in crates/simd/README.md.
fn run_simd_table(options: &Options) -> Result<()> {
    if let Some(filter) = options
        .filter
        .as_ref()
        .filter(|_| !wants(options, &SIMD_GROUPS))
    {
        bail!(
            "--simd-table: --filter '{filter}' selects none of the simd bench's groups ({})",
            SIMD_GROUPS.join(", ")
        );
    }
    let target = crate::util::target_dir()?;
    let out = target.join("bench-report");
    fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut builds = vec![Build::Portable];
    if !options.no_native {
        builds.push(Build::Native);
    }
    let rounds = if options.quick { QUICK_ROUNDS } else { ROUNDS };
    let mut tables = Vec::new();
    for disable in simd_table_passes() {
        let (rows, implementations) =
            measure_simd_table(options, &target, &builds, rounds, disable.as_deref())?;
        let now = time::OffsetDateTime::now_utc();
        let header = TableHeader {
            cpu: cpu_model(),
            implementations,
            simd_disable: disable,
            date: format!("{} {:02}:{:02} UTC", now.date(), now.hour(), now.minute()),
            commit: commit(),
            command: command_line(),
            rounds,
        };
        tables.push(simd_table(&rows, &header));
    }
    let table = format!(
        "_Written by `cargo xtask bench --simd-table`: run it again (with `--write-readme` \
         for this README) rather than editing these tables._\n\n{}",
        tables.join("\n")
    );
    let file = out.join("simd-table.md");
    fs::write(&file, &table).with_context(|| format!("cannot write {}", file.display()))?;
    println!("{table}");
    eprintln!("xtask bench: wrote {}", file.display());
    if options.write_readme {
        let readme = project_root().join("crates/simd/README.md");
        let text = fs::read_to_string(&readme)
            .with_context(|| format!("cannot read {}", readme.display()))?;
        let replaced = replace_marked(&text, &table, &readme)?;
        fs::write(&readme, replaced)
            .with_context(|| format!("cannot write {}", readme.display()))?;
        eprintln!(
            "xtask bench: wrote the table between {README_START} and {README_END} in {}",
            readme.display()
        );
    }
    Ok(())
}

/// The dispatch variants `--simd-table` measures, as the `SIMD_DISABLE` of each: the
/// caller's (none, or what they set), and on an x86_64 CPU with AVX-512 (when the
/// caller set nothing) also [`AVX2_PASS`], the AVX2 paths most servers and CI runners
/// take, so that one run shows both. In that pass the peers take AVX2 too: simdutf
/// by `SIMDUTF_FORCE_IMPLEMENTATION=haswell`, and the native build is compiled
/// without AVX-512 ([`crate::util::for_this_cpu_without_avx512`]), as on an AVX2 host.
fn simd_table_passes() -> Vec<Option<String>> {
    let set = std::env::var("SIMD_DISABLE")
        .ok()
        .filter(|value| !value.trim().is_empty());
    #[cfg(target_arch = "x86_64")]
    if set.is_none() && std::arch::is_x86_feature_detected!("avx512bw") {
        return vec![None, Some(AVX2_PASS.to_owned())];
    }
    vec![set]
}

/// The `SIMD_DISABLE` of `--simd-table`'s AVX2 pass on an AVX-512 host, which also
/// puts the peers on AVX2 ([`measure_simd_table`]).
const AVX2_PASS: &str = "avx512bw";

/// The simd bench's interleaved rounds in each of `builds` with `SIMD_DISABLE` set to
/// `disable` (or left as it is), each build's results in a directory emptied first
/// (so that every figure is of this run): the rows of the simd groups, and per build
/// the implementations the bench says it ran.
fn measure_simd_table(
    options: &Options,
    target: &Path,
    builds: &[Build],
    rounds: usize,
    disable: Option<&str>,
) -> Result<(Vec<Row>, Implementations)> {
    let mut rows = Vec::new();
    let mut implementations = BTreeMap::new();
    for &build in builds {
        let pass = disable.map_or(String::new(), |value| format!("-without-{value}"));
        let home = target.join(format!("criterion-simd-table{}{pass}", build.file_suffix()));
        match fs::remove_dir_all(&home) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => {
                return Err(error).with_context(|| format!("cannot empty {}", home.display()))
            }
        }
        fs::create_dir_all(&home).with_context(|| format!("cannot create {}", home.display()))?;
        let recorded = home.join("implementations.txt");
        let results = home.join("rounds.jsonl");
        let mut command = cargo(&["bench", "--package", "benches", "--bench", "simd"]);
        match (build, disable) {
            (Build::Native, Some(AVX2_PASS)) => {
                crate::util::for_this_cpu_without_avx512(&mut command)?;
            }
            (Build::Native, _) => {
                crate::util::for_this_cpu(&mut command)?;
            }
            (Build::Portable, _) => {}
        }
        if disable == Some(AVX2_PASS) {
            // simdutf chooses at run time too: its AVX2 kernel, as on an AVX2 host.
            command.env("SIMDUTF_FORCE_IMPLEMENTATION", "haswell");
        }
        command
            .env("SIMD_BENCH_IMPLEMENTATIONS", &recorded)
            .env("SIMD_BENCH_ROUNDS", rounds.to_string())
            .env("SIMD_BENCH_ROUNDS_OUT", &results)
            .env("SIMD_BENCH_FILTER", options.filter.as_deref().unwrap_or(""));
        if let Some(value) = disable {
            command.env("SIMD_DISABLE", value);
        }
        step(
            &format!(
                "cargo bench --package benches --bench simd, {rounds} interleaved rounds, {}{}",
                build.describe(),
                disable.map_or(String::new(), |value| format!(", SIMD_DISABLE={value}"))
            ),
            command,
        )?;
        rows.extend(interleaved_rows(&results, build)?);
        let text = fs::read_to_string(&recorded).with_context(|| {
            format!(
                "the simd bench wrote no {} (SIMD_BENCH_IMPLEMENTATIONS)",
                recorded.display()
            )
        })?;
        implementations.insert(build, parse_implementations(&text));
    }
    rows.retain(|row| SIMD_GROUPS.contains(&row.group.as_str()));
    if rows.is_empty() {
        bail!(
            "--simd-table: the simd bench ran but measured nothing{}",
            options
                .filter
                .as_ref()
                .map_or(String::new(), |filter| format!(
                    " (does --filter '{filter}' match a benchmark id such as count/simd/16B?)"
                ))
        );
    }
    Ok((rows, implementations))
}

/// The rows of the simd bench's interleaved rounds (`SIMD_BENCH_ROUNDS_OUT`, a JSON
/// object per line), from `build`: each function's ns per call in its fastest round.
fn interleaved_rows(results: &Path, build: Build) -> Result<Vec<Row>> {
    #[derive(serde::Deserialize)]
    struct Line {
        group: String,
        function: String,
        value: String,
        bytes: u64,
        ns: f64,
    }
    let text = fs::read_to_string(results).with_context(|| {
        format!(
            "the simd bench wrote no {} (SIMD_BENCH_ROUNDS_OUT)",
            results.display()
        )
    })?;
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let line: Line = serde_json::from_str(line)
                .with_context(|| format!("{}: {line}", results.display()))?;
            Ok(Row {
                group: line.group,
                function: line.function,
                value: line.value,
                median_ns: line.ns,
                bytes: Some(line.bytes),
                elements: None,
                source: "interleaved",
                build,
            })
        })
        .collect()
}

/// Per build, the (kernel, implementation) pairs the simd bench says it ran.
type Implementations = BTreeMap<Build, Vec<(String, String)>>;

/// What the header of `--simd-table` says about its run.
struct TableHeader {
    /// The CPU's model, architecture and CPU count.
    cpu: String,
    /// Per build, (kernel, implementation) pairs as the bench wrote them.
    implementations: Implementations,
    /// `SIMD_DISABLE`, when set.
    simd_disable: Option<String>,
    date: String,
    commit: String,
    command: String,
    /// Interleaved rounds per group and size.
    rounds: usize,
}

impl TableHeader {
    /// The implementation `kernel` ran in `build`, "?" when the bench did not say.
    fn implementation(&self, build: Build, kernel: &str) -> &str {
        self.implementations
            .get(&build)
            .and_then(|pairs| pairs.iter().find(|(name, _)| name == kernel))
            .map_or("?", |(_, implementation)| implementation)
    }
}

/// The simd bench's `kernel=implementation` lines.
fn parse_implementations(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| line.split_once('='))
        .map(|(kernel, implementation)| {
            (kernel.trim().to_owned(), implementation.trim().to_owned())
        })
        .collect()
}

/// The crate's kernel (as the bench names its implementation) that a simd group
/// measures.
fn kernel_of(group: &str) -> &str {
    match group {
        "base64_encode" | "base64_decode" => "base64",
        other => other,
    }
}

/// The markdown of `--simd-table`: the header, then per build and simd group (in the
/// bench's order) a row per size with ours (the better of our entries), the fastest
/// peer and its figure, and their ratio, all from [`GroupTable`] as in report.md.
fn simd_table(rows: &[Row], header: &TableHeader) -> String {
    let groups = by_group(rows);
    let mut out = String::new();
    let _ = writeln!(out, "- Machine: {}", header.cpu);
    let disabled = header.simd_disable.as_ref().map_or(String::new(), |value| {
        if value == AVX2_PASS {
            format!(
                ", with `SIMD_DISABLE={value}`; the peers on AVX2 too: \
                 `SIMDUTF_FORCE_IMPLEMENTATION=haswell`, and the native build compiled \
                 with `-C target-feature=-avx512f` (`-mno-avx512f`)"
            )
        } else {
            format!(", with `SIMD_DISABLE={value}`")
        }
    });
    let heading = header.simd_disable.as_ref().map_or(String::new(), |value| {
        if value == AVX2_PASS {
            ", AVX2 paths".to_owned()
        } else {
            format!(", with `SIMD_DISABLE={value}`")
        }
    });
    let dispatched: Vec<String> = header
        .implementations
        .iter()
        .map(|(build, pairs)| {
            let pairs: Vec<String> = pairs
                .iter()
                .map(|(kernel, implementation)| format!("{kernel} {implementation}"))
                .collect();
            format!("{}: {}", build.describe(), pairs.join(", "))
        })
        .collect();
    let _ = writeln!(
        out,
        "- Implementations run (the dispatch's choice on this CPU{disabled}): {}",
        dispatched.join("; ")
    );
    let _ = writeln!(
        out,
        "- Run: {}, commit {}, {} interleaved rounds{}",
        header.date,
        header.commit,
        header.rounds,
        if header.rounds == QUICK_ROUNDS {
            " (`--quick`: a rough table)"
        } else {
            ""
        }
    );
    let _ = writeln!(out, "- Command: `{}`", header.command);
    let several: String = SIMD_GROUPS
        .iter()
        .filter_map(|group| group_info(group))
        .filter(|info| info.ours.len() > 1)
        .map(|info| {
            let names: Vec<String> = info.ours.iter().map(|f| format!("`{f}`")).collect();
            format!("; in {} the better of {}", info.id, names.join(" and "))
        })
        .collect();
    let _ = writeln!(
        out,
        "- Figures: per group and size, every function ran a batch of about 200 µs in \
         turn, round after round (the order rotating), the rounds spread over five passes \
         through every group and size, and each keeps its fastest round: \
         GB/s of binary data (the encoder's input, the decoder's output; higher is \
         better). Ours: `simd`{several} (named when it is not `simd`). Best peer: the \
         fastest other crate at that size (memcpy is a limit, not a peer). Ours / best \
         peer above 1.00x: ours is faster."
    );
    for build in [Build::Portable, Build::Native] {
        if !groups.keys().any(|(_, of)| *of == build) {
            continue;
        }
        let title = match build {
            Build::Portable => "Portable build",
            Build::Native => "`-C target-cpu=native` build",
        };
        let _ = write!(out, "\n#### {title}{heading}\n");
        for group in SIMD_GROUPS {
            let Some(group_rows) = groups.get(&(group.to_owned(), build)) else {
                continue;
            };
            let table = GroupTable::new(group, group_rows);
            let several_ours = table.functions.iter().filter(|f| table.is_ours(f)).count() > 1;
            let unit = table.unit();
            let _ = write!(
                out,
                "\n##### {group} ({})\n\n| size | ours ({unit}) | best peer | best peer ({unit}) \
                 | ours / best peer |\n|---|---|---|---|---|\n",
                header.implementation(build, kernel_of(group))
            );
            let mut values: Vec<&str> = group_rows.iter().map(|row| row.value.as_str()).collect();
            values.sort_by_key(|value| value_key(value));
            values.dedup();
            for value in values {
                let at: Vec<&Row> = group_rows.iter().filter(|row| row.value == value).collect();
                let (ours, peer) = table.best(&at);
                let ours = ours.map_or("-".to_owned(), |row| {
                    if several_ours && row.function != "simd" {
                        format!("{:.2} ({})", row.figure(), row.function)
                    } else {
                        format!("{:.2}", row.figure())
                    }
                });
                let (peer, figure) = peer.map_or(("-".to_owned(), "-".to_owned()), |row| {
                    (row.function.clone(), format!("{:.2}", row.figure()))
                });
                let ratio = Some(table.ratio(&at))
                    .filter(|ratio| !ratio.is_empty())
                    .unwrap_or_else(|| "-".to_owned());
                let _ = writeln!(out, "| {value} | {ours} | {peer} | {figure} | {ratio} |");
            }
        }
    }
    out
}

/// `text` with what lies between [`README_START`] and [`README_END`] replaced by
/// `section`; an error names `file` and the markers when they are not there once each,
/// the start first.
fn replace_marked(text: &str, section: &str, file: &Path) -> Result<String> {
    let (starts, ends) = (
        text.matches(README_START).count(),
        text.matches(README_END).count(),
    );
    let start = text.find(README_START).map(|at| at + README_START.len());
    let end = text.find(README_END);
    let (Some(start), Some(end), 1, 1) = (start, end, starts, ends) else {
        bail!(
            "{}: expected the marker lines `{README_START}` and `{README_END}` once each \
             (found {starts} and {ends}) around the place the table goes; add them",
            file.display()
        );
    };
    if end < start {
        bail!(
            "{}: `{README_END}` comes before `{README_START}`",
            file.display()
        );
    }
    Ok(format!(
        "{}\n{}\n{}",
        &text[..start],
        section.trim(),
        &text[end..]
    ))
}

/// The CPU's model name (lscpu's, which names Arm cores too; else /proc/cpuinfo's),
/// architecture and CPU count.
fn cpu_model() -> String {
    let field = |text: &str, name: &str| {
        text.lines()
            .find_map(|line| {
                let (key, value) = line.split_once(':')?;
                (key.trim() == name).then(|| value.trim().to_owned())
            })
            .filter(|value| !value.is_empty())
    };
    let lscpu = Command::new("lscpu")
        .env("LC_ALL", "C")
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).into_owned())
        .unwrap_or_default();
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = field(&lscpu, "Model name")
        .or_else(|| field(&cpuinfo, "model name"))
        .or_else(|| field(&cpuinfo, "CPU part").map(|part| format!("CPU part {part}")))
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    format!("{model} ({}, {cpus} CPUs)", std::env::consts::ARCH)
}

/// The commit checked out (and whether tracked files differ from it), else CI's
/// GITHUB_SHA. Read-only git commands: nothing here writes the index.
fn commit() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .current_dir(project_root())
            .args(args)
            .output()
            .ok()
    };
    let head = git(&["rev-parse", "--short=12", "HEAD"])
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned())
        .filter(|head| !head.is_empty());
    match head {
        Some(head) => {
            let changed = git(&["diff", "--quiet", "HEAD", "--"])
                .is_some_and(|output| output.status.code() == Some(1));
            if changed {
                format!("{head} (with uncommitted changes)")
            } else {
                head
            }
        }
        None => std::env::var("GITHUB_SHA")
            .map(|sha| sha.chars().take(12).collect())
            .unwrap_or_else(|_| "unknown".to_owned()),
    }
}

/// This invocation as a shell command line: `SIMD_DISABLE=...` when set, then
/// `cargo xtask` and the arguments.
fn command_line() -> String {
    let word = |word: &str| {
        if !word.is_empty()
            && word
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_=./,:+@%".contains(c))
        {
            word.to_owned()
        } else {
            format!("'{}'", word.replace('\'', r"'\''"))
        }
    };
    let mut words = Vec::new();
    if let Some(disable) = std::env::var("SIMD_DISABLE")
        .ok()
        .filter(|value| !value.trim().is_empty())
    {
        words.push(format!("SIMD_DISABLE={}", word(&disable)));
    }
    words.push("cargo xtask".to_owned());
    words.extend(std::env::args().skip(1).map(|arg| word(&arg)));
    words.join(" ")
}

/// The group's chart: throughput against input size where the group sweeps sizes,
/// else bars at its largest parameter.
fn svg_chart(group: &str, build: Build, rows: &[Row]) -> String {
    let sizes: Vec<u64> = {
        let mut sizes: Vec<u64> = rows.iter().filter_map(|row| row.bytes).collect();
        sizes.sort_unstable();
        sizes.dedup();
        sizes
    };
    let title = format!("{group}, {}", build.describe().replace('`', ""));
    if sizes.len() >= 3 && rows.iter().all(|row| row.bytes.is_some()) {
        size_chart(&title, &GroupTable::new(group, rows), &sizes)
    } else {
        bar_chart(&title, rows)
    }
}

/// Ours bold, peers thin in the palette's colours, limits dashed grey.
fn stroke_of<'a>(table: &GroupTable<'_>, function: &str, peer_index: usize) -> Stroke<'a> {
    if table.is_ours(function) {
        Stroke {
            colour: "#c00000",
            width: 3.5,
            dashed: false,
        }
    } else if table.is_limit(function) {
        Stroke {
            colour: "#707070",
            width: 1.5,
            dashed: true,
        }
    } else {
        // The palette without its red, which is ours.
        let colours: Vec<&str> = PALETTE
            .iter()
            .copied()
            .filter(|c| *c != "#e15759")
            .collect();
        Stroke {
            colour: colours[peer_index % colours.len()],
            width: 1.5,
            dashed: false,
        }
    }
}

/// GB/s against input size, both axes logarithmic: a line per function.
fn size_chart(title: &str, table: &GroupTable<'_>, sizes: &[u64]) -> String {
    let (width, height) = (820.0, 440.0);
    let (left, right, top, bottom) = (64.0, 190.0, 40.0, 48.0);
    let figures: Vec<f64> = table
        .rows
        .iter()
        .map(Row::figure)
        .filter(|f| *f > 0.0)
        .collect();
    let low = figures
        .iter()
        .copied()
        .fold(f64::MAX, f64::min)
        .log10()
        .floor();
    let high = figures
        .iter()
        .copied()
        .fold(f64::MIN_POSITIVE, f64::max)
        .log10()
        .ceil();
    let high = if high > low { high } else { low + 1.0 };
    let (first, last) = (
        (sizes[0] as f64).log2(),
        (sizes[sizes.len() - 1] as f64).log2(),
    );
    let x = |bytes: f64| left + (bytes.log2() - first) / (last - first) * (width - left - right);
    let y = |gbs: f64| top + (high - gbs.log10()) / (high - low) * (height - top - bottom);
    let mut svg = Svg::new(width, height, &format!("{title}: GB/s by input size"));
    for decade in low as i32..=high as i32 {
        let value = 10f64.powi(decade);
        svg.line(
            (left, y(value)),
            (width - right, y(value)),
            "#dddddd",
            false,
        );
        svg.text(left - 6.0, y(value) + 4.0, Anchor::End, &format!("{value}"));
    }
    for &size in sizes {
        let at = x(size as f64);
        svg.line((at, top), (at, height - bottom), "#eeeeee", false);
        svg.text(
            at,
            height - bottom + 16.0,
            Anchor::Middle,
            &size_label(size),
        );
    }
    svg.axes(
        (left, top),
        (width - right, height - bottom),
        "input size (log)",
        "GB/s (log)",
    );
    let mut legend = Vec::new();
    let mut peers = 0;
    // Limits and peers first, ours last so that it is drawn on top.
    for function in table.functions.iter().rev() {
        let stroke = stroke_of(table, function, peers);
        if !table.is_ours(function) && !table.is_limit(function) {
            peers += 1;
        }
        let mut points: Vec<(u64, f64)> = table
            .rows
            .iter()
            .filter(|row| &row.function == function)
            .filter_map(|row| Some((row.bytes?, row.figure())))
            .filter(|(_, figure)| *figure > 0.0)
            .collect();
        points.sort_by_key(|(bytes, _)| *bytes);
        let line: Vec<(f64, f64)> = points
            .iter()
            .map(|&(bytes, figure)| (x(bytes as f64), y(figure)))
            .collect();
        svg.stroked_polyline(&line, stroke, function);
        legend.push((function.as_str(), stroke));
    }
    legend.reverse();
    svg.line_legend(width - right + 14.0, top, &legend);
    svg.finish()
}

/// "16 B", "4 KiB", "1 MiB".
fn size_label(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// A horizontal bar chart of each function at the group's largest parameter.
fn bar_chart(title: &str, rows: &[Row]) -> String {
    let largest = rows
        .iter()
        .map(|row| value_key(&row.value))
        .max()
        .map(|(_, value)| value)
        .unwrap_or_default();
    let mut bars: Vec<&Row> = rows.iter().filter(|row| row.value == largest).collect();
    bars.sort_by(|a, b| a.function.cmp(&b.function));
    let unit = if rows[0].higher_is_better() {
        "GB/s"
    } else {
        "ns/op"
    };
    let top = bars
        .iter()
        .map(|row| row.figure())
        .fold(0.0_f64, f64::max)
        .max(f64::MIN_POSITIVE);
    let (label_width, bar_width, row_height) = (260.0, 420.0, 24.0);
    let mut svg = Svg::new(
        label_width + bar_width + 90.0,
        50.0 + row_height * bars.len() as f64,
        &format!("{title} at {largest} ({unit})"),
    );
    for (i, row) in bars.iter().enumerate() {
        let y = 36.0 + row_height * i as f64;
        let width = bar_width * row.figure() / top;
        svg.text(8.0, y + 12.0, Anchor::Start, &row.function);
        svg.rect(label_width, y, width, 16.0, "#4878a8", &row.function);
        svg.text(
            label_width + width + 6.0,
            y + 12.0,
            Anchor::Start,
            &format!("{:.2}", row.figure()),
        );
    }
    svg.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(group: &str, function: &str, value: &str, median_ns: f64, bytes: Option<u64>) -> Row {
        Row {
            group: group.to_owned(),
            function: function.to_owned(),
            value: value.to_owned(),
            median_ns,
            bytes,
            elements: bytes.is_none().then_some(1),
            source: "test",
            build: Build::Portable,
        }
    }

    #[test]
    fn sizes_sort_by_their_byte_counts() {
        let mut values = vec!["1MiB", "16B", "64KiB", "1KiB", "64B"];
        values.sort_by_key(|value| value_key(value));
        assert_eq!(values, ["16B", "64B", "1KiB", "64KiB", "1MiB"]);
    }

    #[test]
    fn the_ratio_compares_ours_with_the_best_peer_not_the_limit() {
        let rows = [
            // 1 KiB: ours 2 GB/s (500 ns), peers 1 and 0.5 GB/s, memcpy 10 GB/s.
            row("count", "simd", "1KiB", 512.0, Some(1024)),
            row("count", "bytecount", "1KiB", 1024.0, Some(1024)),
            row("count", "naive", "1KiB", 2048.0, Some(1024)),
            row("count", "memcpy", "1KiB", 102.4, Some(1024)),
            row("count", "simd", "16B", 16.0, Some(16)),
            row("count", "bytecount", "16B", 8.0, Some(16)),
            // ns/op groups: lower is better, so the ratio is peer / ours.
            row("maps/read90", "ShardedMap", "1t", 40.0, None),
            row("maps/read90", "dashmap", "1t", 20.0, None),
            row("maps/read90", "ShardedMap", "2t", 50.0, None),
            row("maps/read90", "dashmap", "2t", 75.0, None),
            // One parameter value: a column with each function's role.
            row("false_sharing", "padded", "", 5.0, None),
            row("false_sharing", "alone", "", 4.0, None),
        ];
        let report = report(&rows);
        // Columns: ours, then peers by name, then limits.
        assert!(
            report.contains("| 16B | 1.00 | 2.00 |  |  | 0.50x |"),
            "{report}"
        );
        assert!(
            report.contains("| 1KiB | 2.00 | 1.00 | 0.50 | 10.00 | 2.00x |"),
            "{report}"
        );
        assert!(
            report.contains("| 1t | 40.00 | 20.00 | 0.50x |"),
            "{report}"
        );
        assert!(
            report.contains("| 2t | 50.00 | 75.00 | 1.50x |"),
            "{report}"
        );
        assert!(report.contains("| padded | 5.00 | ours |"), "{report}");
        assert!(report.contains("| alone | 4.00 | limit |"), "{report}");
    }

    fn header() -> TableHeader {
        TableHeader {
            cpu: "Test CPU (x86_64, 2 CPUs)".to_owned(),
            implementations: BTreeMap::from([
                (
                    Build::Portable,
                    parse_implementations("base64=avx2\ncount=avx2\nhash=aes-ni+vaes\n"),
                ),
                (
                    Build::Native,
                    parse_implementations("count=avx512bw\nhash=aes (compiled in)\n"),
                ),
            ]),
            simd_disable: Some("avx512bw".to_owned()),
            date: "2025-01-02 03:04 UTC".to_owned(),
            commit: "0123456789ab".to_owned(),
            command: "SIMD_DISABLE=avx512bw cargo xtask bench --simd-table".to_owned(),
            rounds: QUICK_ROUNDS,
        }
    }

    #[test]
    fn the_simd_table_has_a_row_per_size_with_ours_the_best_peer_and_the_ratio() {
        let mut rows = Vec::new();
        for (build, ours_ns) in [(Build::Portable, 100.0), (Build::Native, 25.0)] {
            for (size, value) in [(16, "16B"), (1 << 20, "1MiB"), (1024, "1KiB")] {
                let scale = size as f64 / 16.0;
                for (group, function, ns) in [
                    ("count", "simd", ours_ns),
                    ("count", "bytecount", 50.0),
                    ("count", "naive", 400.0),
                    // memcpy is faster than everything, but a limit, not a peer.
                    ("count", "memcpy", 1.0),
                    ("hash", "simd", 40.0),
                    ("hash", "simd-map", 20.0),
                    ("hash", "foldhash", 32.0),
                    ("hash", "foldhash-map", 80.0),
                    // Not a simd group: left out.
                    ("maps/read90", "ShardedMap", 1.0),
                ] {
                    let mut row = row(group, function, value, ns * scale, Some(size));
                    row.build = build;
                    rows.push(row);
                }
            }
        }
        let table = simd_table(&rows, &header());
        assert!(
            table.contains("- Machine: Test CPU (x86_64, 2 CPUs)"),
            "{table}"
        );
        assert!(
            table.contains(
                "(the dispatch's choice on this CPU, with `SIMD_DISABLE=avx512bw`; the peers \
                 on AVX2 too: `SIMDUTF_FORCE_IMPLEMENTATION=haswell`, and the native build \
                 compiled with `-C target-feature=-avx512f` (`-mno-avx512f`)): portable build: base64 avx2, count avx2, hash aes-ni+vaes; \
                 `-C target-cpu=native` build: count avx512bw, hash aes (compiled in)"
            ),
            "{table}"
        );
        assert!(
            table.contains(
                "- Run: 2025-01-02 03:04 UTC, commit 0123456789ab, 20 interleaved rounds \
                 (`--quick`"
            ),
            "{table}"
        );
        assert!(
            table.contains("- Command: `SIMD_DISABLE=avx512bw cargo xtask bench --simd-table`"),
            "{table}"
        );
        assert!(table.contains("in hash the better of `simd` and `simd-map`"));
        assert!(!table.contains("maps"), "{table}");
        // Builds in order, each with its groups in the bench's order, sizes by bytes.
        let headings: Vec<&str> = table.lines().filter(|l| l.starts_with("####")).collect();
        assert_eq!(
            headings,
            [
                "#### Portable build, AVX2 paths",
                "##### hash (aes-ni+vaes)",
                "##### count (avx2)",
                "#### `-C target-cpu=native` build, AVX2 paths",
                "##### hash (aes (compiled in))",
                "##### count (avx512bw)",
            ],
            "{table}"
        );
        let sizes: Vec<&str> = table
            .lines()
            .filter_map(|l| l.strip_prefix("| ")?.split(' ').next())
            .filter(|size| size.ends_with('B'))
            .collect();
        assert_eq!(sizes, ["16B", "1KiB", "1MiB"].repeat(4), "{table}");
        assert!(
            table.contains(
                "| size | ours (GB/s) | best peer | best peer (GB/s) | ours / best peer |"
            ),
            "{table}"
        );
        // Portable count: ours 100 ns per 16 B against bytecount's 50 (not memcpy's 1).
        assert!(
            table.contains("| 16B | 0.16 | bytecount | 0.32 | 0.50x |"),
            "{table}"
        );
        // Native count: ours 25 ns, twice bytecount's speed.
        assert!(
            table.contains("| 1MiB | 0.64 | bytecount | 0.32 | 2.00x |"),
            "{table}"
        );
        // Hash: simd-map is our better entry and named; foldhash the best peer.
        assert!(
            table.contains("| 1KiB | 0.80 (simd-map) | foldhash | 0.50 | 1.60x |"),
            "{table}"
        );
    }

    #[test]
    fn the_interleaved_rounds_become_rows_and_a_bad_line_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rounds.jsonl");
        fs::write(
            &file,
            "{\"group\":\"count\",\"function\":\"simd\",\"value\":\"1KiB\",\
             \"bytes\":1024,\"ns\":12.8,\"rounds\":200}\n\n\
             {\"group\":\"hash\",\"function\":\"gxhash\",\"value\":\"16B\",\
             \"bytes\":16,\"ns\":2.0,\"rounds\":200}\n",
        )
        .unwrap();
        let rows = interleaved_rows(&file, Build::Native).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (
                rows[0].group.as_str(),
                rows[0].function.as_str(),
                rows[0].value.as_str()
            ),
            ("count", "simd", "1KiB")
        );
        assert_eq!(rows[0].build, Build::Native);
        // 1024 bytes in 12.8 ns: 80 GB/s.
        assert!((rows[0].figure() - 80.0).abs() < 1e-9);
        assert!((rows[1].figure() - 8.0).abs() < 1e-9);

        fs::write(&file, "{\"group\":\"count\"}\n").unwrap();
        let error = format!(
            "{:#}",
            interleaved_rows(&file, Build::Portable).unwrap_err()
        );
        assert!(
            error.contains("rounds.jsonl") && error.contains("group"),
            "{error}"
        );
        let missing = dir.path().join("absent.jsonl");
        let error = format!(
            "{:#}",
            interleaved_rows(&missing, Build::Portable).unwrap_err()
        );
        assert!(error.contains("SIMD_BENCH_ROUNDS_OUT"), "{error}");
    }

    #[test]
    fn the_table_goes_between_the_readme_markers() {
        let file = Path::new("crates/simd/README.md");
        let readme = format!(
            "## Benchmarks\n\n### Latest table (generated)\n\n{README_START}\nold table\n\
             {README_END}\n\n### Portable build\n\nhand-written\n"
        );
        let once = replace_marked(&readme, "new table\n| a | b |\n", file).unwrap();
        assert_eq!(
            once,
            format!(
                "## Benchmarks\n\n### Latest table (generated)\n\n{README_START}\nnew table\n\
                 | a | b |\n{README_END}\n\n### Portable build\n\nhand-written\n"
            )
        );
        // Writing again replaces the table rather than adding to it.
        let twice = replace_marked(&once, "new table\n| a | b |", file).unwrap();
        assert_eq!(twice, once);

        for broken in [
            "## Benchmarks\n\nno markers\n".to_owned(),
            format!("{README_START}\nno end\n"),
            format!("{README_END}\nreversed\n{README_START}\n"),
            format!("{README_START}\n{README_END}\n{README_START}\n{README_END}\n"),
        ] {
            let error = replace_marked(&broken, "table", file)
                .unwrap_err()
                .to_string();
            assert!(error.starts_with("crates/simd/README.md: "), "{error}");
            assert!(
                error.contains(README_START) && error.contains(README_END),
                "{error}"
            );
        }
    }

    #[test]
    fn groups_built_twice_get_a_table_and_a_size_chart_per_build() {
        let mut rows = Vec::new();
        for (build, ours_ns) in [(Build::Portable, 100.0), (Build::Native, 50.0)] {
            for (size, value) in [(16, "16B"), (1024, "1KiB"), (1 << 20, "1MiB")] {
                let scale = size as f64 / 16.0;
                for (function, ns) in [("simd", ours_ns), ("adler2", 80.0), ("memcpy", 10.0)] {
                    let mut row = row("adler32", function, value, ns * scale, Some(size));
                    row.build = build;
                    rows.push(row);
                }
            }
        }
        let report = report(&rows);
        assert!(
            report.contains("## adler32 (GB/s) — seed 003: adler32, portable build"),
            "{report}"
        );
        assert!(
            report.contains("## adler32 (GB/s) — seed 003: adler32, `-C target-cpu=native` build"),
            "{report}"
        );
        // Portable: ours 100 ns against 80 ns; native: 50 against 80.
        assert!(
            report.contains("| 1KiB | 0.16 | 0.20 | 1.60 | 0.80x |"),
            "{report}"
        );
        assert!(
            report.contains("| 1KiB | 0.32 | 0.20 | 1.60 | 1.60x |"),
            "{report}"
        );

        let groups = by_group(&rows);
        let native = &groups[&("adler32".to_owned(), Build::Native)];
        let chart = svg_chart("adler32", Build::Native, native);
        assert!(chart.contains("GB/s by input size"), "{chart}");
        let lines: Vec<&str> = chart
            .lines()
            .filter(|l| l.starts_with("<polyline"))
            .collect();
        assert_eq!(lines.len(), 3, "{chart}");
        // Ours is drawn last (on top) and bold; memcpy dashed.
        assert!(lines[2].contains("stroke-width=\"3.5\"") && lines[2].contains("<title>simd<"));
        assert!(lines[0].contains("stroke-dasharray") && lines[0].contains("<title>memcpy<"));
        for label in ["16 B", "1 KiB", "1 MiB"] {
            assert!(
                chart.contains(&format!(">{label}</text>")),
                "{label}: {chart}"
            );
        }
    }
}
