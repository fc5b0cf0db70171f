//! Whether this process may load BPF programs, and whether the kernel has BTF:
//! checked up front so that the user gets one clear line instead of libbpf's log.

use std::path::Path;

use crate::error::{ProbeError, Result};

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Where the kernel exposes its BTF.
pub const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Checks privileges and BTF before anything is started: [`require_bpf_privileges`],
/// then [`require_kernel_btf`].
pub fn require_bpf() -> Result<()> {
    require_bpf_privileges()?;
    require_kernel_btf()
}

/// Fails with [`ProbeError::NotPrivileged`] unless the process is root or has
/// CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN) in its effective set.
pub fn require_bpf_privileges() -> Result<()> {
    let uid = rustix::process::geteuid().as_raw();
    if uid == 0 {
        return Ok(());
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let effective = effective_capabilities(&status).unwrap_or(0);
    let has = |cap: u32| effective & (1u64 << cap) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        Ok(())
    } else {
        Err(ProbeError::NotPrivileged { uid })
    }
}

/// Fails with [`ProbeError::NoBtf`] when the kernel has no BTF.
pub fn require_kernel_btf() -> Result<()> {
    let path = Path::new(KERNEL_BTF);
    if path.exists() {
        Ok(())
    } else {
        Err(ProbeError::NoBtf {
            path: path.to_path_buf(),
        })
    }
}

/// The `CapEff` mask of a /proc/PID/status text.
fn effective_capabilities(status: &str) -> Option<u64> {
    let line = status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))?;
    u64::from_str_radix(line.trim(), 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_effective_capability_mask() {
        let status = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000000c000000000\n";
        let mask = effective_capabilities(status).unwrap();
        assert_ne!(mask & (1 << CAP_BPF), 0);
        assert_ne!(mask & (1 << CAP_PERFMON), 0);
        assert_eq!(mask & (1 << CAP_SYS_ADMIN), 0);
        assert_eq!(effective_capabilities("Name:\tx\n"), None);
    }
}
