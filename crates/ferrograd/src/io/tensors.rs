//! Named tensors in safetensors files. Writes are atomic: a temporary file in the same
//! directory, synced, then renamed over the target, so a crash never leaves a half-written file.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use safetensors::tensor::{Dtype, SafeTensors, View};

use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// A tensor as safetensors sees it: little-endian bytes.
struct Bytes {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl View for &Bytes {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

fn to_bytes(t: &Tensor) -> Bytes {
    macro_rules! le {
        ($t:ty) => {
            t.to_vec::<$t>()
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect()
        };
    }
    let (dtype, data) = match t.dtype() {
        DType::F32 => (Dtype::F32, le!(f32)),
        DType::F64 => (Dtype::F64, le!(f64)),
        DType::I64 => (Dtype::I64, le!(i64)),
    };
    Bytes {
        dtype,
        shape: t.shape().to_vec(),
        data,
    }
}

/// Writes `bytes` to `path` atomically (temporary file + fsync + rename). The temporary file
/// `.{name}.tmp-{pid}-{count}` is unique to this write within the process and is created only
/// if it does not exist (a writer in another PID namespace with the same name gets an error,
/// never a shared file); temporary files for the same target left by writers that died are
/// removed first. A symbolic link is written through: the file it leads to is replaced, and
/// the link stays. A replaced file keeps its permissions (a private `0600` checkpoint stays
/// private).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let target = link_target(path).map_err(io)?;
    let dir = target
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = target
        .file_name()
        .ok_or_else(|| Error::format(path, "not a file path"))?
        .to_string_lossy();
    remove_stale_temps(dir, &name);
    let tmp: PathBuf = dir.join(format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        WRITES.fetch_add(1, Ordering::Relaxed)
    ));
    let kept = std::fs::metadata(&target).ok().map(|m| m.permissions());
    // A read-only file is not replaced behind its owner's back (opening it for writing
    // would fail; the rename would not).
    if kept.as_ref().is_some_and(std::fs::Permissions::readonly) {
        return Err(io(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "the file is read-only",
        )));
    }
    let mut created = false;
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        created = true;
        if let Some(permissions) = kept {
            f.set_permissions(permissions)?;
        }
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &target)
    })();
    if result.is_err() && created {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(io)
}

/// The file that a write to `path` replaces: `path`, or where its chain of symbolic links
/// ends (a file that need not exist yet). Renaming over the link itself would leave its
/// target with the old contents.
fn link_target(path: &Path) -> std::io::Result<PathBuf> {
    // As the kernel's own limit on links followed in one lookup (Linux's ELOOP).
    const MAX_LINKS: usize = 40;
    let mut p = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let next = std::fs::read_link(&p)?;
                // A relative link is relative to the folder that holds it.
                p = p
                    .parent()
                    .map_or_else(|| next.clone(), |dir| dir.join(&next));
            }
            _ => return Ok(p),
        }
    }
    Err(std::io::Error::other(format!(
        "more than {MAX_LINKS} symbolic links in a chain"
    )))
}

/// Removes `.{name}.tmp-{pid}-{count}` files in `dir` whose writing process no longer runs.
/// Only where process liveness can be read (`/proc`); best effort, since a failure here must
/// not stop the save.
fn remove_stale_temps(dir: &Path, name: &str) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let prefix = format!(".{name}.tmp-");
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some((pid, count)) = file
            .to_str()
            .and_then(|f| f.strip_prefix(&prefix))
            .and_then(|rest| rest.split_once('-'))
        else {
            continue;
        };
        let (Ok(pid), Ok(_)) = (pid.parse::<u32>(), count.parse::<u64>()) else {
            continue;
        };
        let alive = pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists();
        if !alive {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The metadata entry that holds the checksum of a file's tensors ([`checksum`]): a file
/// damaged or changed after it was written (flipped bits, an edited header, a tool that
/// rewrites the tensors but copies the metadata) is refused when loaded, not read as other
/// weights. Files without it (PyTorch's) load unchecked.
const CHECKSUM_KEY: &str = "ferrograd.crc32";

/// One tensor as the checksum reads it: its name, dtype, shape and bytes.
type Summed<'a> = (&'a str, Dtype, &'a [usize], &'a [u8]);

/// CRC-32 of the named tensors' names, dtypes, shapes and bytes, in name order, as 8 hex
/// digits.
fn checksum<'a>(tensors: impl Iterator<Item = Summed<'a>>) -> String {
    let mut sorted: Vec<Summed<'a>> = tensors.collect();
    sorted.sort_unstable_by_key(|t| t.0);
    let mut hasher = crc32fast::Hasher::new();
    for (name, dtype, shape, data) in sorted {
        hasher.update(name.as_bytes());
        hasher.update(format!("{dtype:?}{shape:?}").as_bytes());
        hasher.update(&(data.len() as u64).to_le_bytes());
        hasher.update(data);
    }
    format!("{:08x}", hasher.finalize())
}

