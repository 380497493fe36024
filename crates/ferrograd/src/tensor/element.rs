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

/// Element buffer. Shared and immutable while shared; views share it. A single element is held
/// inline (no allocation): scalars, losses and reductions to one value are common, and a graph
/// of scalar ops would otherwise spend most of its time allocating one-element buffers.
#[derive(Clone, Debug)]
pub enum Storage {
    F32(Arc<Vec<f32>>),
    F64(Arc<Vec<f64>>),
    F32One(f32),
    F64One(f64),
}

impl Storage {
    pub fn dtype(&self) -> DType {
        match self {
            Storage::F32(_) | Storage::F32One(_) => DType::F32,
            Storage::F64(_) | Storage::F64One(_) => DType::F64,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Storage::F32(v) => v.len(),
            Storage::F64(v) => v.len(),
            Storage::F32One(_) | Storage::F64One(_) => 1,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A float type a tensor can hold: the kernels' numeric type plus its place in [`Storage`].
pub trait Element: Float {
    const DTYPE: DType;
    /// Storage owning `v` (inline when it holds one element).
    fn into_storage(v: Vec<Self>) -> Storage;
    /// Storage holding the single element `x` inline.
    fn inline(x: Self) -> Storage;
    /// The elements of `s`; panics when `s` holds the other dtype (callers dispatch on dtype
    /// first).
    fn buffer(s: &Storage) -> &[Self];
    /// The elements of `s` for writing, copied first if shared.
    fn buffer_mut(s: &mut Storage) -> &mut [Self];
}

macro_rules! element {
    ($t:ty, $dtype:ident, $shared:ident, $one:ident, $other:literal) => {
        impl Element for $t {
            const DTYPE: DType = DType::$dtype;
            fn into_storage(v: Vec<Self>) -> Storage {
                match v.as_slice() {
                    [x] => Storage::$one(*x),
                    _ => Storage::$shared(Arc::new(v)),
                }
            }
            fn inline(x: Self) -> Storage {
                Storage::$one(x)
            }
            fn buffer(s: &Storage) -> &[Self] {
                match s {
                    Storage::$shared(v) => v.as_slice(),
                    Storage::$one(x) => std::slice::from_ref(x),
                    _ => panic!(concat!(
                        "internal: expected ",
                        stringify!($t),
                        " storage, found ",
                        $other
                    )),
                }
            }
            fn buffer_mut(s: &mut Storage) -> &mut [Self] {
                match s {
                    Storage::$shared(v) => Arc::make_mut(v).as_mut_slice(),
                    Storage::$one(x) => std::slice::from_mut(x),
                    _ => panic!(concat!(
                        "internal: expected ",
                        stringify!($t),
                        " storage, found ",
                        $other
                    )),
                }
            }
        }
    };
}

element!(f32, F32, F32, F32One, "f64");
element!(f64, F64, F64, F64One, "f32");

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
