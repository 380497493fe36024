//! The crate's error type for everything that depends on data, files or user configuration.

use std::path::PathBuf;

/// An error returned by this crate: the `try_` forms of the ops, gradient checks, anomaly
/// detection and file reading and writing.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Shapes (or dtypes: an integer tensor in an op that computes in floating point) that do
    /// not fit an operation; the message names the op and what did not fit.
    #[error("{0}")]
    Shape(String),
    /// A NaN or Inf first produced by the named op (see `autograd::detect_anomaly`).
    #[error("{0}")]
    Anomaly(String),
    /// A static graph that cannot run: a missing feed, a fed value that contradicts its
    /// placeholder, a node of another graph.
    #[error("{0}")]
    Graph(String),
    /// A backward pass that cannot run: the result is not tracked or not one element, a seed
    /// of another shape, a gradient reaching an op without a derivative (named).
    #[error("{0}")]
    Backward(String),
    /// A data-parallel job that cannot start (see `distributed`, feature `mpi`).
    #[error("{0}")]
    Distributed(String),
    /// A gradient check found analytic and numeric derivatives apart.
    #[error("{0}")]
    Gradcheck(String),
    /// A malformed data file or checkpoint: which file and what is wrong.
    #[error("{}: {msg}", path.display())]
    Format {
        /// The file that was being read.
        path: PathBuf,
        /// What is wrong with it.
        msg: String,
    },
    /// Reading or writing a file failed at the operating-system level.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file that was being read or written.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// A [`Error::Format`] naming `path`.
    pub(crate) fn format(path: &std::path::Path, msg: impl Into<String>) -> Error {
        Error::Format {
            path: path.to_path_buf(),
            msg: msg.into(),
        }
    }
}

/// The whole of a file a loader reads. Only a regular file: a device such as `/dev/zero` or a
/// FIFO has no end to read to. No more than the length the file system gives it is read.
pub(crate) fn read_regular_file(path: &std::path::Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    // Asked before opening too: opening a FIFO waits for a writer.
    let regular = |meta: &std::fs::Metadata| {
        meta.is_file()
            .then_some(())
            .ok_or_else(|| Error::format(path, "not a regular file"))
    };
    regular(&std::fs::metadata(path).map_err(io)?)?;
    let file = std::fs::File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    regular(&meta)?;
    let mut raw = Vec::new();
    raw.try_reserve_exact(usize::try_from(meta.len()).unwrap_or(usize::MAX))
        .map_err(|_| Error::format(path, format!("{} bytes do not fit in memory", meta.len())))?;
    file.take(meta.len()).read_to_end(&mut raw).map_err(io)?;
    Ok(raw)
}

/// `std::result::Result` with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
