//! `cargo xtask bench-compare`: criterion's latest run of each benchmark against a saved
//! baseline, failing when one got slower than a threshold allows. The bench workflow
//! runs the base branch's benches with `--save-baseline NAME`, the pull request's with
//! `--baseline NAME`, and then this: criterion keeps both under
//! TARGET_DIR/criterion/<id>/{NAME,new}/estimates.json, and the medians are compared
//! (the statistic the bench report shows).

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};

use crate::util::target_dir;

/// The command-line options.
#[derive(Debug, clap::Args)]
pub(crate) struct Options {
    /// The saved baseline to compare with (criterion's --save-baseline NAME)
    #[arg(long, value_name = "NAME", default_value = "base")]
    baseline: String,
    /// Fail when a benchmark's median time grew by more than PERCENT over the baseline
    #[arg(long, value_name = "PERCENT", default_value_t = 10.0, value_parser = parse_threshold)]
    threshold: f64,
    /// Criterion's output directory [default: TARGET_DIR/criterion]
    #[arg(long, value_name = "DIR")]
    criterion_dir: Option<PathBuf>,
}

/// A threshold in percent: a finite number above zero.
fn parse_threshold(text: &str) -> Result<f64, String> {
    match text.trim_end_matches('%').parse::<f64>() {
        Ok(percent) if percent.is_finite() && percent > 0.0 => Ok(percent),
        _ => Err(format!(
            "'{text}' is not a threshold: give a percentage above 0, e.g. 10"
        )),
    }
}

/// One benchmark measured in both runs.
#[derive(Clone, Debug, PartialEq)]
struct Compared {
    /// criterion's id: group/function/value.
    id: String,
    /// Median time per iteration in the baseline, ns.
    base_ns: f64,
    /// Median time per iteration in the latest run, ns.
    new_ns: f64,
}

impl Compared {
    /// How much slower the latest run is, in percent (negative: faster).
    fn change_percent(&self) -> f64 {
        (self.new_ns / self.base_ns - 1.0) * 100.0
    }

    fn regressed(&self, threshold: f64) -> bool {
        self.change_percent() > threshold
    }
}

/// `cargo xtask bench-compare`.
pub(crate) fn run(options: &Options) -> Result<()> {
    let dir = match &options.criterion_dir {
        Some(dir) => dir.clone(),
        None => criterion_home()?,
    };
    let compared = collect(&dir, &options.baseline)?;
    if compared.is_empty() {
        bail!(
            "no benchmark under {} has both {}/ and new/ estimates: run `cargo bench -- --save-baseline {}` on the base, then `cargo bench -- --baseline {}`",
            dir.display(),
            options.baseline,
            options.baseline,
            options.baseline
        );
    }
    print!("{}", table(&compared, options.threshold));
    let regressed: Vec<&Compared> = compared
        .iter()
        .filter(|c| c.regressed(options.threshold))
        .collect();
    if !regressed.is_empty() {
        let list: Vec<String> = regressed
            .iter()
            .map(|c| format!("{} (+{:.1}%)", c.id, c.change_percent()))
            .collect();
        bail!(
            "{} of {} benchmarks slower than baseline {} by more than {}%: {}",
            regressed.len(),
            compared.len(),
            options.baseline,
            options.threshold,
            list.join(", ")
        );
    }
    eprintln!(
        "xtask bench-compare: {} benchmarks within {}% of baseline {}",
        compared.len(),
        options.threshold,
        options.baseline
    );
    Ok(())
}

/// CRITERION_HOME when set (criterion honours it), else TARGET_DIR/criterion.
fn criterion_home() -> Result<PathBuf> {
    match std::env::var_os("CRITERION_HOME") {
        Some(home) => Ok(PathBuf::from(home)),
        None => Ok(target_dir()?.join("criterion")),
    }
}

/// Every benchmark under `dir` with estimates in both `baseline/` and `new/`, sorted by
/// id. A benchmark with only one of them (new in this branch, or not run) is skipped.
fn collect(dir: &Path, baseline: &str) -> Result<Vec<Compared>> {
    if !dir.is_dir() {
        bail!("{} is not a directory: no criterion results", dir.display());
    }
    let mut compared = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        let (base, new) = (current.join(baseline), current.join("new"));
        if base.join("estimates.json").is_file() && new.join("estimates.json").is_file() {
            let id = benchmark_id(&new)?.unwrap_or_else(|| {
                current
                    .strip_prefix(dir)
                    .unwrap_or(&current)
                    .display()
                    .to_string()
            });
            compared.push(Compared {
                id,
                base_ns: median_ns(&base.join("estimates.json"))?,
                new_ns: median_ns(&new.join("estimates.json"))?,
            });
            continue;
        }
        let entries =
            fs::read_dir(&current).with_context(|| format!("cannot list {}", current.display()))?;
        for entry in entries {
            let path = entry?.path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            // A run's own directories and criterion's HTML are no benchmarks.
            if path.is_dir() && !["new", "change", "report", baseline].contains(&name) {
                stack.push(path);
            }
        }
    }
    compared.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(compared)
}

/// criterion's full id from `benchmark.json` beside the estimates, if there is one.
fn benchmark_id(run: &Path) -> Result<Option<String>> {
    let path = run.join("benchmark.json");
    let Ok(text) = fs::read_to_string(&path) else {
        return Ok(None);
    };
    let benchmark: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    Ok(benchmark["full_id"].as_str().map(str::to_owned))
}

