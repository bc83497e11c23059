//! The writer's error: which file, what was being written, and why (a
//! full disk names the path, never leaves a silent short file).

use std::fmt;
use std::path::PathBuf;

/// Why writing a perf.data file failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A write to the file (or creating it) failed.
    Write {
        /// The file.
        path: PathBuf,
        /// What was being written.
        what: &'static str,
        /// The system's error (ENOSPC for a full disk).
        source: std::io::Error,
    },
    /// Reading the rings, or opening the side-band event, failed.
    Read(crate::Error),
}

impl Error {
    /// The error number (the C face returns `-errno`).
    pub fn errno(&self) -> i32 {
        match self {
            Error::Write { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            Error::Read(e) => e.errno(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Write { path, what, source } => {
                write!(f, "cannot write {what} to {}: {source}", path.display())
            }
            Error::Read(e) => write!(f, "perf.data recording: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Write { source, .. } => Some(source),
            Error::Read(e) => Some(e),
        }
    }
}

impl From<crate::Error> for Error {
    fn from(e: crate::Error) -> Error {
        Error::Read(e)
    }
}
