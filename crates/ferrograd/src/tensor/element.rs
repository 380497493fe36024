//! Element types: the two float dtypes a tensor can hold.

use std::fmt;
use std::sync::Arc;

use crate::kernels::Float;

/// The element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F64,
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
        })
    }
}

/// Shared, immutable element buffer. Views share it; nothing mutates it while it is shared.
#[derive(Clone, Debug)]
pub enum Storage {
    F32(Arc<Vec<f32>>),
    F64(Arc<Vec<f64>>),
}

impl Storage {
    pub fn dtype(&self) -> DType {
        match self {
            Storage::F32(_) => DType::F32,
            Storage::F64(_) => DType::F64,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Storage::F32(v) => v.len(),
            Storage::F64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A float type a tensor can hold: the kernels' numeric type plus its place in [`Storage`].
pub trait Element: Float {
    const DTYPE: DType;
    fn into_storage(v: Vec<Self>) -> Storage;
    /// The buffer of `s`; panics when `s` holds the other dtype (callers dispatch on dtype first).
    fn buffer(s: &Storage) -> &Arc<Vec<Self>>;
    /// The buffer of `s` for writing, copied first if shared.
    fn buffer_mut(s: &mut Storage) -> &mut Vec<Self>;
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    fn into_storage(v: Vec<Self>) -> Storage {
        Storage::F32(Arc::new(v))
    }
    fn buffer(s: &Storage) -> &Arc<Vec<Self>> {
        match s {
            Storage::F32(v) => v,
            Storage::F64(_) => panic!("internal: expected f32 storage, found f64"),
        }
    }
    fn buffer_mut(s: &mut Storage) -> &mut Vec<Self> {
        match s {
            Storage::F32(v) => Arc::make_mut(v),
            Storage::F64(_) => panic!("internal: expected f32 storage, found f64"),
        }
    }
}

impl Element for f64 {
    const DTYPE: DType = DType::F64;
    fn into_storage(v: Vec<Self>) -> Storage {
        Storage::F64(Arc::new(v))
    }
    fn buffer(s: &Storage) -> &Arc<Vec<Self>> {
        match s {
            Storage::F64(v) => v,
            Storage::F32(_) => panic!("internal: expected f64 storage, found f32"),
        }
    }
    fn buffer_mut(s: &mut Storage) -> &mut Vec<Self> {
        match s {
            Storage::F64(v) => Arc::make_mut(v),
            Storage::F32(_) => panic!("internal: expected f64 storage, found f32"),
        }
    }
}

/// Runs `$body` with `$T` bound to the Rust type of `$dtype`.
macro_rules! with_dtype {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            $crate::tensor::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::tensor::DType::F64 => {
                type $T = f64;
                $body
            }
        }
    };
}
pub(crate) use with_dtype;
