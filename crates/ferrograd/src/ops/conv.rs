//! 2-D convolution, its transpose and its weight gradient, NCHW with PyTorch's semantics and
//! weight layouts. The three are bilinear and each one's derivatives are the other two, so one
//! pair of kernels (im2col and col2im around the matrix product) serves forward, backward and
//! every higher order:
//!
//! - `y = conv2d(x, w)`: `dx = conv_transpose2d(dy, w)`, `dw = conv2d_weight(x, dy)`
//! - `z = conv_transpose2d(u, w)`: `du = conv2d(dz, w)`, `dw = conv2d_weight(dz, u)`
//! - `v = conv2d_weight(x, dy)`: `dx = conv_transpose2d(dy, dv)`, `d(dy) = conv2d(x, dv)`
//!
//! In f32 on an AVX path (AVX2 or AVX-512) all three skip the column matrix where their shapes allow: over
//! channels-last copies where the output rows are short and the channels many (a DCGAN's
//! 7×7 and 14×14 maps, the transposed convolution split by output phase:
//! `kernels/channels_last.rs`), and otherwise reading the image in place for the convolution,
//! its weight gradient and the stride-1 transposed convolution (`kernels/implicit_conv.rs`).
//! f64, groups and the other strided transposed convolutions keep im2col and col2im, or a
//! direct kernel where the channels are few. [`Algo`] is the one place that chooses.

use crate::tensor::trace::{self, attrs};
use std::ops::Range;

use smallvec::smallvec;

use super::binary_promote;
use super::dtype::{eager_dtype_or_panic, floats_rule};
use super::shape::{eager_or_panic, known, numel, same, show, Rule};
use crate::kernels::channels_last as cl;
use crate::kernels::conv::{self as kc, col2im, im2col, Geom};
use crate::kernels::implicit_conv as ki;
use crate::kernels::matmul::{gemm_batch_append, MatRef};
use crate::kernels::parallel::{for_each_chunk, run_tasks_with};
use crate::tensor::{filled, numel_or_panic, record, with_dtype, FloatElement, Tensor};

/// Stride, padding, dilation, groups and (for the transposed convolution) output padding.
/// Builders take `self` by value; every value applies to both spatial axes unless set per
/// axis with the `_hw` forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvOpts {
    /// Step between applications of the kernel, `[height, width]`; positive.
    pub stride: [usize; 2],
    /// Implicit zeros on both sides of each spatial axis, `[height, width]`.
    pub padding: [usize; 2],
    /// Spacing between kernel taps, `[height, width]`; positive.
    pub dilation: [usize; 2],
    /// Number of channel groups convolved separately; positive, and must divide both channel
    /// counts.
    pub groups: usize,
    /// Extra size on one side of a transposed convolution's output, `[height, width]`;
    /// ignored by the forward convolution.
    pub output_padding: [usize; 2],
}

impl Default for ConvOpts {
    fn default() -> Self {
        ConvOpts {
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
            output_padding: [0, 0],
        }
    }
}

