//! `buffered`: the plain tokio path, kept as the baseline that most Rust file servers
//! use. Each read hops to tokio's blocking pool and copies into a `BufReader`, then the
//! bytes are written from there.
//!
//! A tokio file reads at its own offset, and the descriptor may be shared with other
//! responses through the open-file cache (a `dup` would share the offset too), so the
//! cached inode is opened anew through `/proc/self/fd`: same file, private offset.

use std::io::{self, SeekFrom};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncSeekExt, BufReader};

use super::ended::file_shrank;
use crate::io::byte_range::ByteRange;
use crate::io::output::Output;
use crate::io::read_error::file_read_error;
use crate::io::shared_file::SharedFile;

pub(super) async fn send(
    out: &mut Output<'_>,
    file: &SharedFile,
    range: ByteRange,
    chunk_size: usize,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let own = tokio::fs::File::open(format!("/proc/self/fd/{}", file.as_raw_fd()));
    let mut own = own.await?;
    out.flush(false).await?;
    own.seek(SeekFrom::Start(range.start)).await?;
    let mut reader = BufReader::with_capacity(chunk_size, own).take(range.len);
    let mut sent = 0;
    loop {
        let chunk = match reader.fill_buf().await {
            Ok(chunk) => chunk,
            Err(error) => return Err(file_read_error(file, range.start + sent, error)),
        };
        if chunk.is_empty() {
            break;
        }
        out.write(chunk).await?;
        let n = chunk.len();
        reader.consume(n);
        sent += n as u64;
    }
    if sent < range.len {
        return Err(file_shrank());
    }
    Ok(())
}
