//! numastat's reports, as Debian's numastat (numactl 2.0.16) prints them: the legacy
//! counter table without options, `-n` (counters in MB), `-m` (per-node meminfo), `-p`
//! (process memory per node, by PID or by a pattern of name and command line), with
//! `-c` (compact columns), `-s[NODE]` (sort), `-v` (one table per process) and `-z`
//! (skip zero rows and columns).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::vtab::{Cell, Justify, VTable};
use crate::c_number::atoi;
use crate::numa_maps::{self, MemoryKind};
use crate::pages;

/// What numastat was asked for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// `-c`: columns as narrow as their contents.
    pub compress: bool,
    /// `-m`: per-node meminfo.
    pub meminfo: bool,
    /// `-n`: the per-node counters in MB.
    pub numastat: bool,
    /// `-p` and the operands: PIDs (all digits) or patterns matched against each
    /// process's name and command line, in the order given.
    pub processes: Vec<String>,
    /// `-s[NODE]`: sort rows by the Total column, or by a node's.
    pub sort: Option<Option<u32>>,
    /// `-v`: a table per process even for several.
    pub verbose: bool,
    /// `-z`: hide rows and columns that are all zero.
    pub skip_zero: bool,
    /// No options and no operands at all: the old numastat's table, byte for byte.
    pub legacy: bool,
    /// Columns before folding: `NUMASTAT_WIDTH`, 80 on a terminal, else unlimited.
    pub screen_width: usize,
}

/// numastat's screen width: `NUMASTAT_WIDTH` (1 to 10,000,000), else 80 on a terminal
/// (numastat asks xterm's `resize`, but reads too little of its answer to use it), else
/// no limit; never below 32.
pub fn screen_width(env: Option<&str>, stdout_is_terminal: bool) -> usize {
    let width = match env {
        Some(text) => match atoi(text) {
            w @ 1..=10_000_000 => w as usize,
            _ => 80,
        },
        None if stdout_is_terminal => 80,
        None => 10_000_000,
    };
    width.max(32)
}

/// numastat's `-s[NODE]` argument: a node only when NODE is all digits; `-s` alone or
/// anything else sorts by the Total column (None).
pub fn sort_node(text: &str) -> Option<u32> {
    (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| text.parse().unwrap_or(u32::MAX))
}

/// What makes numastat give up.
#[derive(Debug, thiserror::Error)]
pub enum NumastatError {
    /// No `nodeN` directory (no sysfs, or a kernel without NUMA).
    #[error(
        "cannot list NUMA nodes in {path}: {source} (sysfs not mounted or system not NUMA aware)"
    )]
    Nodes {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A node's file could not be read.
    #[error("cannot open {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A `numa_maps` line with a node count numastat cannot parse.
    #[error("{path}: node value parse error in {word:?}")]
    NumaMaps {
        /// The file.
        path: PathBuf,
        /// The word.
        word: String,
    },
}

/// A numastat run's output: the report, and what numastat writes to stderr.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Output {
    /// Standard output.
    pub text: String,
    /// Standard error (unreadable processes).
    pub warnings: String,
}

/// The counters of `nodeN/numastat`, as numastat labels them.
const NUMASTAT_ROWS: [(&str, &str); 6] = [
    ("numa_hit", "Numa_Hit"),
    ("numa_miss", "Numa_Miss"),
    ("numa_foreign", "Numa_Foreign"),
    ("interleave_hit", "Interleave_Hit"),
    ("local_node", "Local_Node"),
    ("other_node", "Other_Node"),
];

/// The `nodeN/meminfo` fields numastat knows (it names any other it meets).
const MEMINFO_ROWS: [&str; 36] = [
    "MemTotal",
    "MemFree",
    "MemUsed",
    "HighTotal",
    "HighFree",
    "LowTotal",
    "LowFree",
    "Active",
    "Inactive",
    "Active(anon)",
    "Inactive(anon)",
    "Active(file)",
    "Inactive(file)",
    "Unevictable",
    "Mlocked",
    "Dirty",
    "Writeback",
    "FilePages",
    "Mapped",
    "AnonPages",
    "Shmem",
    "KernelStack",
    "PageTables",
    "NFS_Unstable",
    "Bounce",
    "WritebackTmp",
    "Slab",
    "SReclaimable",
    "SUnreclaim",
    "AnonHugePages",
    "ShmemHugePages",
    "ShmemPmdMapped",
    "HugePages_Total",
    "HugePages_Free",
    "HugePages_Surp",
    "KReclaimable",
];

const MEGABYTE: f64 = 1024.0 * 1024.0;