/// A setter of one value for both spatial axes (`name`) and one of a value per axis
/// (`name_hw`).
macro_rules! per_axis {
    ($(#[$doc:meta])* $field:ident, $hw:ident) => {
        $(#[$doc])*
        /// The same for height and width.
        pub fn $field(self, v: usize) -> Self {
            self.$hw(v, v)
        }

        $(#[$doc])*
        /// Height's and width's.
        pub fn $hw(mut self, h: usize, w: usize) -> Self {
            self.$field = [h, w];
            self
        }
    };
}

impl ConvOpts {
    /// Stride 1, padding 0, dilation 1, groups 1, output padding 0.
    pub fn new() -> Self {
        Self::default()
    }
    per_axis!(
        /// Step between applications of the kernel.
        stride, stride_hw
    );
    per_axis!(
        /// Implicit zeros on both sides of each spatial axis.
        padding, padding_hw
    );
    per_axis!(
        /// Spacing between kernel taps.
        dilation, dilation_hw
    );
    per_axis!(
        /// Extra size on one side of a transposed convolution's output.
        output_padding, output_padding_hw
    );

    /// Channels split into `g` groups convolved separately.
    pub fn groups(mut self, g: usize) -> Self {
        self.groups = g;
        self
    }

    /// The convolution's geometry from input `h × w` with kernel `kh × kw`; panics naming
    /// `op` when the options are invalid or the kernel does not fit.
    fn geom(&self, op: &str, (h, w): (usize, usize), (kh, kw): (usize, usize)) -> Geom {
        assert!(
            self.stride.iter().chain(&self.dilation).all(|&v| v > 0) && self.groups > 0,
            "{op}: stride, dilation and groups must be positive, got {self:?}"
        );
        let out = |i: usize, n: usize, k: usize| {
            let geometry = (self.stride[i], self.padding[i], self.dilation[i]);
            conv_size(n, k, geometry, None)
        };
        let (ho, wo) = match (out(0, h, kh), out(1, w, kw)) {
            // The plane must fit too; batch and channels multiply it when the output is built.
            (Some(ho), Some(wo)) if kh > 0 && kw > 0 && ho.checked_mul(wo).is_some() => (ho, wo),
            _ => panic!("{op}: a {kh}x{kw} kernel with {self:?} does not fit an input of {h}x{w}"),
        };
        Geom {
            h,
            w,
            kh,
            kw,
            sh: self.stride[0],
            sw: self.stride[1],
            ph: self.padding[0],
            pw: self.padding[1],
            dh: self.dilation[0],
            dw: self.dilation[1],
            ho,
            wo,
        }
    }
}

/// `t` cut to `like`'s last two sizes (a convolution's output to the part a gradient covers).
fn crop(t: &Tensor, like: &Tensor) -> Tensor {
    let (h, w) = (like.shape()[2], like.shape()[3]);
    if (t.shape()[2], t.shape()[3]) == (h, w) {
        return t.clone();
    }
    t.narrow(2, 0, h).narrow(3, 0, w)
}

/// `[a, b, c, d]` of a 4-D tensor, or a panic naming `op` and `what`.
fn dims4(op: &str, what: &str, t: &Tensor) -> [usize; 4] {
    match t.shape() {
        &[a, b, c, d] => [a, b, c, d],
        s => panic!("{op}: {what} must be 4-D, got shape {s:?}"),
    }
}

/// Panics naming `op` when an operand is an integer tensor: a convolution computes in floating
/// point, and an integer input is refused (as PyTorch does) rather than promoted.
fn floats(op: &str, x: &Tensor, w: &Tensor) {
    eager_dtype_or_panic(
        op,
        floats_rule(&[("input", x.dtype()), ("weight", w.dtype())]),
    );
}

impl Tensor {
    /// `conv2d` with PyTorch's `padding="same"`: the output keeps the input's height and
    /// width. Each axis takes `dilation · (k − 1)` zeros, split evenly with an odd one on the
    /// bottom and right, as PyTorch splits them. `opts`' padding is ignored; its stride must
    /// be 1.
    pub fn conv2d_same(&self, w: &Tensor, opts: &ConvOpts) -> Tensor {
        let _profiled = crate::tensor::profile::scope("conv2d_same");
        trace::op("Conv2dSame", attrs![*opts], &[self, w], || {
            self.conv2d_same_untraced(w, opts)
        })
    }

    fn conv2d_same_untraced(&self, w: &Tensor, opts: &ConvOpts) -> Tensor {
        assert!(
            opts.stride == [1, 1],
            "conv2d: padding \"same\" needs stride 1, got {:?} (as in PyTorch)",
            opts.stride
        );
        assert!(
            w.ndim() == 4,
            "conv2d: the weight must be [O, C/groups, kh, kw], got {:?}",
            w.shape()
        );
        let total = [0, 1].map(|a| opts.dilation[a] * w.shape()[2 + a].saturating_sub(1));
        let extra = total.map(|t| t % 2);
        let x = if extra == [0, 0] || self.ndim() != 4 {
            self.clone()
        } else {
            self.pad(&[(0, 0), (0, 0), (0, extra[0]), (0, extra[1])], 0.0)
        };
        x.conv2d(w, &opts.padding_hw(total[0] / 2, total[1] / 2))
    }

    /// 2-D cross-correlation (PyTorch's `conv2d`): `self` `[N, C, H, W]`, `w`
    /// `[O, C/groups, kh, kw]`; the result is `[N, O, Ho, Wo]`. Bias is added separately.
    pub fn conv2d(&self, w: &Tensor, opts: &ConvOpts) -> Tensor {
        let _profiled = crate::tensor::profile::scope("conv2d");
        trace::op("Conv2d", attrs![*opts], &[self, w], || {
            self.conv2d_untraced(w, opts)
        })
    }

    fn conv2d_untraced(&self, w: &Tensor, opts: &ConvOpts) -> Tensor {
        floats("conv2d", self, w);
        let (x, w) = binary_promote(self, w);
        let rule = conv_rule(&known(x.shape()), &known(w.shape()), opts, false);
        eager_or_panic("conv2d", rule);
        let [n, c, h, wd] = dims4("conv2d", "input", &x);
        let [o, _, kh, kw] = dims4("conv2d", "weight", &w);
        let g = opts.geom("conv2d", (h, wd), (kh, kw));
        let sizes = Sizes::new(&g, opts.groups, [n, c, o]);
        let out = with_dtype!(x.dtype(), T => conv_forward::<T>(&x, &w, &sizes));
        let per_output = [c / opts.groups.max(1), kh, kw];
        crate::tensor::profile::note_product_flops([out.numel()].into_iter().chain(per_output));
        let opts = *opts;
        record("conv2d", out, &[&x, &w], move |c, up| {
            let (x, w) = (c.input(0), c.input(1));
            let size = (x.shape()[2], x.shape()[3]);
            smallvec![
                c.needs(0).then(|| input_gradient(up, w, &opts, size)),
                c.needs(1)
                    .then(|| x.conv2d_weight(up, (w.shape()[2], w.shape()[3]), &opts)),
            ]
        })
    }

    /// The transposed convolution (PyTorch's `conv_transpose2d`, the adjoint of `conv2d`):
    /// `self` `[N, Cin, H, W]`, `w` `[Cin, Cout/groups, kh, kw]`; the output size is
    /// `(H − 1)·stride − 2·padding + dilation·(k − 1) + output_padding + 1`.
    pub fn conv_transpose2d(&self, w: &Tensor, opts: &ConvOpts) -> Tensor {
        let _profiled = crate::tensor::profile::scope("conv_transpose2d");
        trace::op("ConvTranspose2d", attrs![*opts], &[self, w], || {
            self.conv_transpose2d_untraced(w, opts)
        })
    }

    fn conv_transpose2d_untraced(&self, w: &Tensor, opts: &ConvOpts) -> Tensor {
        floats("conv_transpose2d", self, w);
        let rule = conv_rule(&known(self.shape()), &known(w.shape()), opts, true);
        let out = eager_or_panic("conv_transpose2d", rule);
        let (oh, ow) = (out[2], out[3]);
        // Each input element meets Cout/groups · kh · kw weights.
        let per_input = w.shape()[1..].iter().copied();
        crate::tensor::profile::note_product_flops([self.numel()].into_iter().chain(per_input));
        self.conv_transpose2d_to(w, opts, (oh, ow))
    }

    /// The transposed convolution with an explicit output size `(H, W)`: the input size of
    /// the convolution it is the adjoint of (several sizes share one output under a stride).
    pub(crate) fn conv_transpose2d_to(
        &self,
        w: &Tensor,
        opts: &ConvOpts,
        out: (usize, usize),
    ) -> Tensor {
        let (u, w) = binary_promote(self, w);
        let [n, cin, hi, wi] = dims4("conv_transpose2d", "input", &u);
        let [wc, cog, kh, kw] = dims4("conv_transpose2d", "weight", &w);
        let groups = opts.groups;
        assert!(
            groups > 0 && wc == cin && cin.is_multiple_of(groups),
            "conv_transpose2d: input {:?} and weight {:?} ([Cin, Cout/groups, kh, kw]) do not \
             fit {groups} group(s)",
            u.shape(),
            w.shape()
        );
        let mut g = opts.geom("conv_transpose2d", out, (kh, kw));
        // An output padding of a stride or more (allowed below the dilation) makes an output
        // whose convolution is larger than the input: the extra positions receive nothing.
        assert!(
            g.ho >= hi && g.wo >= wi,
            "conv_transpose2d: an output of {}x{} does not convolve back to the input's {hi}x{wi}",
            out.0,
            out.1
        );
        (g.ho, g.wo) = (hi, wi);
        let sizes = Sizes::new(&g, groups, [n, cog * groups, cin]);
        let y = with_dtype!(u.dtype(), T => conv_t_forward::<T>(&u, &w, &sizes));
        let opts = *opts;
        record("conv_transpose2d", y, &[&u, &w], move |c, up| {
            let (u, w) = (c.input(0), c.input(1));
            smallvec![
                c.needs(0).then(|| crop(&up.conv2d(w, &opts), u)),
                c.needs(1)
                    .then(|| up.conv2d_weight(u, (w.shape()[2], w.shape()[3]), &opts)),
            ]
        })
    }

    /// The weight gradient of `conv2d(self, w)` for an upstream gradient `dy`:
    /// `[O, C/groups, kh, kw]` with `O` from `dy` `[N, O, Ho, Wo]`. Bilinear in `self` and
    /// `dy`, and differentiable again.
    pub fn conv2d_weight(&self, dy: &Tensor, (kh, kw): (usize, usize), opts: &ConvOpts) -> Tensor {
        let _profiled = crate::tensor::profile::scope("conv2d_weight");
        trace::op("Conv2dWeight", attrs![(kh, kw), *opts], &[self, dy], || {
            self.conv2d_weight_untraced(dy, (kh, kw), opts)
        })
    }

    fn conv2d_weight_untraced(
        &self,
        dy: &Tensor,
        (kh, kw): (usize, usize),
        opts: &ConvOpts,
    ) -> Tensor {
        let operands = [("input", self.dtype()), ("output gradient", dy.dtype())];
        eager_dtype_or_panic("conv2d_weight", floats_rule(&operands));
        let (x, dy) = binary_promote(self, dy);
        let rule = conv_weight_rule(&known(x.shape()), &known(dy.shape()), (kh, kw), opts);
        eager_or_panic("conv2d_weight", rule);
        let [n, c, h, wd] = dims4("conv2d_weight", "input", &x);
        let [_, o, ho, wo] = dims4("conv2d_weight", "output gradient", &dy);
        let groups = opts.groups;
        // `dy` may cover only the first rows and columns of the convolution's output (the
        // transposed convolution's output padding): the rest count as zero.
        let mut g = opts.geom("conv2d_weight", (h, wd), (kh, kw));
        (g.ho, g.wo) = (ho, wo);
        let sizes = Sizes::new(&g, groups, [n, c, o]);
        let v = with_dtype!(x.dtype(), T => conv_weight::<T>(&x, &dy, &sizes));
        let opts = *opts;
        record("conv2d_weight", v, &[&x, &dy], move |c, up| {
            let (x, dy) = (c.input(0), c.input(1));
            let size = (x.shape()[2], x.shape()[3]);
            smallvec![
                c.needs(0).then(|| dy.conv_transpose2d_to(up, &opts, size)),
                c.needs(1).then(|| crop(&x.conv2d(up, &opts), dy)),
            ]
        })
    }
}

/// How a convolution, its transpose or its weight gradient runs. Chosen here and only here,
/// from what each kernel can run (`cl::applies`, `ki::implicit_applies`, which ask for f32
/// and an AVX path) and where each was measured fastest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Algo {
    /// Over channels-last copies of the images (`kernels/channels_last.rs`).
    ChannelsLast,
    /// Products reading the padded image in place (`kernels/implicit_conv.rs`); for the
    /// transpose, the convolution of the flipped geometry.
    Implicit,
    /// The direct kernel, a vector of output channels per tap (`kernels/conv.rs`); for the
    /// transpose, the convolution of the flipped geometry.
    Direct,
    /// im2col (or col2im) around the matrix product: any dtype, groups, geometry.
    Columns,
}

impl Algo {
    /// For `conv2d` of geometry `g` from `c` to `o` channels.
    fn conv<T: FloatElement>(g: &Geom, groups: usize, c: usize, o: usize) -> Algo {
        if groups == 1 && cl::applies::<T>(g, c, o) {
            Algo::ChannelsLast
        } else if groups == 1 && ki::implicit_applies::<T>(g, c) {
            Algo::Implicit
        } else if direct_wins(g, groups, c * g.taps(), o) {
            Algo::Direct
        } else {
            Algo::Columns
        }
    }

    /// For `conv_transpose2d` of (forward) geometry `g` from `cin` to `cout` channels, with
    /// the flipped geometry that `Implicit` and `Direct` run.
    fn transposed<T: FloatElement>(
        g: &Geom,
        groups: usize,
        cin: usize,
        cout: usize,
    ) -> (Algo, Option<Geom>) {
        if groups == 1 && cl::applies::<T>(g, cout, cin) {
            return (Algo::ChannelsLast, None);
        }
        // With a stride of 1 the transposed convolution is a convolution by the flipped kernel.
        if let Some(f) = flipped(g).filter(|_| groups == 1) {
            if ki::implicit_applies::<T>(&f, cin) {
                return (Algo::Implicit, Some(f));
            }
            // At most 8 outputs (an input gradient of a layer with few input channels) fill
            // only half a vector of the direct kernel: the column matrix measured faster
            // there (LeNet's 8→16 5×5).
            if cout > 8 && direct_wins(g, groups, cin * g.taps(), cout) && small_copy(&f) {
                return (Algo::Direct, Some(f));
            }
        }
        (Algo::Columns, None)
    }

    /// For `conv2d_weight` of geometry `g` from `c` to `o` channels.
    fn weight<T: FloatElement>(g: &Geom, groups: usize, c: usize, o: usize) -> Algo {
        let k = c / groups.max(1) * g.taps();
        match Algo::conv::<T>(g, groups, c, o) {
            // The direct weight gradient wins only where the column matrix is thin (a product
            // with an inner size of a few dozen); with more rows im2col and the product are
            // faster.
            Algo::Direct if k > DIRECT_WEIGHT_MAX_ROWS => Algo::Columns,
            algo => algo,
        }
    }
}

/// Whether the direct kernel beats im2col and the product for a convolution with `k` rows of
/// column matrix (`C·kh·kw`) and `o` output channels: few rows make a column matrix that is
/// mostly copies of the input and a product too thin to run at speed.
fn direct_wins(g: &Geom, groups: usize, k: usize, o: usize) -> bool {
    // The kernel copies each image with its padding: keep that copy within the reach of the
    // kernel, so that a huge padding (legal, if odd) cannot make it huge.
    let padding_in_reach = g.ph <= g.dh * (g.kh - 1) && g.pw <= g.dw * (g.kw - 1);
    groups == 1 && k * o <= DIRECT_MAX_WORK && o >= 4 && padding_in_reach && small_copy(g)
}

/// Whether a padded copy of an image stays within a few times the image: a huge dilation
/// allows a huge padding "within the kernel's reach" (dilation 2^40 and padding 2^40 give a
/// 5×5 output from a 5×5 image), whose copy would be mostly zeros and larger than memory.
fn small_copy(g: &Geom) -> bool {
    let side = |n: usize, p: usize| p.checked_mul(2).and_then(|p| p.checked_add(n));
    let copy = side(g.h, g.ph).zip(side(g.w, g.pw));
    let image = g.h.saturating_mul(g.w);
    copy.and_then(|(h, w)| h.checked_mul(w))
        .is_some_and(|c| c <= image.saturating_mul(16).saturating_add(1 << 16))
}

const DIRECT_MAX_WORK: usize = 1 << 12;

/// Rows of column matrix (`C·kh·kw`) up to which the weight gradient runs direct.
const DIRECT_WEIGHT_MAX_ROWS: usize = 64;

/// The geometry of the plain convolution that equals the transposed convolution of `g` (the
/// forward geometry: `g.ho × g.wo` in, `g.h × g.w` out) by the flipped kernel, channels
/// swapped, when there is one: stride 1 and a padding the flipped kernel can take.
fn flipped(g: &Geom) -> Option<Geom> {
    let reach = (g.dh * (g.kh - 1), g.dw * (g.kw - 1));
    let fits = g.sh == 1
        && g.sw == 1
        && reach.0 >= g.ph
        && reach.1 >= g.pw
        && g.ho + reach.0 == g.h + 2 * g.ph
        && g.wo + reach.1 == g.w + 2 * g.pw;
    fits.then(|| Geom {
        h: g.ho,
        w: g.wo,
        ph: reach.0 - g.ph,
        pw: reach.1 - g.pw,
        ho: g.h,
        wo: g.w,
        ..*g
    })
}

/// The convolution weight `[Cout, Cin·taps]` equal to a transposed convolution's `w`
/// (`[Cin, Cout, kh, kw]`) under [`flipped`]: channels swapped, taps reversed.
fn flipped_weight<T: FloatElement>(w: &[T], cin: usize, cout: usize, taps: usize) -> Vec<T> {
    let mut wf = vec![T::zero(); cout * cin * taps];
    for (ci, filters) in w.chunks_exact((cout * taps).max(1)).enumerate() {
        for (oc, filter) in filters.chunks_exact(taps.max(1)).enumerate() {
            for (tap, &v) in filter.iter().enumerate() {
                wf[(oc * cin + ci) * taps + taps - 1 - tap] = v;
            }
        }
    }
    wf
}

/// The direct kernel's convolution with weight `w` `[O, K]` (K = C·kh·kw): the weight
/// transposed to `[K, O']`, O' a whole number of the kernel's blocks, so that each tap is one
/// vector operation over a block of outputs.
fn direct_conv<T: FloatElement>(x: &[T], c: usize, g: &Geom, w: &[T], o: usize, out: &mut [T]) {
    let (k, stride) = (c * g.taps(), kc::direct_width(o));
    let mut wt = vec![T::zero(); k * stride];
    for (oc, filter) in w.chunks_exact(k.max(1)).enumerate() {
        for (tap, &v) in filter.iter().enumerate() {
            wt[tap * stride + oc] = v;
        }
    }
    kc::direct_conv(x, c, g, &wt, o, out);
}

/// Images per chunk of column matrices: enough for the products to be large and the threads
/// busy, few enough that the one reused buffer (about 16 MiB of f32) stays in the allocator's
/// hands instead of being mapped and faulted in on every call.
fn chunk_images(per_image: usize) -> usize {
    ((1usize << 22) / per_image.max(1)).max(1)
}

/// Channels `ch0..ch0 + chans` of images `images` of a `[N, channels, plane]` buffer, side by
/// side: `[chans, images·plane]` into `dst` (reused).
fn side_by_side<T: FloatElement>(
    src: &[T],
    images: &Range<usize>,
    (channels, ch0, chans): (usize, usize, usize),
    plane: usize,
    dst: &mut Vec<T>,
) {
    let count = images.len();
    dst.resize(chans * count * plane, T::zero());
    for (ci, row) in dst.chunks_exact_mut((count * plane).max(1)).enumerate() {
        for (m, seg) in row.chunks_exact_mut(plane.max(1)).enumerate() {
            let at = ((images.start + m) * channels + ch0 + ci) * plane;
            seg.copy_from_slice(&src[at..at + plane]);
        }
    }
}

/// The inverse of [`side_by_side`]: `[chans, images·plane]` written back into channels
/// `ch0..` of a `[N, channels, plane]` buffer.
fn unside<T: FloatElement>(
    src: &[T],
    images: &Range<usize>,
    (channels, ch0, chans): (usize, usize, usize),
    plane: usize,
    dst: &mut [T],
) {
    let count = images.len();
    for (ci, row) in src
        .chunks_exact((count * plane).max(1))
        .take(chans)
        .enumerate()
    {
        for (m, seg) in row.chunks_exact(plane.max(1)).enumerate() {
            let at = ((images.start + m) * channels + ch0 + ci) * plane;
            dst[at..at + plane].copy_from_slice(seg);
        }
    }
}

/// The column matrix of group `grp` of `images` of `x` (`[N, C, H, W]`), images side by side:
/// `[C/groups · kh · kw, images · Ho · Wo]` into `cols` (reused).
fn columns<T: FloatElement>(
    x: &[T],
    g: &Geom,
    (c, cg, grp): (usize, usize, usize),
    images: &Range<usize>,
    cols: &mut Vec<T>,
) {
    let hw = g.h * g.w;
    cols.resize(cg * g.taps() * images.len() * g.ho * g.wo, T::zero());
    let plane_of = |m: usize, ci: usize| {
        let at = ((images.start + m) * c + grp * cg + ci) * hw;
        &x[at..at + hw]
    };
    im2col(plane_of, images.len(), g, cols);
}

/// A row-major `rows × cols` matrix at `offset` in `data`.
fn mat<T>(data: &[T], offset: usize, rows: usize, cols: usize) -> MatRef<'_, T> {
    MatRef {
        data,
        offset,
        rows,
        cols,
        rs: cols,
        cs: 1,
    }
}

/// The transpose of the row-major `rows × cols` matrix at `offset`, read in place.
fn mat_t<T>(data: &[T], offset: usize, rows: usize, cols: usize) -> MatRef<'_, T> {
    MatRef {
        data,
        offset,
        rows: cols,
        cols: rows,
        rs: 1,
        cs: cols,
    }
}

