//! The crate's error type for everything that depends on data, files or user configuration.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Shapes that do not fit an operation; the message names the op and the shapes.
    #[error("{0}")]
    Shape(String),
    /// A NaN or Inf first produced by the named op (see `autograd::detect_anomaly`).
    #[error("{0}")]
    Anomaly(String),
    /// A gradient check found analytic and numeric derivatives apart.
    #[error("{0}")]
    Gradcheck(String),
    /// A malformed data file or checkpoint: which file and what is wrong.
    #[error("{}: {msg}", path.display())]
    Format { path: PathBuf, msg: String },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
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

pub type Result<T, E = Error> = std::result::Result<T, E>;
