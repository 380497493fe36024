//! The IDX format of MNIST and Fashion-MNIST: a magic number (two zero bytes, an element type,
//! a rank), big-endian u32 dimensions, then the elements. Files may be gzip-compressed
//! (detected by the gzip magic, not the name).

use std::io::Read;
use std::path::Path;

use flate2::bufread::GzDecoder;

use crate::error::{Error, Result};

/// An IDX array of unsigned bytes (the only element type these datasets use).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdxU8 {
    /// The dimensions, outermost first.
    pub dims: Vec<usize>,
    /// The elements in row-major order (as many as the product of `dims`).
    pub data: Vec<u8>,
}

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
const TYPE_U8: u8 = 0x08;

/// Reads an IDX file of unsigned bytes, plain or gzip-compressed, checking the magic, the
/// rank, the dimensions and the length. Every problem is an error naming the file. A
/// compressed file is inflated only as far as its header says the data goes (plus one byte, to
/// notice extra data), so a small file that inflates to gigabytes costs nothing.
pub fn read_idx_u8(path: &Path) -> Result<IdxU8> {
    let raw = crate::error::read_regular_file(path)?;
    let fail = |msg: String| Error::format(path, msg);
    if !raw.starts_with(&GZIP_MAGIC) {
        return parse_idx_u8(&raw).map_err(fail);
    }
    let mut gz = GzDecoder::new(&raw[..]);
    let idx = read_idx(&mut gz).map_err(|e| match e {
        ReadError::Format(msg) => fail(msg),
        ReadError::Io(e) => fail(format!("corrupt gzip stream: {e}")),
    })?;
    // The decoder has checked the member's CRC and length; anything after it is not ours.
    let rest = gz.into_inner();
    if !rest.is_empty() {
        return Err(fail(format!(
            "{} bytes after the end of the gzip stream",
            rest.len()
        )));
    }
    Ok(idx)
}

/// Parses IDX bytes; the error says what is wrong.
pub fn parse_idx_u8(bytes: &[u8]) -> std::result::Result<IdxU8, String> {
    read_idx(&mut &bytes[..]).map_err(|e| match e {
        ReadError::Format(msg) => msg,
        ReadError::Io(e) => e.to_string(),
    })
}

enum ReadError {
    /// The bytes are not a valid IDX array.
    Format(String),
    /// The source could not be read (a corrupt gzip stream).
    Io(std::io::Error),
}

impl From<std::io::Error> for ReadError {
    fn from(e: std::io::Error) -> Self {
        ReadError::Io(e)
    }
}

/// Reads up to `n` bytes (fewer only at the end of `src`).
fn read_up_to(src: &mut impl Read, n: u64) -> std::result::Result<Vec<u8>, ReadError> {
    let mut out = Vec::new();
    src.take(n).read_to_end(&mut out)?;
    Ok(out)
}

/// One IDX array from `src`, which must end right after it: never reads more than the
/// header's size plus one byte.
fn read_idx(src: &mut impl Read) -> std::result::Result<IdxU8, ReadError> {
    let bad = |msg: String| Err(ReadError::Format(msg));
    let magic = read_up_to(src, 4)?;
    if magic.len() < 4 {
        return bad(format!(
            "file of {} bytes is too short for the 4-byte IDX magic",
            magic.len()
        ));
    }
    if magic[0] != 0 || magic[1] != 0 {
        return bad(format!(
            "bad magic {magic:02x?}: an IDX file starts with two zero bytes"
        ));
    }
    if magic[2] != TYPE_U8 {
        return bad(format!(
            "element type 0x{:02x} is not unsigned byte (0x08)",
            magic[2]
        ));
    }
    let rank = magic[3] as usize;
    if rank == 0 {
        return bad("rank 0: an IDX array needs at least one dimension".into());
    }
    let header = 4 + 4 * rank;
    let dim_bytes = read_up_to(src, 4 * rank as u64)?;
    if dim_bytes.len() < 4 * rank {
        return bad(format!(
            "header truncated: rank {rank} needs {header} bytes, the file has {}",
            4 + dim_bytes.len()
        ));
    }
    let dims: Vec<usize> = dim_bytes
        .chunks_exact(4)
        .map(|c| u32::from_be_bytes(c.try_into().expect("4 bytes")) as usize)
        .collect();
    let count = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| ReadError::Format(format!("dimensions {dims:?} overflow")))?;
    let data = read_up_to(src, (count as u64).saturating_add(1))?;
    if data.len() != count {
        let (what, found) = if data.len() < count {
            ("truncated", data.len().to_string())
        } else {
            ("has trailing bytes", "more".to_string())
        };
        return bad(format!(
            "data {what}: dimensions {dims:?} need {count} bytes after the header, found {found}"
        ));
    }
    Ok(IdxU8 { dims, data })
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