/// The chunks of images to process together, for column matrices of `per_image` elements.
fn chunks(n: usize, per_image: usize) -> impl Iterator<Item = Range<usize>> {
    let step = chunk_images(per_image);
    (0..n).step_by(step).map(move |n0| n0..(n0 + step).min(n))
}

/// The sizes of one convolution, seen from its forward pass (`conv2d`: images `[n, c, h, w]`
/// to `[n, o, ho, wo]`); its transpose and weight gradient use the same sizes.
#[derive(Clone, Copy)]
struct Sizes<'a> {
    g: &'a Geom,
    groups: usize,
    n: usize,
    /// Image channels (`conv2d`'s input, the transposed convolution's output).
    c: usize,
    /// Filter channels (`conv2d`'s output, the transposed convolution's input).
    o: usize,
}

impl Sizes<'_> {
    fn new(g: &Geom, groups: usize, [n, c, o]: [usize; 3]) -> Sizes<'_> {
        Sizes { g, groups, n, c, o }
    }

    /// Image and filter channels per group, rows of one column matrix (`c/groups · taps`)
    /// and output positions per plane.
    fn per_group(&self) -> (usize, usize, usize, usize) {
        let cg = self.c / self.groups;
        (
            cg,
            self.o / self.groups,
            cg * self.g.taps(),
            self.g.ho * self.g.wo,
        )
    }
}

