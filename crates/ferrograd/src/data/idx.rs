//! The IDX format of MNIST and Fashion-MNIST: a magic number (two zero bytes, an element type,
//! a rank), big-endian u32 dimensions, then the elements. Files may be gzip-compressed
//! (detected by the gzip magic, not the name).

use std::io::Read;
use std::path::Path;

use flate2::read::GzDecoder;

use crate::error::{Error, Result};

/// An IDX array of unsigned bytes (the only element type these datasets use).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdxU8 {
    pub dims: Vec<usize>,
    pub data: Vec<u8>,
}

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
const TYPE_U8: u8 = 0x08;

fn format_error(path: &Path, msg: impl Into<String>) -> Error {
    Error::Format {
        path: path.to_path_buf(),
        msg: msg.into(),
    }
}

/// Reads an IDX file of unsigned bytes, plain or gzip-compressed, checking the magic, the
/// rank, the dimensions and the length. Every problem is an error naming the file.
pub fn read_idx_u8(path: &Path) -> Result<IdxU8> {
    let raw = std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let bytes = if raw.starts_with(&GZIP_MAGIC) {
        let mut out = Vec::new();
        GzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .map_err(|e| format_error(path, format!("corrupt gzip stream: {e}")))?;
        out
    } else {
        raw
    };
    parse_idx_u8(&bytes).map_err(|msg| format_error(path, msg))
}

/// Parses IDX bytes; the error says what is wrong.
pub fn parse_idx_u8(bytes: &[u8]) -> std::result::Result<IdxU8, String> {
    if bytes.len() < 4 {
        return Err(format!(
            "file of {} bytes is too short for the 4-byte IDX magic",
            bytes.len()
        ));
    }
    if bytes[0] != 0 || bytes[1] != 0 {
        return Err(format!(
            "bad magic {:02x?}: an IDX file starts with two zero bytes",
            &bytes[..4]
        ));
    }
    if bytes[2] != TYPE_U8 {
        return Err(format!(
            "element type 0x{:02x} is not unsigned byte (0x08)",
            bytes[2]
        ));
    }
    let rank = bytes[3] as usize;
    if rank == 0 {
        return Err("rank 0: an IDX array needs at least one dimension".into());
    }
    let header = 4 + 4 * rank;
    if bytes.len() < header {
        return Err(format!(
            "header truncated: rank {rank} needs {header} bytes, the file has {}",
            bytes.len()
        ));
    }
    let dims: Vec<usize> = (0..rank)
        .map(|i| {
            u32::from_be_bytes(bytes[4 + 4 * i..8 + 4 * i].try_into().expect("4 bytes")) as usize
        })
        .collect();
    let count = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| format!("dimensions {dims:?} overflow"))?;
    let body = bytes.len() - header;
    if body != count {
        let what = if body < count {
            "truncated"
        } else {
            "has trailing bytes"
        };
        return Err(format!(
            "data {what}: dimensions {dims:?} need {count} bytes after the header, found {body}"
        ));
    }
    Ok(IdxU8 {
        dims,
        data: bytes[header..].to_vec(),
    })
}

/// The bytes of an IDX file holding `data` with `dims` (for writing test files).
pub fn encode_idx_u8(dims: &[usize], data: &[u8]) -> Vec<u8> {
    let mut out = vec![0, 0, TYPE_U8, dims.len() as u8];
    for &d in dims {
        out.extend_from_slice(&(d as u32).to_be_bytes());
    }
    out.extend_from_slice(data);
    out
}
