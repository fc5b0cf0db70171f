//! `buffered`: the plain tokio path, kept as the baseline that most Rust file servers
//! use. Each read hops to tokio's blocking pool and copies into a `BufReader`, then the
//! bytes are written from there.

use std::fs::File;
use std::io::{self, SeekFrom};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncSeekExt, BufReader};

use crate::output::Output;
use crate::range::ByteRange;

pub(super) async fn send(
    out: &mut Output<'_>,
    file: &File,
    range: ByteRange,
    chunk_size: usize,
) -> io::Result<()> {
    out.flush(false).await?;
    let mut file = tokio::fs::File::from_std(file.try_clone()?);
    file.seek(SeekFrom::Start(range.start)).await?;
    let mut reader = BufReader::with_capacity(chunk_size, file).take(range.len);
    let mut sent = 0;
    loop {
        let chunk = reader.fill_buf().await?;
        if chunk.is_empty() {
            break;
        }
        out.write(chunk).await?;
        let n = chunk.len();
        reader.consume(n);
        sent += n as u64;
    }
    if sent < range.len {
        return Err(super::file_shrank());
    }
    Ok(())
}