/// `y[:, group] = W_group @ cols[group]`, each chunk of images in one product whose columns
/// run over every image (small images make wide products, not many narrow ones).
fn conv_forward<T: FloatElement>(x: &Tensor, w: &Tensor, s: &Sizes<'_>) -> Tensor {
    let (xd, wd) = (x.contiguous_data::<T>(), w.contiguous_data::<T>());
    let Sizes { g, groups, n, c, o } = *s;
    let mut out = filled(
        "conv2d",
        numel_or_panic("conv2d", &[n, o, g.ho, g.wo]),
        T::zero(),
    );
    match Algo::conv::<T>(g, groups, c, o) {
        Algo::ChannelsLast => cl::conv(&xd, c, g, &wd, o, &mut out),
        Algo::Implicit => ki::implicit_conv(&xd, c, g, &wd, o, &mut out),
        Algo::Direct => direct_conv(&xd, c, g, &wd, o, &mut out),
        Algo::Columns => columns_conv((&xd, &wd), s, &mut out),
    }
    Tensor::from_data(out, &[n, o, g.ho, g.wo])
}

/// [`conv_forward`] through im2col and the product, per chunk of images and group.
fn columns_conv<T: FloatElement>((xd, wd): (&[T], &[T]), s: &Sizes<'_>, out: &mut [T]) {
    let (Sizes { g, groups, n, c, o }, (cg, og, k, plane)) = (*s, s.per_group());
    let (mut cols, mut y) = (Vec::new(), Vec::new());
    for images in chunks(n, k * plane) {
        for grp in 0..groups {
            columns(xd, g, (c, cg, grp), &images, &mut cols);
            let wide = images.len() * plane;
            let pair = (mat(wd, grp * og * k, og, k), mat(&cols, 0, k, wide));
            y.clear();
            gemm_batch_append(&[pair], og, wide, &mut y);
            unside(&y, &images, (o, grp * og, og), plane, out);
        }
    }
}