/// The median's point estimate in an `estimates.json`, ns; it must be above zero.
fn median_ns(path: &Path) -> Result<f64> {
    let text =
        fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let estimates: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    match estimates["median"]["point_estimate"].as_f64() {
        Some(ns) if ns > 0.0 && ns.is_finite() => Ok(ns),
        _ => bail!(
            "{}: no positive median.point_estimate (not criterion's estimates?)",
            path.display()
        ),
    }
}

/// A Markdown table of every comparison, regressions marked.
fn table(compared: &[Compared], threshold: f64) -> String {
    let mut out =
        String::from("| benchmark | baseline | new | change | |\n|---|---:|---:|---:|---|\n");
    for c in compared {
        let verdict = if c.regressed(threshold) {
            format!("slower than {threshold}%")
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:+.1}% | {verdict} |",
            c.id,
            format_ns(c.base_ns),
            format_ns(c.new_ns),
            c.change_percent()
        );
    }
    out
}

fn format_ns(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.2} ns")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes criterion's files for one benchmark run.
    fn write_run(root: &Path, id: &str, run: &str, median_ns: f64) {
        let dir = root.join(id).join(run);
        fs::create_dir_all(&dir).unwrap();
        let estimate = |value: f64| {
            serde_json::json!({
                "confidence_interval": {"confidence_level": 0.95, "lower_bound": value * 0.99, "upper_bound": value * 1.01},
                "point_estimate": value,
                "standard_error": value * 0.01
            })
        };
        let estimates = serde_json::json!({
            "mean": estimate(median_ns * 1.02),
            "median": estimate(median_ns),
            "median_abs_dev": estimate(median_ns * 0.01),
            "slope": null,
            "std_dev": estimate(median_ns * 0.02)
        });
        fs::write(dir.join("estimates.json"), estimates.to_string()).unwrap();
        let benchmark = serde_json::json!({"full_id": id, "group_id": id.split('/').next()});
        fs::write(dir.join("benchmark.json"), benchmark.to_string()).unwrap();
    }

    #[test]
    fn compares_the_medians_of_both_runs() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write_run(root, "hash/simd/16", "base", 10.0);
        write_run(root, "hash/simd/16", "new", 12.0);
        write_run(root, "base64_encode/simd/1024", "base", 100.0);
        write_run(root, "base64_encode/simd/1024", "new", 95.0);
        // Only in this branch: nothing to compare with.
        write_run(root, "count/simd/64", "new", 5.0);
        // Criterion's own comparison and HTML are not benchmarks.
        fs::create_dir_all(root.join("hash/report")).unwrap();
        write_run(root, "hash/simd/16", "change", 0.2);

        let compared = collect(root, "base").unwrap();
        let ids: Vec<&str> = compared.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["base64_encode/simd/1024", "hash/simd/16"]);
        let hash = &compared[1];
        assert_eq!((hash.base_ns, hash.new_ns), (10.0, 12.0));
        assert!((hash.change_percent() - 20.0).abs() < 1e-9);
        assert!(hash.regressed(10.0));
        assert!(!hash.regressed(25.0));
        let encode = &compared[0];
        assert!((encode.change_percent() + 5.0).abs() < 1e-9);
        assert!(!encode.regressed(1.0), "faster is never a regression");

        let table = table(&compared, 10.0);
        assert!(
            table.contains("| hash/simd/16 | 10.00 ns | 12.00 ns | +20.0% | slower than 10% |"),
            "{table}"
        );
        assert!(
            table.contains("| base64_encode/simd/1024 | 100.00 ns | 95.00 ns | -5.0% |  |"),
            "{table}"
        );
    }

    #[test]
    fn a_change_just_at_the_threshold_passes() {
        let at = Compared {
            id: "x".into(),
            base_ns: 100.0,
            new_ns: 110.0,
        };
        assert!(!at.regressed(10.0 + 1e-9));
        assert!(at.regressed(9.9));
    }

    #[test]
    fn the_baseline_is_chosen_by_name() {
        let dir = tempfile::tempdir().unwrap();
        write_run(dir.path(), "clock_read/ioserve/now", "pr-base", 2.0);
        write_run(dir.path(), "clock_read/ioserve/now", "new", 2.1);
        assert!(collect(dir.path(), "base").unwrap().is_empty());
        let compared = collect(dir.path(), "pr-base").unwrap();
        assert_eq!(compared.len(), 1);
        assert_eq!(compared[0].id, "clock_read/ioserve/now");
    }

    #[test]
    fn bad_estimates_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        write_run(dir.path(), "count/simd/64", "base", 5.0);
        write_run(dir.path(), "count/simd/64", "new", 5.0);
        let broken = dir.path().join("count/simd/64/new/estimates.json");
        fs::write(&broken, r#"{"median": {"point_estimate": 0}}"#).unwrap();
        let error = format!("{:#}", collect(dir.path(), "base").unwrap_err());
        assert!(
            error.contains("new/estimates.json") && error.contains("median"),
            "{error}"
        );
        fs::write(&broken, "not json").unwrap();
        let error = format!("{:#}", collect(dir.path(), "base").unwrap_err());
        assert!(error.contains("not JSON"), "{error}");
        let missing = dir.path().join("absent");
        let error = format!("{:#}", collect(&missing, "base").unwrap_err());
        assert!(
            error.contains("absent") && error.contains("not a directory"),
            "{error}"
        );
    }

    #[test]
    fn thresholds_are_positive_percentages() {
        assert_eq!(parse_threshold("10"), Ok(10.0));
        assert_eq!(parse_threshold("2.5%"), Ok(2.5));
        for bad in ["0", "-5", "ten", "NaN", "inf", ""] {
            let error = parse_threshold(bad).unwrap_err();
            assert!(error.contains(&format!("'{bad}'")), "{error}");
        }
    }
}