/// The machine as numastat reads it, under `root` (`/` normally).
struct Machine<'a> {
    root: &'a Path,
    /// Node numbers, ascending.
    nodes: Vec<u32>,
    page_size: f64,
    huge_page_size: f64,
}

impl<'a> Machine<'a> {
    fn read(root: &'a Path) -> Result<Machine<'a>, NumastatError> {
        let dir = root.join("sys/devices/system/node");
        let entries = fs::read_dir(&dir).map_err(|source| NumastatError::Nodes {
            path: dir.clone(),
            source,
        })?;
        let mut nodes: Vec<u32> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let digits = name.strip_prefix("node")?;
                (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| digits.parse().ok())?
            })
            .collect();
        if nodes.is_empty() {
            return Err(NumastatError::Nodes {
                path: dir,
                source: io::Error::from(io::ErrorKind::NotFound),
            });
        }
        nodes.sort_unstable();
        // numastat counts huge pages as 0 bytes where it finds no huge page size.
        let page_size = pages::page_size() as f64;
        let huge_page_size = pages::huge_page_size(root).unwrap_or(0) as f64;
        Ok(Machine {
            root,
            nodes,
            page_size,
            huge_page_size,
        })
    }

    fn node_file(&self, node: u32, file: &str) -> PathBuf {
        self.root
            .join(format!("sys/devices/system/node/node{node}/{file}"))
    }

    /// Column headers: `Node N` (`nodeN` in the legacy table), then Total.
    fn header(&self, column: usize, legacy: bool) -> String {
        match self.nodes.get(column) {
            Some(node) if legacy => format!("node{node}"),
            Some(node) => format!("Node {node}"),
            None => "Total".into(),
        }
    }

    /// The column numastat sorts by for `-s[NODE]`. numastat reads NODE as an index
    /// into the node list but then uses the node *number* at that index as a column
    /// offset; on machines with nodes 0..N the two agree. An offset past the table
    /// falls back to the Total column here (numastat would read past its table).
    fn sort_column(&self, node: Option<u32>, header_cols: usize) -> usize {
        let total = header_cols + self.nodes.len();
        match node.and_then(|n| self.nodes.get(n as usize)) {
            Some(&number) => (header_cols + number as usize).min(total),
            None => total,
        }
    }
}

/// Runs numastat with `options` on the machine under `root`; `self_pid` is left out of
/// pattern matches, as numastat leaves itself out.
pub fn run(root: &Path, options: &Options, self_pid: u32) -> Result<Output, NumastatError> {
    let mut output = Output::default();
    let pids = resolve_processes(root, &options.processes, self_pid, &mut output.text);
    let machine = Machine::read(root)?;
    if options.legacy {
        system_table(&machine, options, SystemFile::Numastat, &mut output.text)?;
        return Ok(output);
    }
    if !pids.is_empty() {
        process_tables(&machine, options, &pids, &mut output)?;
    }
    if options.meminfo {
        output
            .text
            .push_str("\nPer-node system memory usage (in MBs):\n");
        system_table(&machine, options, SystemFile::Meminfo, &mut output.text)?;
    }
    if options.numastat || (pids.is_empty() && !options.meminfo) {
        output.text.push_str("\nPer-node numastat info (in MBs):\n");
        system_table(&machine, options, SystemFile::Numastat, &mut output.text)?;
    }
    Ok(output)
}

/// PIDs (all digits) as given and patterns matched against `Name` and the command
/// line of every process, sorted and without duplicates.
fn resolve_processes(root: &Path, specs: &[String], self_pid: u32, text: &mut String) -> Vec<u32> {
    let mut pids = Vec::new();
    for spec in specs {
        if spec.bytes().all(|b| b.is_ascii_digit()) {
            pids.push(atoi(spec).clamp(0, i64::from(u32::MAX)) as u32);
            continue;
        }
        let before = pids.len();
        for pid in all_pids(root) {
            let mut haystack = command_name(root, pid).unwrap_or_default();
            if let Ok(cmdline) = fs::read(root.join(format!("proc/{pid}/cmdline"))) {
                haystack.push(' ');
                haystack.push_str(&String::from_utf8_lossy(&cmdline).replace('\0', " "));
            }
            if haystack.contains(spec.as_str()) && pid != self_pid {
                pids.push(pid);
            }
        }
        if pids.len() == before {
            text.push_str(&format!(
                "Found no processes containing pattern: \"{spec}\"\n"
            ));
        }
    }
    pids.sort_unstable();
    pids.dedup();
    pids
}

fn all_pids(root: &Path) -> Vec<u32> {
    fs::read_dir(root.join("proc"))
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|name| name.starts_with(|c: char| c.is_ascii_digit()))
                .map(|name| atoi(&name) as u32)
                .collect()
        })
        .unwrap_or_default()
}