/// The header key under which a safetensors file keeps its string metadata.
const METADATA_KEY: &str = "__metadata__";

/// Saves named tensors and string metadata to a safetensors file, atomically, with a
/// checksum of the tensors in the metadata (`ferrograd.crc32`, checked and removed when
/// loaded). A tensor named `__metadata__` is refused: the format reserves that name.
pub fn save_tensors(
    path: &Path,
    tensors: &[(String, Tensor)],
    metadata: HashMap<String, String>,
) -> Result<()> {
    // The safetensors header keeps its metadata under this key: a tensor of that name would
    // make the file unreadable.
    if let Some((name, _)) = tensors.iter().find(|(n, _)| n == METADATA_KEY) {
        return Err(Error::format(
            path,
            format!("a tensor cannot be named {name:?}: safetensors reserves it for metadata"),
        ));
    }
    let bytes: Vec<(String, Bytes)> = tensors
        .iter()
        .map(|(n, t)| (n.clone(), to_bytes(t)))
        .collect();
    let mut metadata = metadata;
    let sum = checksum(
        bytes
            .iter()
            .map(|(n, b)| (n.as_str(), b.dtype, b.shape.as_slice(), b.data.as_slice())),
    );
    metadata.insert(CHECKSUM_KEY.to_string(), sum);
    let views = bytes.iter().map(|(n, b)| (n.as_str(), b));
    let encoded = safetensors::serialize(views, &Some(metadata))
        .map_err(|e| Error::format(path, e.to_string()))?;
    write_atomic(path, &encoded)
}

/// Reads every tensor and the metadata of a safetensors file (f32, f64 and i64 tensors only,
/// kept in their dtype).
pub fn load_tensors(path: &Path) -> Result<(HashMap<String, Tensor>, HashMap<String, String>)> {
    converted(read_safetensors(path)?, path)
}

/// [`load_tensors`] of a safetensors file already read into memory; `origin` names it in
/// errors.
pub fn load_tensors_from(
    raw: &[u8],
    origin: &Path,
) -> Result<(HashMap<String, Tensor>, HashMap<String, String>)> {
    converted(parse_safetensors(raw, origin)?, origin)
}

/// The tensors of a parsed file in their dtypes (f32, f64 and i64 only).
fn converted(
    (file, metadata): (HashMap<String, FileTensor>, HashMap<String, String>),
    path: &Path,
) -> Result<(HashMap<String, Tensor>, HashMap<String, String>)> {
    let mut out = HashMap::new();
    for (name, t) in file {
        let dtype = match t.dtype {
            Dtype::F32 => DType::F32,
            Dtype::F64 => DType::F64,
            Dtype::I64 => DType::I64,
            other => {
                return Err(Error::format(
                    path,
                    format!("tensor {name}: unsupported dtype {other:?}"),
                ))
            }
        };
        let value = t
            .to_tensor_exact(dtype)
            .ok_or_else(|| Error::format(path, format!("tensor {name}: malformed data")))?;
        out.insert(name, value);
    }
    Ok((out, metadata))
}

/// A tensor as stored in a safetensors file, any dtype, before conversion.
pub struct FileTensor {
    dtype: Dtype,
    /// The dimensions, outermost first.
    pub shape: Vec<usize>,
    data: Vec<u8>,
}

impl FileTensor {
    /// The stored dtype, lower case (`f16`, `i64`, ...).
    pub fn dtype_name(&self) -> String {
        format!("{:?}", self.dtype).to_lowercase()
    }

    /// `decode` applied to every `N`-byte element, `None` when any is `None`.
    fn decode<const N: usize, V>(&self, decode: impl Fn([u8; N]) -> Option<V>) -> Option<Vec<V>> {
        self.data
            .chunks_exact(N)
            .map(|c| decode(c.try_into().expect("chunk size")))
            .collect()
    }

    /// The values as f64, or `None` for a dtype with no exact f64 form of every value.
    fn values(&self) -> Option<Vec<f64>> {
        // An integer converts when f64 holds it exactly.
        let int = |v: i128| ((v as f64) as i128 == v).then_some(v as f64);
        match self.dtype {
            Dtype::F64 => self.decode(|b| Some(f64::from_le_bytes(b))),
            Dtype::F32 => self.decode(|b| Some(f32::from_le_bytes(b) as f64)),
            Dtype::F16 => self.decode(|b| Some(half::f16::from_le_bytes(b).to_f64())),
            Dtype::BF16 => self.decode(|b| Some(half::bf16::from_le_bytes(b).to_f64())),
            Dtype::BOOL => self.decode(|[b]| Some(f64::from(b != 0))),
            _ => self
                .integers()?
                .into_iter()
                .map(|v| int(v.into()))
                .collect(),
        }
    }

