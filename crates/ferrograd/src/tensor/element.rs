//! Element types: the two float dtypes computation runs in, and the integer dtype that holds
//! indices and class labels.

use std::fmt;
use std::sync::Arc;

use crate::kernels::Float;

/// The element type of a tensor.
///
/// `I64` holds indices and labels (what `argmax` returns, what `index_select` and class-index
/// losses take, PyTorch's int64 buffers). It supports creation, conversion (`to_dtype`,
/// `to_vec`), views, `cat`, `index_select`, comparisons and display; arithmetic is done in a
/// float dtype, so a float op given an `I64` tensor panics and says to convert it first, and
/// an `I64` tensor cannot require gradients.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit float (`f32`), the default for layers and parameters.
    F32,
    /// 64-bit float (`f64`), for gradient checks and precision-sensitive work.
    F64,
    /// 64-bit signed integer (`i64`), for indices and labels; no arithmetic or gradients.
    I64,
}

impl DType {
    /// Whether this is a floating-point dtype (one that arithmetic and gradients accept).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64)
    }

    /// The dtype that operands of dtypes `self` and `other` meet in: the one rule every op
    /// that takes several tensors follows (arithmetic, comparisons, `matmul`, convolutions,
    /// `cat`, `stack`, `where_cond`; eager and graph alike). PyTorch's for these dtypes: a
    /// dtype meeting itself stays, an integer meeting a float takes the float's, f32 meeting
    /// f64 takes f64, in either order.
    pub fn promote(self, other: DType) -> DType {
        match (self, other) {
            (x, y) if x == y => x,
            (DType::I64, float) | (float, DType::I64) => float,
            _ => DType::F64,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I64 => "i64",
        })
    }
}

/// Element buffer. Shared and immutable while shared; views share it. A single element is held
/// inline (no allocation): scalars, losses and reductions to one value are common, and a graph
/// of scalar ops would otherwise spend most of its time allocating one-element buffers.
#[derive(Clone, Debug)]
pub enum Storage {
    /// A shared buffer of `f32`.
    F32(Arc<Vec<f32>>),
    /// A shared buffer of `f64`.
    F64(Arc<Vec<f64>>),
    /// A shared buffer of `i64`.
    I64(Arc<Vec<i64>>),
    /// One `f32`, held inline.
    F32One(f32),
    /// One `f64`, held inline.
    F64One(f64),
    /// One `i64`, held inline.
    I64One(i64),
}

impl Storage {
    /// The element type held.
    pub fn dtype(&self) -> DType {
        match self {
            Storage::F32(_) | Storage::F32One(_) => DType::F32,
            Storage::F64(_) | Storage::F64One(_) => DType::F64,
            Storage::I64(_) | Storage::I64One(_) => DType::I64,
        }
    }

    /// Number of elements in the buffer (which views may use only part of).
    pub fn len(&self) -> usize {
        match self {
            Storage::F32(v) => v.len(),
            Storage::F64(v) => v.len(),
            Storage::I64(v) => v.len(),
            Storage::F32One(_) | Storage::F64One(_) | Storage::I64One(_) => 1,
        }
    }

    /// Whether the buffer holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A type a tensor can hold: its dtype, its place in [`Storage`] and its conversions.
pub trait Element: Copy + Send + Sync + fmt::Debug + PartialOrd + 'static {
    /// The [`DType`] of tensors holding this type.
    const DTYPE: DType;
    /// Zero of this type.
    const ZERO: Self;
    /// One of this type.
    const ONE: Self;
    /// Storage owning `v` (inline when it holds one element).
    fn into_storage(v: Vec<Self>) -> Storage;
    /// Storage holding the single element `x` inline.
    fn inline(x: Self) -> Storage;
    /// The elements of `s`; panics when `s` holds another dtype (callers dispatch on dtype
    /// first).
    fn buffer(s: &Storage) -> &[Self];
    /// The elements of `s` for writing, copied first if shared.
    fn buffer_mut(s: &mut Storage) -> &mut [Self];
    /// `v` in this type, as PyTorch casts: rounded to the nearest float, or truncated toward
    /// zero (saturating, NaN to 0) into an integer.
    fn cast_from_f64(v: f64) -> Self;
    /// This value as f64 (exact for f32, and for integers up to 2⁵³ in magnitude).
    fn cast_to_f64(self) -> f64;
}

/// A float [`Element`]: the types arithmetic, kernels and gradients run in.
pub trait FloatElement: Element + Float {}

impl<T: Element + Float> FloatElement for T {}

macro_rules! element {
    ($t:ty, $dtype:ident, $shared:ident, $one:ident, $zero:literal, $unit:literal) => {
        impl Element for $t {
            const DTYPE: DType = DType::$dtype;
            const ZERO: Self = $zero;
            const ONE: Self = $unit;
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
                    _ => wrong_storage(stringify!($t), s),
                }
            }
            fn buffer_mut(s: &mut Storage) -> &mut [Self] {
                match s {
                    Storage::$shared(v) => Arc::make_mut(v).as_mut_slice(),
                    Storage::$one(x) => std::slice::from_mut(x),
                    _ => wrong_storage(stringify!($t), s),
                }
            }
            fn cast_from_f64(v: f64) -> Self {
                v as $t
            }
            fn cast_to_f64(self) -> f64 {
                self as f64
            }
        }
    };
}

fn wrong_storage(expected: &str, s: &Storage) -> ! {
    panic!("internal: expected {expected} storage, found {}", s.dtype())
}

element!(f32, F32, F32, F32One, 0.0, 1.0);
element!(f64, F64, F64, F64One, 0.0, 1.0);
element!(i64, I64, I64, I64One, 0, 1);

/// The message of a float op given an integer tensor.
pub(crate) const INTEGER_IN_FLOAT_OP: &str =
    "an i64 tensor reached an op that computes in floating point; integer tensors hold \
     indices and labels: convert with .to_dtype(DType::F32) (or F64) first";

/// Runs `$body` with `$T` bound to the Rust type of `$dtype` when it is a float, `$int`
/// otherwise (an expression, or `$body` again with `$T = i64`).
macro_rules! dispatch {
    ($dtype:expr, $T:ident => $body:expr, int => $int:expr) => {
        match $dtype {
            $crate::tensor::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::tensor::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::tensor::DType::I64 => $int,
        }
    };
}
pub(crate) use dispatch;

/// Runs `$body` with `$T` bound to the float type of `$dtype`; panics for an integer dtype
/// (float ops: arithmetic, kernels, gradients).
macro_rules! with_dtype {
    ($dtype:expr, $T:ident => $body:expr) => {
        $crate::tensor::dispatch!($dtype, $T => $body, int => {
            panic!("{}", $crate::tensor::INTEGER_IN_FLOAT_OP)
        })
    };
}
pub(crate) use with_dtype;

/// Runs `$body` with `$T` bound to the Rust type of `$dtype`, integers included (moving and
/// converting elements: copies, views, selection, comparison, display).
macro_rules! with_any_dtype {
    ($dtype:expr, $T:ident => $body:expr) => {
        $crate::tensor::dispatch!($dtype, $T => $body, int => {
            type $T = i64;
            $body
        })
    };
}
pub(crate) use with_any_dtype;