/// The `Name:` of `/proc/PID/status`.
fn command_name(root: &Path, pid: u32) -> Option<String> {
    let status = fs::read_to_string(root.join(format!("proc/{pid}/status"))).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Name:"))
        .map(|name| name.trim_start().to_string())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum SystemFile {
    Numastat,
    Meminfo,
}

fn system_table(
    machine: &Machine,
    options: &Options,
    file: SystemFile,
    text: &mut String,
) -> Result<(), NumastatError> {
    let legacy = options.legacy;
    let (rows, file_name, name_word): (Vec<(&str, &str)>, &str, usize) = match file {
        SystemFile::Numastat => (NUMASTAT_ROWS.to_vec(), "numastat", 0),
        SystemFile::Meminfo => (
            MEMINFO_ROWS.iter().map(|n| (*n, *n)).collect(),
            "meminfo",
            2,
        ),
    };
    let header_rows = if legacy { 1 } else { 2 };
    let header_cols = 1;
    let node_count = machine.nodes.len();
    let mut table = VTable::new(header_rows, header_cols, rows.len(), node_count + 1);
    let total_col = header_cols + node_count;
    for (row, (token, label)) in rows.iter().enumerate() {
        let name = if legacy { token } else { label };
        table.set(header_rows + row, 0, Cell::Text(name.to_string()));
    }
    table.set_width(0, 16);
    table.set_justify(0, Justify::Left);
    let columns = if legacy { node_count } else { node_count + 1 };
    let source = NodeFile {
        name: file_name,
        name_word,
        legacy,
    };
    for column in 0..columns {
        let col = header_cols + column;
        table.set(0, col, Cell::Text(machine.header(column, legacy)));
        if !legacy {
            table.set(1, col, Cell::Rule('-'));
            table.set_decimal_places(col, if options.compress { 0 } else { 2 });
        }
        table.set_width(col, 16);
        table.set_justify(col, Justify::Right);
        let Some(&node) = machine.nodes.get(column) else {
            break;
        };
        for (row, value) in source.values(machine, node, &rows, text)? {
            table.set(header_rows + row, col, Cell::Number(value));
            table.add(header_rows + row, total_col, value);
        }
    }
    if options.compress {
        for col in 0..=total_col {
            table.fit_width(col, 4, 16);
        }
    }
    if let Some(node) = options.sort {
        let col = machine.sort_column(node, header_cols);
        table.sort_descending(header_rows, header_rows + rows.len() - 1, col);
    }
    let show_zero = !options.skip_zero;
    table.display(text, options.screen_width, show_zero, show_zero);
    Ok(())
}

/// A per-node file of the system tables (`numastat` or `meminfo`) and how to read it.
struct NodeFile<'a> {
    name: &'a str,
    /// Which word of a line is the row's name (its value follows it).
    name_word: usize,
    /// Raw counts (the legacy table), else megabytes.
    legacy: bool,
}

impl NodeFile<'_> {
    /// The (row, value) pairs of `node`'s file: rows as `rows` numbers them (by token),
    /// values in MB unless legacy (numastat.c's multipliers: pages, huge pages, kB).
    /// A token not in `rows` adds numastat's "not in hash table" line to `text`.
    fn values(
        &self,
        machine: &Machine,
        node: u32,
        rows: &[(&str, &str)],
        text: &mut String,
    ) -> Result<Vec<(usize, f64)>, NumastatError> {
        let path = machine.node_file(node, self.name);
        let contents =
            fs::read_to_string(&path).map_err(|source| NumastatError::Read { path, source })?;
        let mut values = Vec::new();
        for line in contents.lines() {
            let words: Vec<&str> = line
                .split([' ', '\t', '\r', ':'])
                .filter(|w| !w.is_empty())
                .collect();
            let Some(name) = words.get(self.name_word) else {
                continue;
            };
            let Some(row) = rows.iter().position(|(token, _)| token == name) else {
                text.push_str(&format!("Token {name} not in hash table.\n"));
                continue;
            };
            let mut value = words.get(self.name_word + 1).map_or(0, |w| atoi(w)) as f64;
            if !self.legacy {
                let multiplier = if words.len() < 4 {
                    machine.page_size
                } else if words[2].starts_with("HugePages") {
                    machine.huge_page_size
                } else if words.get(4).is_some_and(|w| w.starts_with("kB")) {
                    1024.0
                } else {
                    1.0
                };
                value = value * multiplier / MEGABYTE;
            }
            values.push((row, value));
        }
        Ok(values)
    }
}