/// `y[:, group] = col2im(W_groupᵀ @ u[:, group])`, `y` of the geometry's input size.
fn conv_t_forward<T: FloatElement>(u: &Tensor, w: &Tensor, s: &Sizes<'_>) -> Tensor {
    let (ud, wd) = (u.contiguous_data::<T>(), w.contiguous_data::<T>());
    let Sizes {
        g,
        groups,
        n,
        c: cout,
        o: cin,
    } = *s;
    let mut out = filled(
        "conv_transpose2d",
        numel_or_panic("conv_transpose2d", &[n, cout, g.h, g.w]),
        T::zero(),
    );
    // An empty output (an empty batch) may still have planes far beyond any memory: the
    // column paths below size their chunks by the plane and would overflow for nothing.
    if out.is_empty() {
        return Tensor::from_data(out, &[n, cout, g.h, g.w]);
    }
    match Algo::transposed::<T>(g, groups, cin, cout) {
        (Algo::ChannelsLast, _) => cl::conv_transpose(&ud, cin, g, &wd, cout, &mut out),
        (algo @ (Algo::Implicit | Algo::Direct), Some(f)) => {
            let wf = flipped_weight(&wd, cin, cout, g.taps());
            if algo == Algo::Implicit {
                ki::implicit_conv(&ud, cin, &f, &wf, cout, &mut out);
            } else {
                direct_conv(&ud, cin, &f, &wf, cout, &mut out);
            }
        }
        _ => columns_conv_t((&ud, &wd), s, &mut out),
    }
    Tensor::from_data(out, &[n, cout, g.h, g.w])
}

