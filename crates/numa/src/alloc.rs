//! Memory placed on chosen nodes: anonymous mappings bound with mbind(2), as a buffer
//! ([`NodeBuffer`]) or as an allocator for collections ([`NodeAllocator`]).

use std::io;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use std::alloc::Layout;

use allocator_api2::alloc::{AllocError, Allocator, Global};

use crate::pages::page_size;
use crate::policy::{self, MemPolicy, PolicyError};

/// A zeroed, page-aligned buffer whose pages are allocated under a memory policy
/// (mmap(2) + mbind(2)), unmapped on drop.
///
/// Pages are allocated when first touched; with [`NodeBuffer::new_touched`] they are
/// touched at once, so that placement happens here and not on the hot path.
#[derive(Debug)]
pub struct NodeBuffer {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: NodeBuffer owns its mapping exclusively, like Box<[u8]>.
unsafe impl Send for NodeBuffer {}
// SAFETY: shared access only hands out &[u8].
unsafe impl Sync for NodeBuffer {}

/// MPOL_MF_STRICT: fail if pages already there do not follow the policy.
const MPOL_MF_STRICT: libc::c_uint = 1;

impl NodeBuffer {
    /// Maps `len` (> 0) bytes and binds them with `policy`.
    pub fn new(len: usize, policy: &MemPolicy) -> Result<NodeBuffer, PolicyError> {
        let ptr = map_with_policy(len, policy)?;
        Ok(NodeBuffer { ptr, len })
    }

    /// As [`NodeBuffer::new`], with every page touched (allocated) before returning.
    pub fn new_touched(len: usize, policy: &MemPolicy) -> Result<NodeBuffer, PolicyError> {
        let mut buffer = NodeBuffer::new(len, policy)?;
        let page = page_size();
        for offset in (0..len).step_by(page) {
            buffer[offset] = 0;
        }
        Ok(buffer)
    }

    /// The node of each page (or a negative errno, `-ENOENT` for one never touched).
    pub fn page_nodes(&self) -> Result<Vec<i32>, PolicyError> {
        let pages: Vec<*const u8> = (0..self.len)
            .step_by(page_size())
            // SAFETY: every offset is inside the mapping.
            .map(|offset| unsafe { self.ptr.as_ptr().add(offset) } as *const u8)
            .collect();
        policy::page_nodes(&pages)
    }
}

/// An anonymous mapping of `len` bytes whose pages will be allocated under `policy`.
fn map_with_policy(len: usize, policy: &MemPolicy) -> Result<NonNull<u8>, PolicyError> {
    let describe = || {
        format!(
            "{} bytes, {}, nodes {}",
            len,
            policy.mode.name(),
            policy.nodes
        )
    };
    if len == 0 {
        return Err(PolicyError::from_io(
            "mmap",
            describe(),
            io::Error::new(io::ErrorKind::InvalidInput, "length 0"),
            &policy.nodes,
        ));
    }
    // SAFETY: an anonymous private mapping at an address of the kernel's choosing;
    // no existing memory is affected.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return Err(PolicyError::from_io(
            "mmap",
            describe(),
            io::Error::last_os_error(),
            &policy.nodes,
        ));
    }
    let mask = policy::KernelMask::new(&policy.nodes);
    // SAFETY: the range is the mapping made above; the mask holds maxnode - 1 bits
    // (or is null with maxnode 0).
    let result = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            raw,
            len as libc::c_ulong,
            policy.mode_raw(),
            mask.as_ptr(),
            mask.maxnode(),
            MPOL_MF_STRICT,
        )
    };
    if result < 0 {
        let error = io::Error::last_os_error();
        // SAFETY: the mapping made above, not yet shared with anyone.
        unsafe { libc::munmap(raw, len) };
        return Err(PolicyError::from_io(
            "mbind",
            describe(),
            error,
            &policy.nodes,
        ));
    }
    Ok(NonNull::new(raw.cast()).expect("mmap returned a non-null address"))
}