/// The empty process table: category rows (one process) or PID rows (several), a
/// rule and a Total row; `Node N` columns and a Total column.
fn process_table(
    machine: &Machine,
    options: &Options,
    per_process: bool,
    data_rows: usize,
) -> VTable {
    let (header_rows, header_cols) = (2, 1);
    let node_count = machine.nodes.len();
    // Two extra rows: a rule and the Total row.
    let mut table = VTable::new(header_rows, header_cols, data_rows + 2, node_count + 1);
    let total_row = header_rows + data_rows + 1;
    table.set(total_row, 0, Cell::Text("Total".into()));
    if per_process {
        for kind in MemoryKind::ALL {
            let row = header_rows + kind.index();
            table.set(row, 0, Cell::Text(kind.label().to_string()));
        }
    } else {
        table.set(0, 0, Cell::Text("PID".into()));
        table.set(1, 0, Cell::Rule('-'));
    }
    table.set_width(0, 16);
    table.set_justify(0, Justify::Left);
    for column in 0..=node_count {
        let col = header_cols + column;
        table.set(0, col, Cell::Text(machine.header(column, false)));
        table.set(1, col, Cell::Rule('-'));
        table.set_width(col, 16);
        table.set_decimal_places(col, if options.compress { 0 } else { 2 });
        table.set_justify(col, Justify::Right);
    }
    table
}

fn process_tables(
    machine: &Machine,
    options: &Options,
    pids: &[u32],
    output: &mut Output,
) -> Result<(), NumastatError> {
    let per_process = options.verbose || pids.len() == 1;
    let layout = ProcessLayout::new(
        machine,
        per_process,
        if per_process {
            MemoryKind::ALL.len()
        } else {
            pids.len()
        },
    );
    if !per_process {
        output
            .text
            .push_str("\nPer-node process memory usage (in MBs)\n");
    }
    let mut table = process_table(machine, options, per_process, layout.data_rows);
    table.zero_data();
    for (index, &pid) in pids.iter().enumerate() {
        let name = command_name(machine.root, pid).unwrap_or_else(|| "(null)".into());
        if per_process {
            output.text.push_str(&format!(
                "\nPer-node process memory usage (in MBs) for PID {pid} ({name})\n"
            ));
            if index > 0 {
                table.zero_data();
            }
        } else {
            table.set(
                layout.header_rows + index,
                0,
                Cell::Text(format!("{pid} ({name})")),
            );
        }
        let path = machine.root.join(format!("proc/{pid}/numa_maps"));
        match fs::read_to_string(&path) {
            Ok(maps) => {
                let counts = numa_maps_counts(&maps, &path)?;
                layout.add_pages(&mut table, machine, &counts, index);
            }
            Err(error) => {
                output.warnings.push_str(&format!(
                    "Can't read /proc/{pid}/numa_maps: {}\n",
                    describe(&error)
                ));
                continue;
            }
        }
        if per_process || index + 1 == pids.len() {
            layout.show(&mut table, machine, options, &mut output.text);
        }
    }
    Ok(())
}

/// Where things go in a process table: a header row, a rule, the data rows (one per
/// category for one process, one per process for several), a rule and a Total row;
/// the label column, a column per node and a Total column.
struct ProcessLayout {
    per_process: bool,
    header_rows: usize,
    header_cols: usize,
    data_rows: usize,
    total_col: usize,
    total_row: usize,
}

impl ProcessLayout {
    fn new(machine: &Machine, per_process: bool, data_rows: usize) -> ProcessLayout {
        let (header_rows, header_cols) = (2, 1);
        ProcessLayout {
            per_process,
            header_rows,
            header_cols,
            data_rows,
            total_col: header_cols + machine.nodes.len(),
            total_row: header_rows + data_rows + 1,
        }
    }

    /// Adds the pages `numa_maps` counted (category, node, pages) of the `index`th
    /// process, in MB, to their cells and the totals.
    fn add_pages(
        &self,
        table: &mut VTable,
        machine: &Machine,
        counts: &[(usize, u32, u64)],
        index: usize,
    ) {
        for &(category, node, pages) in counts {
            let Some(column) = machine.nodes.iter().position(|&n| n == node) else {
                continue;
            };
            let size = if category == MemoryKind::Huge.index() {
                machine.huge_page_size
            } else {
                machine.page_size
            };
            let value = pages as f64 * size / MEGABYTE;
            let row = self.header_rows + if self.per_process { category } else { index };
            let col = self.header_cols + column;
            table.add(row, col, value);
            table.add(row, self.total_col, value);
            table.add(self.total_row, col, value);
            table.add(self.total_row, self.total_col, value);
        }
    }

