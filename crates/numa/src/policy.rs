//! Memory policies and CPU binding through the kernel's syscalls (no libnuma):
//! set_mempolicy(2), get_mempolicy(2), mbind(2), move_pages(2), sched_setaffinity(2).
//!
//! A memory policy applies to the calling thread and is inherited by threads and
//! processes it creates afterwards, which is how `numa --membind=1 CMD` works.

use std::fmt;
use std::io;

use crate::{IdSet, Topology};

/// Bits in the node masks handed to the kernel; at least the kernel's `nr_node_ids`,
/// which get_mempolicy(2) insists on. MAX_NUMNODES is 1024 on x86_64 and arm64.
const NODE_BITS: usize = 1024;
const WORD_BITS: usize = u64::BITS as usize;

/// A memory policy mode (the kernel's `MPOL_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Allocate on the node of the CPU that touches the page.
    Default,
    /// Prefer one node, fall back to others.
    Preferred,
    /// Allocate only on the given nodes.
    Bind,
    /// Spread pages round-robin over the given nodes.
    Interleave,
    /// Allocate on the local node (explicitly, even inside a bound range).
    Local,
    /// Prefer several nodes (Linux 5.15+).
    PreferredMany,
    /// Interleave weighted by `/sys/kernel/mm/mempolicy/weighted_interleave` (6.9+).
    WeightedInterleave,
}

impl Mode {
    fn to_raw(self) -> i32 {
        match self {
            Mode::Default => 0,
            Mode::Preferred => 1,
            Mode::Bind => 2,
            Mode::Interleave => 3,
            Mode::Local => 4,
            Mode::PreferredMany => 5,
            Mode::WeightedInterleave => 6,
        }
    }

    fn from_raw(raw: i32) -> Option<Mode> {
        // The mode flags (MPOL_F_STATIC_NODES etc.) live in the high bits.
        Some(match raw & 0xff {
            0 => Mode::Default,
            1 => Mode::Preferred,
            2 => Mode::Bind,
            3 => Mode::Interleave,
            4 => Mode::Local,
            5 => Mode::PreferredMany,
            6 => Mode::WeightedInterleave,
            _ => return None,
        })
    }

    /// The name numactl prints for it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Default => "default",
            Mode::Preferred => "preferred",
            Mode::Bind => "bind",
            Mode::Interleave => "interleave",
            Mode::Local => "local",
            Mode::PreferredMany => "preferred-many",
            Mode::WeightedInterleave => "weighted interleave",
        }
    }
}

/// A memory policy: a mode and its nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemPolicy {
    /// The mode.
    pub mode: Mode,
    /// The nodes (empty for `Default` and `Local`).
    pub nodes: IdSet,
}

/// A policy call the kernel refused, with what that usually means.
#[derive(Debug, thiserror::Error)]
#[error("{call}({what}): {source}{hint}")]
pub struct PolicyError {
    call: &'static str,
    what: String,
    source: io::Error,
    hint: String,
}

impl PolicyError {
    pub(crate) fn from_io(
        call: &'static str,
        what: impl fmt::Display,
        source: io::Error,
        nodes: &IdSet,
    ) -> Self {
        let hint = match source.raw_os_error() {
            Some(libc::EINVAL) if !nodes.is_empty() => {
                let (allowed, with_memory) = allowed_and_memory_nodes();
                format!(
                    " (nodes {nodes}: a node must be online, have memory and be in this process's Mems_allowed ({allowed}); nodes with memory: {with_memory}; or the kernel lacks this mode)"
                )
            }
            Some(libc::EINVAL) => " (the kernel may lack this mode)".to_string(),
            Some(libc::EPERM) => " (moving another process's pages needs CAP_SYS_NICE)".to_string(),
            Some(libc::ENOSYS) => " (the kernel was built without NUMA support)".to_string(),
            _ => String::new(),
        };
        PolicyError {
            call,
            what: what.to_string(),
            source,
            hint,
        }
    }

