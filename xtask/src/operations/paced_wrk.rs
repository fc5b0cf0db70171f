//! wrk as the operations checks run it: keep-alive requests rotating over small files,
//! each connection pausing between its requests (a steady load, not wrk's flat-out
//! one), stopped with SIGINT; its counts are read back and any error is refused.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::{ensure, Context as _, Result};
use rustix::process::{Pid, Signal};

/// A running wrk.
pub(crate) struct PacedWrk(Child);

impl PacedWrk {
    /// `connections` keep-alive connections to `base` (`https://127.0.0.1:PORT`), each
    /// asking for `paths` in turn and waiting `delay_ms` after each answer; its script
    /// goes to `dir`.
    pub(crate) fn start(
        base: &str,
        paths: &[&str],
        connections: u32,
        delay_ms: u32,
        dir: &Path,
    ) -> Result<PacedWrk> {
        let script = dir.join("paced.lua");
        let quoted: Vec<String> = paths.iter().map(|path| format!("{path:?}")).collect();
        let text = SCRIPT
            .replace("PATHS", &quoted.join(", "))
            .replace("DELAY_MS", &delay_ms.to_string());
        std::fs::write(&script, text)?;
        let child = Command::new("wrk")
            .args(["--threads", "1", "--connections", &connections.to_string()])
            .args(["--duration", "100h", "--timeout", "10s", "--script"])
            .arg(&script)
            .arg(format!("{base}{}", paths[0]))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot start wrk")?;
        Ok(PacedWrk(child))
    }

    /// Stops the load; the requests made, after checking that none failed (no connect,
    /// read, write or timeout error, no status outside 2xx and 3xx).
    pub(crate) fn finish(self) -> Result<u64> {
        signal(self.0.id(), Signal::INT)?;
        let output = self.0.wait_with_output()?;
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let figure = |name: &str| -> Result<u64> {
            let line = text
                .lines()
                .find_map(|line| line.strip_prefix(&format!("{name} ")))
                .with_context(|| format!("wrk printed no {name:?} figure:\n{text}"))?;
            line.trim()
                .parse()
                .with_context(|| format!("wrk's {name}: {line:?}"))
        };
        let requests = figure("requests")?;
        for error in ["connect", "read", "write", "timeout", "status"] {
            let count = figure(error)?;
            ensure!(
                count == 0,
                "wrk: {count} {error} errors in {requests} requests:\n{text}"
            );
        }
        ensure!(requests > 0, "wrk made no request:\n{text}");
        Ok(requests)
    }
}

/// Sends `signal` to the process `pid`.
pub(crate) fn signal(pid: u32, signal: Signal) -> Result<()> {
    let pid = Pid::from_raw(pid as i32).context("pid 0")?;
    rustix::process::kill_process(pid, signal).with_context(|| format!("cannot signal {pid:?}"))
}

/// The script: rotates over PATHS, waits DELAY_MS after each answer, and prints its
/// counts one per line.
const SCRIPT: &str = r#"
local paths = {PATHS}
local next_path = 0
request = function()
  next_path = next_path % #paths + 1
  return wrk.format("GET", paths[next_path])
end
delay = function()
  return DELAY_MS
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("requests %d\nconnect %d\nread %d\nwrite %d\ntimeout %d\nstatus %d\n",
    summary.requests, e.connect, e.read, e.write, e.timeout, e.status))
end
"#;
