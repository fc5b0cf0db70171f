//! Where a report goes: stderr by default (as strace), or a file (`-o FILE`).

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::error::ProbeError;

/// The destination of a command's report.
#[derive(Debug)]
pub enum ReportSink {
    /// Standard error, shared with the progress notes. A closed stderr drops the
    /// report silently, never a panic.
    Stderr,
    /// A file created (or truncated) before tracing starts.
    File {
        /// The file.
        file: File,
        /// Its path, for errors.
        path: PathBuf,
    },
}

impl ReportSink {
    /// Stderr for `None`; else creates `path` now, so that a path that cannot be
    /// written is refused before anything is traced.
    pub fn open(path: Option<&Path>) -> Result<ReportSink, ProbeError> {
        let Some(path) = path else {
            return Ok(ReportSink::Stderr);
        };
        let file = File::create(path).map_err(|cause| ProbeError::Output {
            path: path.to_path_buf(),
            cause,
        })?;
        Ok(ReportSink::File {
            file,
            path: path.to_path_buf(),
        })
    }

    /// Writes `text`; a file that cannot take it is an error naming the file.
    pub fn write(&mut self, text: &str) -> Result<(), ProbeError> {
        match self {
            ReportSink::Stderr => {
                let _ = io::stderr().lock().write_all(text.as_bytes());
                Ok(())
            }
            ReportSink::File { file, path } => {
                file.write_all(text.as_bytes())
                    .map_err(|cause| ProbeError::Output {
                        path: path.clone(),
                        cause,
                    })
            }
        }
    }
}