    /// The OS error behind it.
    pub fn os_error(&self) -> Option<i32> {
        self.source.raw_os_error()
    }
}

fn allowed_and_memory_nodes() -> (String, String) {
    let allowed = crate::Allowed::read(std::path::Path::new("/"))
        .map(|a| a.nodes.to_string())
        .unwrap_or_else(|_| "unknown".into());
    let memory = Topology::system()
        .map(|t| t.with_memory.to_string())
        .unwrap_or_else(|_| "unknown".into());
    (allowed, memory)
}

impl MemPolicy {
    /// The mode as the kernel numbers it (`MPOL_*`).
    pub fn mode_raw(&self) -> libc::c_int {
        self.mode.to_raw()
    }
}

/// A node set as the kernel takes it: a bitmap pointer and the `maxnode` argument.
pub(crate) struct KernelMask {
    bits: [u64; NODE_BITS / WORD_BITS],
    empty: bool,
}

impl KernelMask {
    pub(crate) fn new(nodes: &IdSet) -> KernelMask {
        KernelMask {
            bits: to_mask(nodes),
            empty: nodes.is_empty(),
        }
    }

    /// The bitmap, or null for an empty set (which MPOL_DEFAULT and MPOL_LOCAL need).
    pub(crate) fn as_ptr(&self) -> *const u64 {
        if self.empty {
            std::ptr::null()
        } else {
            self.bits.as_ptr()
        }
    }

    /// The kernel reads `maxnode - 1` bits.
    pub(crate) fn maxnode(&self) -> libc::c_ulong {
        if self.empty {
            0
        } else {
            NODE_BITS as libc::c_ulong + 1
        }
    }
}

/// A node set as the kernel's `unsigned long` bitmap.
fn to_mask(nodes: &IdSet) -> [u64; NODE_BITS / WORD_BITS] {
    let mut mask = [0u64; NODE_BITS / WORD_BITS];
    for node in nodes.iter().filter(|&n| (n as usize) < NODE_BITS) {
        mask[node as usize / WORD_BITS] |= 1 << (node as usize % WORD_BITS);
    }
    mask
}

fn from_mask(mask: &[u64]) -> IdSet {
    (0..NODE_BITS as u32)
        .filter(|&n| mask[n as usize / WORD_BITS] & (1 << (n as usize % WORD_BITS)) != 0)
        .collect()
}

fn check(result: libc::c_long) -> io::Result<libc::c_long> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

/// Sets the calling thread's memory policy (inherited by threads and processes it
/// starts later).
pub fn set_mempolicy(policy: &MemPolicy) -> Result<(), PolicyError> {
    let mask = KernelMask::new(&policy.nodes);
    // SAFETY: the mask outlives the call and holds NODE_BITS bits (or is null with
    // maxnode 0); the kernel reads maxnode - 1 bits.
    let result = unsafe {
        libc::syscall(
            libc::SYS_set_mempolicy,
            policy.mode.to_raw(),
            mask.as_ptr(),
            mask.maxnode(),
        )
    };
    check(result).map(drop).map_err(|e| {
        PolicyError::from_io(
            "set_mempolicy",
            format!("{}, nodes {}", policy.mode.name(), policy.nodes),
            e,
            &policy.nodes,
        )
    })
}

/// The calling thread's memory policy.
pub fn get_mempolicy() -> Result<MemPolicy, PolicyError> {
    let (raw, nodes) = raw_policy(std::ptr::null(), "self")?;
    let mode = Mode::from_raw(raw).ok_or_else(|| unknown_mode(raw))?;
    Ok(MemPolicy { mode, nodes })
}

/// The mode flags of the calling thread's policy (`MPOL_F_STATIC_NODES`,
/// `MPOL_F_RELATIVE_NODES`, `MPOL_F_NUMA_BALANCING`), which [`get_mempolicy`] leaves out.
pub fn mempolicy_flags() -> Result<i32, PolicyError> {
    raw_policy(std::ptr::null(), "self").map(|(raw, _)| raw & !MODE_MASK)
}

