//! `read`: pread(2) into a reused page-aligned buffer, then write from it.
//!
//! The seed's "io.CopyBuffer with a preallocated 128 KiB buffer" and "aligned buffer
//! pool": one buffer of `--chunk-size` per response in flight, taken from a pool and
//! given back, so steady-state serving allocates nothing per chunk or per request.
//! pread runs on the worker thread; for files in the page cache it is a memcpy (cold
//! ranges are brought in first, see [`super::cold`]).

use std::alloc::{self, Layout};
use std::io;
use std::ptr::NonNull;
use std::sync::Mutex;

use super::cold::ReadAhead;
use super::ended::file_shrank;
use crate::io::byte_range::ByteRange;
use crate::io::output::Output;
use crate::io::read_error::file_read_error;
use crate::io::shared_file::SharedFile;

/// Alignment of pooled buffers: a page, which also satisfies O_DIRECT and cache lines.
const ALIGN: usize = 4096;
/// Idle buffers kept for reuse; beyond that, returned buffers are freed.
const MAX_IDLE: usize = 256;

pub(super) async fn send(
    out: &mut Output<'_>,
    file: &SharedFile,
    range: ByteRange,
    pool: &BufferPool,
    ahead: &mut ReadAhead<'_>,
) -> io::Result<()> {
    // Back to the pool however the response ends: aborted downloads are common.
    let mut buffer = pool.take();
    let mut offset = range.start;
    while offset < range.end() {
        let ready = ahead.ready(offset).await;
        let want = (ready - offset).min(buffer.len() as u64) as usize;
        let n = rustix::io::pread(&**file, &mut buffer[..want], offset)
            .map_err(|error| file_read_error(file, offset, error.into()))?;
        if n == 0 {
            return Err(file_shrank());
        }
        out.write(&buffer[..n]).await?;
        offset += n as u64;
    }
    Ok(())
}

/// A pool of page-aligned buffers of one size.
#[derive(Debug)]
pub struct BufferPool {
    size: usize,
    idle: Mutex<Vec<AlignedBuf>>,
}

impl BufferPool {
    /// A pool of buffers of `size` bytes (at least one page).
    pub fn new(size: usize) -> BufferPool {
        BufferPool {
            size: size.max(ALIGN),
            idle: Mutex::new(Vec::new()),
        }
    }

    /// A buffer from the pool, or a new one; it goes back to the pool when dropped.
    pub fn take(&self) -> PooledBuf<'_> {
        let reused = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        PooledBuf {
            buffer: Some(reused.unwrap_or_else(|| AlignedBuf::zeroed(self.size))),
            pool: self,
        }
    }

    fn give_back(&self, buffer: AlignedBuf) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(buffer);
        }
    }

    /// Buffers waiting for reuse.
    pub fn idle(&self) -> usize {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// A buffer borrowed from a [`BufferPool`], returned to it on drop.
#[derive(Debug)]
pub struct PooledBuf<'a> {
    buffer: Option<AlignedBuf>,
    pool: &'a BufferPool,
}

impl std::ops::Deref for PooledBuf<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.buffer.as_deref().unwrap_or_default()
    }
}

impl std::ops::DerefMut for PooledBuf<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.buffer.as_deref_mut().unwrap_or_default()
    }
}

impl Drop for PooledBuf<'_> {
    fn drop(&mut self) {
        if let Some(buffer) = self.buffer.take() {
            self.pool.give_back(buffer);
        }
    }
}

/// A zero-initialised heap buffer aligned to [`ALIGN`].
#[derive(Debug)]
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like Box<[u8]>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out &[u8], like Box<[u8]>.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    fn layout(len: usize) -> Layout {
        Layout::from_size_align(len, ALIGN).expect("buffer size overflows a Layout")
    }

    /// A zeroed buffer of `len` (> 0) bytes.
    pub fn zeroed(len: usize) -> AlignedBuf {
        assert!(len > 0, "AlignedBuf must not be empty");
        let layout = Self::layout(len);
        // SAFETY: layout has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, len }
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr points to len initialised (zeroed) bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and &mut self guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: ptr was allocated by alloc_zeroed with this same layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_and_reused() {
        let pool = BufferPool::new(128 * 1024);
        let mut a = pool.take();
        assert_eq!(a.len(), 128 * 1024);
        assert_eq!(a.as_ptr() as usize % ALIGN, 0);
        a[0] = 7;
        let addr = a.as_ptr();
        drop(a);
        assert_eq!(pool.idle(), 1, "returned on drop");
        let b = pool.take();
        assert_eq!(b.as_ptr(), addr);
        assert_eq!(pool.idle(), 0);
    }
}