/// [`conv_t_forward`] through the product and col2im.
fn columns_conv_t<T: FloatElement>((ud, wd): (&[T], &[T]), s: &Sizes<'_>, out: &mut [T]) {
    let (Sizes { g, n, c: cout, .. }, (_, _, k, plane)) = (*s, s.per_group());
    let hw = g.h * g.w;
    let per_image = k * plane;
    if per_image <= COLS_IN_CACHE {
        // Chunks small enough that the column matrix col2im reads back is still in the
        // cache (and enough of them for the threads), each on its own thread from product to
        // col2im.
        let threads = crate::kernels::parallel::threads();
        let per = (COLS_IN_CACHE / per_image.max(1)).clamp(1, (n / threads).max(1));
        let chunks = out.chunks_mut((per * cout * hw).max(1)).enumerate();
        run_tasks_with(chunks.collect(), |(us, cols), (chunk, out)| {
            let images = chunk * per..(chunk * per + per).min(n);
            conv_t_chunk((ud, wd, us, cols), s, &images, out, false);
        });
    } else {
        // Larger images: one column matrix at a time (each thread holding its own would
        // multiply the memory), the product and col2im threaded inside.
        let (mut us, mut cols) = (Vec::new(), Vec::new());
        for images in chunks(n, per_image) {
            let out = &mut out[images.start * cout * hw..images.end * cout * hw];
            conv_t_chunk((ud, wd, &mut us, &mut cols), s, &images, out, true);
        }
    }
}