    /// Fits the widths, draws the rule above Total, sorts if asked and prints.
    fn show(&self, table: &mut VTable, machine: &Machine, options: &Options, text: &mut String) {
        if options.compress {
            for col in 0..=self.total_col {
                table.fit_width(col, 4, 16);
            }
        } else {
            // Room for "PID (name)" labels.
            table.fit_width(0, 16, 24);
        }
        table.always_show_row(self.total_row - 1);
        for col in 0..=self.total_col {
            table.set(self.total_row - 1, col, Cell::Rule('-'));
        }
        if let Some(node) = options.sort {
            let col = machine.sort_column(node, self.header_cols);
            let last = self.header_rows + self.data_rows - 1;
            table.sort_descending(self.header_rows, last, col);
        }
        let show_zero = !options.skip_zero;
        table.display(text, options.screen_width, show_zero, show_zero);
    }
}

/// perror's wording of an error: the C library's message without Rust's "(os error N)".
fn describe(error: &io::Error) -> String {
    let text = error.to_string();
    match text.find(" (os error") {
        Some(end) => text[..end].to_string(),
        None => text,
    }
}

/// `(category, node, pages)` for every `N<node>=<pages>` word of a `numa_maps` text
/// (the crate's one parser, [`numa_maps::parse`]), categories as [`MemoryKind::index`] rows.
fn numa_maps_counts(maps: &str, path: &Path) -> Result<Vec<(usize, u32, u64)>, NumastatError> {
    let counts = numa_maps::parse(maps).map_err(|error| NumastatError::NumaMaps {
        path: path.to_path_buf(),
        word: error.word,
    })?;
    Ok(counts
        .iter()
        .map(|count| (count.kind.index(), count.node, count.pages))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::tests::fixture;

    fn options() -> Options {
        Options {
            screen_width: 10_000_000,
            ..Options::default()
        }
    }

    #[test]
    fn legacy_table_on_the_four_node_fixture() {
        let root = fixture("sysfs-4node");
        let legacy = Options {
            legacy: true,
            ..options()
        };
        let out = run(&root, &legacy, 1).unwrap().text;
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[0],
            format!(
                "{:16}{:>16}{:>16}{:>16}{:>16}",
                "", "node0", "node1", "node2", "node3"
            )
        );
        assert!(lines[1].starts_with("numa_hit "), "{out}");
        assert_eq!(lines.len(), 7, "{out}");
    }

    #[test]
    fn counters_in_megabytes_with_a_total() {
        let root = fixture("sysfs-4node");
        let out = run(&root, &options(), 1).unwrap().text;
        assert!(
            out.starts_with("\nPer-node numastat info (in MBs):\n"),
            "{out}"
        );
        assert!(out.contains("Node 3           Total\n"), "{out}");
        assert!(out.contains("Numa_Hit "), "{out}");
    }

    #[test]
    fn narrow_screens_fold_and_compact_columns_shrink() {
        let root = fixture("sysfs-4node");
        let narrow = Options {
            screen_width: 40,
            ..options()
        };
        let out = run(&root, &narrow, 1).unwrap().text;
        assert!(out.lines().all(|l| l.len() <= 40), "{out}");
        let compact = Options {
            compress: true,
            ..options()
        };
        let out = run(&root, &compact, 1).unwrap().text;
        assert!(out.contains(" Node 0 Node 1"), "{out}");
    }

    #[test]
    fn numa_maps_words_pick_the_category() {
        let counts = numa_maps_counts(
            "7f00 default heap anon=3 N0=1 N1=2\n7e00 bind:1 file=/x huge N1=4 kernelpagesize_kB=2048\n",
            Path::new("maps"),
        )
        .unwrap();
        assert_eq!(counts, vec![(1, 0, 1), (1, 1, 2), (0, 1, 4)]);
        assert!(numa_maps_counts("7f00 N0x1\n", Path::new("maps")).is_err());
    }

    #[test]
    fn sort_takes_a_node_only_in_digits() {
        assert_eq!(sort_node("2"), Some(2));
        assert_eq!(sort_node(""), None);
        assert_eq!(sort_node("1m"), None);
        assert_eq!(sort_node("99999999999"), Some(u32::MAX));
    }

    #[test]
    fn screen_width_follows_numastat() {
        assert_eq!(screen_width(Some("100"), true), 100);
        assert_eq!(screen_width(Some("10"), false), 32);
        assert_eq!(screen_width(Some("junk"), false), 80);
        assert_eq!(screen_width(None, true), 80);
        assert_eq!(screen_width(None, false), 10_000_000);
    }
}