/// An allocator (for `hashbrown` and other `allocator-api2` users) whose blocks of a
/// page or more are mappings of their own, bound with a memory policy; smaller blocks
/// come from the global allocator, since a policy applies to whole pages.
///
/// A block that cannot be mapped or bound reports `AllocError`; build the allocator
/// with [`NodeAllocator::new`], which checks the policy once, to make that unlikely.
#[derive(Clone, Debug)]
pub struct NodeAllocator {
    policy: MemPolicy,
}

impl NodeAllocator {
    /// An allocator for `policy`, checked by binding one page with it.
    pub fn new(policy: MemPolicy) -> Result<NodeAllocator, PolicyError> {
        NodeBuffer::new(page_size(), &policy)?;
        Ok(NodeAllocator { policy })
    }

    /// The policy its large blocks are bound with.
    pub fn policy(&self) -> &MemPolicy {
        &self.policy
    }

    fn is_mapped(layout: Layout) -> bool {
        layout.size() >= page_size() && layout.align() <= page_size()
    }
}

// SAFETY: blocks are either the global allocator's (for the layouts `is_mapped`
// rejects) or whole mappings of at least `layout.size()` bytes, page-aligned (so any
// alignment up to a page holds), valid until `deallocate` unmaps them with the same
// layout; the choice depends only on the layout, which `deallocate` receives again.
unsafe impl Allocator for NodeAllocator {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        if !Self::is_mapped(layout) {
            return Global.allocate(layout);
        }
        let len = layout.size().next_multiple_of(page_size());
        let ptr = map_with_policy(len, &self.policy).map_err(|_| AllocError)?;
        Ok(NonNull::slice_from_raw_parts(ptr, len))
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        if !Self::is_mapped(layout) {
            // SAFETY: the caller passes a block this allocator gave for `layout`,
            // which for this layout came from Global.
            unsafe { Global.deallocate(ptr, layout) };
            return;
        }
        let len = layout.size().next_multiple_of(page_size());
        // SAFETY: the block is a mapping of `len` bytes made by `allocate`.
        unsafe { libc::munmap(ptr.as_ptr().cast(), len) };
    }
}

impl Deref for NodeBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the mapping holds len readable (zero-initialised) bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for NodeBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref; &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for NodeBuffer {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by mmap with this address and length.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Mode;
    use crate::IdSet;

    #[test]
    fn pages_of_a_buffer_bound_to_node_0_are_on_node_0() {
        let policy = MemPolicy {
            mode: Mode::Bind,
            nodes: IdSet::parse_list("0").unwrap(),
        };
        let buffer = NodeBuffer::new_touched(4 << 20, &policy).unwrap();
        let nodes = buffer.page_nodes().unwrap();
        assert_eq!(nodes.len(), 1024);
        assert!(nodes.iter().all(|&n| n == 0), "{nodes:?}");
        assert!(buffer.iter().all(|&b| b == 0));

        let untouched = NodeBuffer::new(8192, &policy).unwrap();
        assert!(untouched
            .page_nodes()
            .unwrap()
            .iter()
            .all(|&n| n == -libc::ENOENT));
    }

    #[test]
    fn default_and_local_policies_take_no_nodes() {
        for mode in [Mode::Default, Mode::Local] {
            let policy = MemPolicy {
                mode,
                nodes: IdSet::new(),
            };
            let buffer = NodeBuffer::new_touched(1 << 20, &policy).unwrap();
            assert!(buffer.page_nodes().unwrap().iter().all(|&n| n == 0));
        }
    }

    #[test]
    fn an_absent_node_is_refused_and_explained() {
        let policy = MemPolicy {
            mode: Mode::Bind,
            nodes: IdSet::parse_list("200").unwrap(),
        };
        let error = NodeBuffer::new(4096, &policy).unwrap_err();
        assert_eq!(error.os_error(), Some(libc::EINVAL));
        assert!(
            error
                .to_string()
                .starts_with("mbind(4096 bytes, bind, nodes 200)"),
            "{error}"
        );
        let empty = MemPolicy {
            mode: Mode::Bind,
            nodes: IdSet::new(),
        };
        assert!(NodeBuffer::new(0, &empty).is_err());
    }
}