/// One chunk of images of the transposed convolution through im2col's adjoint: per group,
/// the product `W_groupᵀ @ u` (a column matrix) and col2im into `out`, the chunk's images
/// (`spread`: their col2im in parallel).
fn conv_t_chunk<T: FloatElement>(
    (ud, wd, us, cols): (&[T], &[T], &mut Vec<T>, &mut Vec<T>),
    s: &Sizes<'_>,
    images: &Range<usize>,
    out: &mut [T],
    spread: bool,
) {
    let (
        Sizes {
            g, groups, c, o, ..
        },
        (cog, cig, k, plane),
    ) = (*s, s.per_group());
    let (count, hw) = (images.len(), g.h * g.w);
    for grp in 0..groups {
        side_by_side(ud, images, (o, grp * cig, cig), plane, us);
        // W_group is [cig, k] row-major; its transpose is read in place.
        let pair = (
            mat_t(wd, grp * cig * k, cig, k),
            mat(us, 0, cig, count * plane),
        );
        cols.clear();
        gemm_batch_append(&[pair], k, count * plane, cols);
        let add = |m: usize, img: &mut [T]| {
            col2im(
                cols,
                count,
                m,
                g,
                &mut img[grp * cog * hw..(grp + 1) * cog * hw],
            );
        };
        if spread {
            for_each_chunk(out, c * hw, add);
        } else {
            out.chunks_mut((c * hw).max(1))
                .enumerate()
                .for_each(|(m, img)| add(m, img));
        }
    }
}

/// Floats of column matrix per chunk of the transposed convolution: 1 MiB, about one
/// core's L2.
const COLS_IN_CACHE: usize = 1 << 18;

/// `v[group] = dy[:, group] @ cols[group]ᵀ` summed over the images, as `[O, C/groups, kh, kw]`.
fn conv_weight<T: FloatElement>(x: &Tensor, dy: &Tensor, s: &Sizes<'_>) -> Tensor {
    let (xd, dyd) = (x.contiguous_data::<T>(), dy.contiguous_data::<T>());
    let (
        Sizes {
            g, groups, c, o, ..
        },
        (cg, _, k, _),
    ) = (*s, s.per_group());
    let sum = match Algo::weight::<T>(g, groups, c, o) {
        Algo::ChannelsLast => cl::conv_weight(&xd, &dyd, c, g, o),
        Algo::Implicit => ki::implicit_conv_weight(&xd, &dyd, c, g, o),
        Algo::Direct => {
            let per_tap = kc::direct_conv_weight(&xd, &dyd, c, g, o);
            let stride = kc::direct_width(o);
            let mut sum = vec![T::zero(); o * k];
            for (oc, filter) in sum.chunks_exact_mut(k.max(1)).enumerate() {
                for (tap, v) in filter.iter_mut().enumerate() {
                    *v = per_tap[tap * stride + oc];
                }
            }
            sum
        }
        Algo::Columns => columns_conv_weight((&xd, &dyd), s),
    };
    Tensor::from_data(sum, &[o, cg, g.kh, g.kw])
}

/// [`conv_weight`] through im2col and the product, summed over chunks of images.
fn columns_conv_weight<T: FloatElement>((xd, dyd): (&[T], &[T]), s: &Sizes<'_>) -> Vec<T> {
    let (Sizes { g, groups, n, c, o }, (cg, og, k, plane)) = (*s, s.per_group());
    let mut sum = vec![T::zero(); o * k];
    let (mut cols, mut dys, mut block) = (Vec::new(), Vec::new(), Vec::new());
    for images in chunks(n, k * plane) {
        let wide = images.len() * plane;
        for grp in 0..groups {
            columns(xd, g, (c, cg, grp), &images, &mut cols);
            side_by_side(dyd, &images, (o, grp * og, og), plane, &mut dys);
            let pair = (mat(&dys, 0, og, wide), mat_t(&cols, 0, k, wide));
            block.clear();
            gemm_batch_append(&[pair], og, k, &mut block);
            for (d, &v) in sum[grp * og * k..(grp + 1) * og * k].iter_mut().zip(&block) {
                *d += v;
            }
        }
    }
    sum
}

// The convolutions' shape rules, which the static graph's inference shares (see `ops::shape`).

/// PyTorch's output size along one axis of `n` with a `k`-wide kernel: of the convolution, or
/// with `output_padding` of its transpose. `None` when the kernel does not fit, no output
/// remains or the arithmetic overflows.
fn conv_size(
    n: usize,
    k: usize,
    (s, p, d): (usize, usize, usize),
    output_padding: Option<usize>,
) -> Option<usize> {
    let span = d.checked_mul(k.checked_sub(1)?)?.checked_add(1)?;
    let two_p = p.checked_mul(2)?;
    match output_padding {
        None => Some(n.checked_add(two_p)?.checked_sub(span)? / s + 1),
        Some(op) => (n.checked_sub(1)?.checked_mul(s)?)
            .checked_add(span)?
            .checked_add(op)?
            .checked_sub(two_p)
            .filter(|&v| v > 0),
    }
}

/// `Err` unless stride, dilation, groups and the kernel's known sizes are positive (and a
/// transposed convolution's output padding is below the stride or the dilation).
fn check_conv_opts(kernel: &[Option<usize>], o: &ConvOpts, transposed: bool) -> Result<(), String> {
    let positive = o.groups > 0
        && o.stride.iter().chain(&o.dilation).all(|&v| v > 0)
        && kernel.iter().all(|&k| k != Some(0));
    let output_padding_fits =
        !transposed || (0..2).all(|i| o.output_padding[i] < o.stride[i].max(o.dilation[i]));
    if !positive || !output_padding_fits {
        return Err(format!(
            "stride, dilation, groups and kernel must be positive (and a transposed \
             convolution's output padding below the stride or the dilation), got {o:?} and \
             kernel {}",
            show(kernel)
        ));
    }
    Ok(())
}