/// The policy of the page at `addr` of this process (get_mempolicy with MPOL_F_ADDR).
pub(crate) fn policy_at(addr: *const u8) -> Result<(MemPolicy, i32), PolicyError> {
    let (raw, nodes) = raw_policy(addr, format!("address {addr:p}"))?;
    let mode = Mode::from_raw(raw).ok_or_else(|| unknown_mode(raw))?;
    Ok((MemPolicy { mode, nodes }, raw))
}

/// The mode bits of a raw policy; the rest are flags.
const MODE_MASK: i32 = 0xff;

fn unknown_mode(raw: i32) -> PolicyError {
    PolicyError::from_io(
        "get_mempolicy",
        format!("unknown mode {raw}"),
        io::Error::from_raw_os_error(libc::EINVAL),
        &IdSet::new(),
    )
}

/// get_mempolicy(2) for the thread (`addr` null) or for the page at `addr`.
fn raw_policy(addr: *const u8, what: impl fmt::Display) -> Result<(i32, IdSet), PolicyError> {
    const MPOL_F_ADDR: libc::c_ulong = 2;
    let flags = if addr.is_null() { 0 } else { MPOL_F_ADDR };
    let mut mode: libc::c_int = 0;
    let mut mask = [0u64; NODE_BITS / WORD_BITS];
    // SAFETY: mode and mask are valid for writes; mask holds NODE_BITS bits; a non-null
    // addr is only looked up by the kernel, which fails with EFAULT if it is unmapped.
    let result = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut mode as *mut libc::c_int,
            mask.as_mut_ptr(),
            NODE_BITS as libc::c_ulong,
            addr,
            flags,
        )
    };
    check(result).map_err(|e| PolicyError::from_io("get_mempolicy", what, e, &IdSet::new()))?;
    Ok((mode, from_mask(&mask)))
}

/// `--balancing --membind`: a bind policy with `MPOL_F_NUMA_BALANCING` (Linux 5.12+), so
/// that NUMA balancing may still move pages among the bound nodes. Kernels without the
/// flag get a plain bind policy, as numactl gives them; the answer says which it was.
pub fn set_membind_balancing(nodes: &IdSet) -> Result<bool, PolicyError> {
    const MPOL_F_NUMA_BALANCING: libc::c_int = 1 << 13;
    let mask = KernelMask::new(nodes);
    // SAFETY: as in set_mempolicy: the mask outlives the call and holds maxnode - 1 bits.
    let result = unsafe {
        libc::syscall(
            libc::SYS_set_mempolicy,
            Mode::Bind.to_raw() | MPOL_F_NUMA_BALANCING,
            mask.as_ptr(),
            mask.maxnode(),
        )
    };
    match check(result) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            set_mempolicy(&MemPolicy {
                mode: Mode::Bind,
                nodes: nodes.clone(),
            })?;
            Ok(false)
        }
        Err(e) => Err(PolicyError::from_io(
            "set_mempolicy",
            format!("bind with balancing, nodes {nodes}"),
            e,
            nodes,
        )),
    }
}

/// Applies `policy` to the pages of `[addr, addr + len)` (mbind(2)); `strict` fails
/// when pages already lie elsewhere (MPOL_MF_STRICT).
///
/// # Safety
/// The range must be a mapping of this process that stays mapped during the call.
pub(crate) unsafe fn bind_range(
    addr: *mut u8,
    len: usize,
    policy: &MemPolicy,
    strict: bool,
) -> Result<(), PolicyError> {
    const MPOL_MF_STRICT: libc::c_ulong = 1;
    let mask = KernelMask::new(&policy.nodes);
    // SAFETY: the caller keeps the range mapped; the mask holds maxnode - 1 bits.
    let result = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            addr,
            len as libc::c_ulong,
            policy.mode.to_raw(),
            mask.as_ptr(),
            mask.maxnode(),
            if strict { MPOL_MF_STRICT } else { 0 },
        )
    };
    check(result).map(drop).map_err(|e| {
        PolicyError::from_io(
            "mbind",
            format!(
                "{len} bytes, {}, nodes {}",
                policy.mode.name(),
                policy.nodes
            ),
            e,
            &policy.nodes,
        )
    })
}