    /// The values as i64, for the integer and bool dtypes (`None` for a u64 above i64's
    /// range, or another dtype).
    fn integers(&self) -> Option<Vec<i64>> {
        match self.dtype {
            Dtype::I64 => self.decode(|b| Some(i64::from_le_bytes(b))),
            Dtype::U64 => self.decode(|b| i64::try_from(u64::from_le_bytes(b)).ok()),
            Dtype::I32 => self.decode(|b| Some(i32::from_le_bytes(b).into())),
            Dtype::U32 => self.decode(|b| Some(u32::from_le_bytes(b).into())),
            Dtype::I16 => self.decode(|b| Some(i16::from_le_bytes(b).into())),
            Dtype::U16 => self.decode(|b| Some(u16::from_le_bytes(b).into())),
            Dtype::I8 => self.decode(|b| Some(i8::from_le_bytes(b).into())),
            Dtype::U8 | Dtype::BOOL => self.decode(|[b]: [u8; 1]| Some(b.into())),
            _ => None,
        }
    }

    /// The tensor in `dtype` when the conversion changes no value (f16, bf16 and integers
    /// into f32 or f64, f32 into f64, f64 values that f32 holds exactly, integers and whole
    /// floats into i64), else `None`.
    pub fn to_tensor_exact(&self, dtype: DType) -> Option<Tensor> {
        if dtype == DType::I64 {
            let ints = match self.integers() {
                Some(ints) => ints,
                None => whole_numbers(self.values()?)?,
            };
            return Tensor::try_from_vec(ints, &self.shape).ok();
        }
        let values = self.values()?;
        let t = match dtype {
            DType::F64 => Tensor::try_from_vec(values, &self.shape).ok()?,
            DType::F32 => {
                let narrow: Option<Vec<f32>> = values
                    .iter()
                    .map(|&v| {
                        let f = v as f32;
                        (f as f64 == v || v.is_nan()).then_some(f)
                    })
                    .collect();
                Tensor::try_from_vec(narrow?, &self.shape).ok()?
            }
            DType::I64 => unreachable!("handled above"),
        };
        Some(t)
    }
}

/// The values as i64 when every one is whole and inside i64's range (2^63 itself is not).
pub(crate) fn whole_numbers(values: impl IntoIterator<Item = f64>) -> Option<Vec<i64>> {
    values
        .into_iter()
        .map(|v| (v == v.trunc() && v.abs() < 9.223_372_036_854_776e18).then_some(v as i64))
        .collect()
}

/// Every tensor of a safetensors file as stored (any dtype), by name.
pub fn load_file_tensors(path: &Path) -> Result<HashMap<String, FileTensor>> {
    read_safetensors(path).map(|(tensors, _)| tensors)
}

/// The tensors (as stored) and the metadata of a safetensors file.
fn read_safetensors(path: &Path) -> Result<(HashMap<String, FileTensor>, HashMap<String, String>)> {
    parse_safetensors(&crate::error::read_regular_file(path)?, path)
}

/// The tensors (as stored) and the metadata of the safetensors bytes `raw` (from `path`).
fn parse_safetensors(
    raw: &[u8],
    path: &Path,
) -> Result<(HashMap<String, FileTensor>, HashMap<String, String>)> {
    let parsed = SafeTensors::deserialize(raw)
        .map_err(|e| Error::format(path, format!("not a valid safetensors file: {e}")))?;
    let (_, meta) =
        SafeTensors::read_metadata(raw).map_err(|e| Error::format(path, e.to_string()))?;
    let tensors = parsed
        .tensors()
        .into_iter()
        .map(|(name, view)| {
            let t = FileTensor {
                dtype: view.dtype(),
                shape: view.shape().to_vec(),
                data: view.data().to_vec(),
            };
            (name, t)
        })
        .collect::<HashMap<String, FileTensor>>();
    let mut metadata = meta.metadata().clone().unwrap_or_default();
    if let Some(stored) = metadata.remove(CHECKSUM_KEY) {
        let found = checksum(
            tensors
                .iter()
                .map(|(n, t)| (n.as_str(), t.dtype, t.shape.as_slice(), t.data.as_slice())),
        );
        if found != stored {
            return Err(Error::format(
                path,
                format!(
                    "the tensors do not match the checksum written with them ({found}, not \
                     {stored}): the file was damaged or changed after it was saved"
                ),
            ));
        }
    }
    Ok((tensors, metadata))
}