/// A convolution of `x` `[N, C, H, W]` by `w` (`[O, C/groups, kh, kw]`), or its transpose
/// (`w` `[C, O/groups, kh, kw]`), with PyTorch's size formulas; the output plane must be
/// addressable even for an empty batch.
pub(crate) fn conv_rule(
    x: &[Option<usize>],
    w: &[Option<usize>],
    o: &ConvOpts,
    transposed: bool,
) -> Rule {
    if x.len() != 4 || w.len() != 4 {
        return Err(format!(
            "input must be [N, C, H, W] and the weight 4-D, got {} and {}",
            show(x),
            show(w)
        ));
    }
    check_conv_opts(&w[2..], o, transposed)?;
    let g = o.groups;
    let grouped = w[1].map(|c| c.checked_mul(g).ok_or("the channel count overflows"));
    let grouped = grouped.transpose()?;
    let (c_in, c_out) = if transposed {
        (w[0], grouped)
    } else {
        (grouped, w[0])
    };
    let divides = |c: Option<usize>| c.is_none_or(|c| c.is_multiple_of(g));
    if !same(x[1], c_in) || !divides(c_in) || !divides(c_out) {
        return Err(format!(
            "input {} and weight {} do not fit {g} group(s)",
            show(x),
            show(w)
        ));
    }
    let size = |i: usize| -> Result<Option<usize>, String> {
        let (Some(n), Some(k)) = (x[2 + i], w[2 + i]) else {
            return Ok(None);
        };
        let geometry = (o.stride[i], o.padding[i], o.dilation[i]);
        let output_padding = transposed.then_some(o.output_padding[i]);
        conv_size(n, k, geometry, output_padding)
            .map(Some)
            .ok_or_else(|| {
                format!(
                    "a {k}-wide kernel with {o:?} does not fit an input of {}",
                    show(x)
                )
            })
    };
    let out = vec![x[0], c_out, size(0)?, size(1)?];
    numel(&out[2..])?;
    numel(&out)?;
    Ok(out)
}

/// The weight gradient of a convolution of `x` `[N, C, H, W]` for an output gradient `dy`
/// `[N, O, Ho, Wo]`: `[O, C/groups, kh, kw]`. `dy` may cover only the first rows and columns
/// of the convolution's output (a transposed convolution's output padding).
pub(crate) fn conv_weight_rule(
    x: &[Option<usize>],
    dy: &[Option<usize>],
    (kh, kw): (usize, usize),
    o: &ConvOpts,
) -> Rule {
    if x.len() != 4 || dy.len() != 4 {
        return Err(format!(
            "input and output gradient must be [N, C, H, W], got {} and {}",
            show(x),
            show(dy)
        ));
    }
    let kernel = [Some(kh), Some(kw)];
    check_conv_opts(&kernel, o, false)?;
    let g = o.groups;
    let divides = |c: Option<usize>| c.is_none_or(|c| c.is_multiple_of(g));
    if !same(x[0], dy[0]) || !divides(x[1]) || !divides(dy[1]) {
        return Err(format!(
            "input {} and output gradient {} do not fit {g} group(s)",
            show(x),
            show(dy)
        ));
    }
    for (i, k) in [kh, kw].into_iter().enumerate() {
        let Some(n) = x[2 + i] else { continue };
        let geometry = (o.stride[i], o.padding[i], o.dilation[i]);
        let full = conv_size(n, k, geometry, None);
        if full.is_none() || dy[2 + i].is_some_and(|m| full.is_some_and(|full| m > full)) {
            return Err(format!(
                "output gradient {} does not match the convolution of {} by a {kh}x{kw} kernel",
                show(dy),
                show(x)
            ));
        }
    }
    Ok(vec![dy[1], x[1].map(|c| c / g), Some(kh), Some(kw)])
}

/// `conv2d`'s input gradient: `up` transposed-convolved back to the input's `size`. Where an
/// output padding below the stride or the dilation makes up the rows and columns the stride
/// left over, it is the traced `conv_transpose2d` with that padding (so a traced backward
/// records it); otherwise the same kernel with the size given.
fn input_gradient(up: &Tensor, w: &Tensor, opts: &ConvOpts, size: (usize, usize)) -> Tensor {
    let extra = |i: usize, n: usize, k: usize, target: usize| {
        let natural = (n as i128 - 1) * opts.stride[i] as i128
            + (opts.dilation[i] * k.saturating_sub(1)) as i128
            + 1
            - 2 * opts.padding[i] as i128;
        let extra = target as i128 - natural;
        let limit = opts.stride[i].max(opts.dilation[i]) as i128;
        (0..limit).contains(&extra).then_some(extra as usize)
    };
    let (us, ws) = (up.shape(), w.shape());
    let padded = (us.len() == 4 && ws.len() == 4).then(|| {
        (
            extra(0, us[2], ws[2], size.0),
            extra(1, us[3], ws[3], size.1),
        )
    });
    if let Some((Some(h), Some(wd))) = padded {
        let opts = ConvOpts {
            output_padding: [h, wd],
            ..*opts
        };
        // The transposed convolution's own rule must give the input's size.
        let rule = conv_rule(&known(us), &known(ws), &opts, true);
        if rule.is_ok_and(|s| s[2..] == [Some(size.0), Some(size.1)]) {
            return up.conv_transpose2d(w, &opts);
        }
    }
    up.conv_transpose2d_to(w, opts, size)
}