/// For an interleave policy, the node the calling thread's next page goes to
/// (get_mempolicy with MPOL_F_NODE and no address).
pub fn next_interleave_node() -> Result<u32, PolicyError> {
    query_node(std::ptr::null(), "next interleave node")
}

/// The node that holds the page containing `byte`, as get_mempolicy(MPOL_F_NODE |
/// MPOL_F_ADDR) reports it.
pub fn node_of(byte: &u8) -> Result<u32, PolicyError> {
    let addr: *const u8 = byte;
    query_node(addr, format!("address {addr:p}"))
}

/// The CPU the calling thread runs on and that CPU's node, as getcpu(2) reports them
/// (the answer can be stale as soon as it returns unless the thread is bound).
pub fn current_cpu_and_node() -> io::Result<(u32, u32)> {
    let mut cpu: libc::c_uint = 0;
    let mut node: libc::c_uint = 0;
    // SAFETY: cpu and node are valid for writes; the third argument is unused (null).
    let result = unsafe {
        libc::syscall(
            libc::SYS_getcpu,
            &mut cpu as *mut libc::c_uint,
            &mut node as *mut libc::c_uint,
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    check(result)?;
    Ok((cpu, node))
}

/// get_mempolicy(MPOL_F_NODE), with MPOL_F_ADDR when `addr` is not null.
pub(crate) fn query_node(addr: *const u8, what: impl fmt::Display) -> Result<u32, PolicyError> {
    const MPOL_F_NODE: libc::c_ulong = 1;
    const MPOL_F_ADDR: libc::c_ulong = 2;
    let flags = if addr.is_null() {
        MPOL_F_NODE
    } else {
        MPOL_F_NODE | MPOL_F_ADDR
    };
    let mut node: libc::c_int = -1;
    // SAFETY: node is valid for writes; no mask is passed; a non-null addr comes from a
    // reference into a live allocation, and the kernel only looks it up.
    let result = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut node as *mut libc::c_int,
            std::ptr::null_mut::<u64>(),
            0 as libc::c_ulong,
            addr,
            flags,
        )
    };
    check(result).map_err(|e| PolicyError::from_io("get_mempolicy", what, e, &IdSet::new()))?;
    Ok(node as u32)
}

/// Where each page of this process lies: move_pages(2) with no target nodes. Each entry
/// is a node number, or a negative errno (`-ENOENT` for a page not yet touched).
pub fn page_nodes(pages: &[*const u8]) -> Result<Vec<i32>, PolicyError> {
    let mut status = vec![0 as libc::c_int; pages.len()];
    // SAFETY: pages and status have pages.len() entries; a null nodes array only queries.
    let result = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0 as libc::c_int,
            pages.len() as libc::c_ulong,
            pages.as_ptr(),
            std::ptr::null::<libc::c_int>(),
            status.as_mut_ptr(),
            0 as libc::c_int,
        )
    };
    check(result).map_err(|e| {
        PolicyError::from_io(
            "move_pages",
            format!("{} pages", pages.len()),
            e,
            &IdSet::new(),
        )
    })?;
    Ok(status)
}

/// Restricts the calling thread (and what it starts later) to the CPUs of `nodes`.
pub fn bind_cpus_to_nodes(topology: &Topology, nodes: &IdSet) -> Result<IdSet, PolicyError> {
    let cpus: IdSet = topology
        .nodes
        .iter()
        .filter(|n| nodes.contains(n.id))
        .flat_map(|n| n.cpus.iter())
        .collect();
    set_cpu_affinity(&cpus)?;
    Ok(cpus)
}

