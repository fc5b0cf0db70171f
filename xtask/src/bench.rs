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

    /// Ours over the best peer among rows `at` one parameter value, as "1.23x" (above
    /// 1: ours is faster); empty without both.
    fn ratio(&self, at: &[&Row]) -> String {
        let higher = at.first().is_some_and(|row| row.higher_is_better());
        let best = |pick: &dyn Fn(&str) -> bool| {
            at.iter()
                .filter(|row| pick(&row.function))
                .map(|row| row.figure())
                .reduce(|a, b| if higher { a.max(b) } else { a.min(b) })
        };
        let ours = best(&|f| self.is_ours(f));
        let peer = best(&|f| !self.is_ours(f) && !self.is_limit(f));
        match (ours, peer) {
            (Some(ours), Some(peer)) if higher => format!("{:.2}x", ours / peer),
            (Some(ours), Some(peer)) => format!("{:.2}x", peer / ours),
            _ => String::new(),
        }
    }
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