/// sched_setaffinity(2) for the calling thread.
pub fn set_cpu_affinity(cpus: &IdSet) -> Result<(), PolicyError> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for cpu in cpus.iter() {
        if (cpu as usize) < libc::CPU_SETSIZE as usize {
            // SAFETY: cpu is below CPU_SETSIZE, so the bit lies inside `set`.
            unsafe { libc::CPU_SET(cpu as usize, &mut set) };
        }
    }
    // SAFETY: set is a valid cpu_set_t of the size passed.
    let result =
        unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if result != 0 {
        let error = io::Error::last_os_error();
        return Err(PolicyError {
            call: "sched_setaffinity",
            what: format!("cpus {cpus}"),
            hint: " (the CPUs must be online and in this process's cpuset)".into(),
            source: error,
        });
    }
    Ok(())
}

/// The calling thread's CPU affinity.
pub fn cpu_affinity() -> io::Result<IdSet> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: set is valid for writes of the size passed.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok((0..libc::CPU_SETSIZE as u32)
        // SAFETY: every index is below CPU_SETSIZE.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu as usize, &set) })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Policies are per thread: each test sets them on a thread of its own.
    fn on_a_thread<T: Send>(f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|s| s.spawn(f).join().unwrap())
    }

    #[test]
    fn bind_to_node_0_and_read_it_back() {
        let node0 = IdSet::parse_list("0").unwrap();
        let policy = on_a_thread(|| {
            set_mempolicy(&MemPolicy {
                mode: Mode::Bind,
                nodes: node0.clone(),
            })
            .unwrap();
            get_mempolicy().unwrap()
        });
        assert_eq!(
            policy,
            MemPolicy {
                mode: Mode::Bind,
                nodes: node0
            }
        );
        let default = on_a_thread(|| get_mempolicy().unwrap());
        assert_eq!(default.mode, Mode::Default);
    }

    #[test]
    fn pages_allocated_under_bind_lie_on_node_0() {
        on_a_thread(|| {
            set_mempolicy(&MemPolicy {
                mode: Mode::Bind,
                nodes: IdSet::parse_list("0").unwrap(),
            })
            .unwrap();
            let pages = vec![1u8; 64 * 4096];
            let addresses: Vec<*const u8> = pages.chunks(4096).map(|p| p.as_ptr()).collect();
            let nodes = page_nodes(&addresses).unwrap();
            assert!(nodes.iter().all(|&n| n == 0), "{nodes:?}");
            assert_eq!(node_of(&pages[0]).unwrap(), 0);
        });
    }

    #[test]
    fn an_absent_node_is_explained() {
        let error = on_a_thread(|| {
            set_mempolicy(&MemPolicy {
                mode: Mode::Bind,
                nodes: IdSet::parse_list("200").unwrap(),
            })
            .unwrap_err()
        });
        assert_eq!(error.os_error(), Some(libc::EINVAL));
        let text = error.to_string();
        assert!(
            text.starts_with("set_mempolicy(bind, nodes 200): "),
            "{text}"
        );
        assert!(
            text.contains("Mems_allowed") && text.contains("nodes with memory: 0"),
            "{text}"
        );
    }

    #[test]
    fn cpu_affinity_round_trips() {
        let all = cpu_affinity().unwrap();
        let first: IdSet = all.iter().take(1).collect();
        let bound = on_a_thread(|| {
            set_cpu_affinity(&first).unwrap();
            cpu_affinity().unwrap()
        });
        assert_eq!(bound, first);
    }

    #[test]
    fn masks_round_trip() {
        let nodes = IdSet::parse_list("0,3,64-65,1023").unwrap();
        assert_eq!(from_mask(&to_mask(&nodes)), nodes);
    }
}
