//! Convolution and pooling layers, NCHW, with PyTorch's parameter names, layouts and default
//! initialisation (weight and bias uniform in ±1/√fan_in).

use super::{expect_input, Layer, Mode, Module};
use crate::autograd::Param;
use crate::init;
use crate::ops::conv::ConvOpts;
use crate::tensor::{with_default_rng, DType, Tensor};

/// Weight and optional bias (of `bias` elements) drawn as PyTorch draws them: U(±1/√fan_in),
/// where fan_in is the weight's second axis times the kernel area.
fn conv_params(shape: [usize; 4], bias: Option<usize>) -> (Param, Option<Param>) {
    let fan_in = shape[1] * shape[2] * shape[3];
    let bound = 1.0 / (fan_in.max(1) as f64).sqrt();
    with_default_rng(|rng| {
        let w = init::uniform(&shape, -bound, bound, DType::F32, rng);
        let b = bias.map(|n| Param::new(init::uniform(&[n], -bound, bound, DType::F32, rng)));
        (Param::new(w), b)
    })
}

/// A 2-d convolution layer, forward (`TRANSPOSED = false`, PyTorch's `nn.Conv2d`: `weight`
/// `[out, in/groups, kh, kw]`) or transposed (`TRANSPOSED = true`, `nn.ConvTranspose2d`:
/// `weight` `[in, out/groups, kh, kw]`), with `bias` `[out]`. Use it through the aliases
/// [`Conv2d`] and [`ConvTranspose2d`]. Every size may differ between height and width (the
/// `_hw` forms), as PyTorch's tuples.
pub struct ConvLayer<const TRANSPOSED: bool> {
    in_channels: usize,
    out_channels: usize,
    kernel: [usize; 2],
    opts: ConvOpts,
    /// PyTorch's `padding="same"`: the output keeps the input's size (stride 1).
    same: bool,
    weight: Param,
    bias: Option<Param>,
}

/// 2-D convolution.
///
/// ```
/// use ferrograd::prelude::*;
///
/// let conv = Conv2d::new(1, 8, 3).padding(1);
/// assert_eq!(conv.weight().shape(), vec![8, 1, 3, 3]);
/// let y = Layer::forward(&conv, &Tensor::zeros(&[2, 1, 28, 28], DType::F32), Mode::Eval);
/// assert_eq!(y.shape(), &[2, 8, 28, 28]);
/// ```
pub type Conv2d = ConvLayer<false>;
/// Transposed 2-D convolution.
pub type ConvTranspose2d = ConvLayer<true>;

impl<const TRANSPOSED: bool> ConvLayer<TRANSPOSED> {
    const NAME: &'static str = if TRANSPOSED {
        "ConvTranspose2d"
    } else {
        "Conv2d"
    };

    /// `in_channels → out_channels` with a square `kernel`; stride 1, padding 0, a bias.
    pub fn new(in_channels: usize, out_channels: usize, kernel: usize) -> Self {
        Self::new_hw(in_channels, out_channels, kernel, kernel)
    }

    /// `in_channels → out_channels` with a `kh × kw` kernel (PyTorch's `kernel_size=(kh, kw)`).
    pub fn new_hw(in_channels: usize, out_channels: usize, kh: usize, kw: usize) -> Self {
        let kernel = [kh, kw];
        let shape = Self::weight_shape(in_channels, out_channels, kernel, 1);
        let (weight, bias) = conv_params(shape, Some(out_channels));
        ConvLayer {
            in_channels,
            out_channels,
            kernel,
            opts: ConvOpts::new(),
            same: false,
            weight,
            bias,
        }
    }

    /// The weight's shape for `groups` groups. PyTorch's fan-in is its second axis: the
    /// inputs of a convolution, the outputs of a transposed one.
    fn weight_shape(i: usize, o: usize, [kh, kw]: [usize; 2], groups: usize) -> [usize; 4] {
        if TRANSPOSED {
            [i, o / groups, kh, kw]
        } else {
            [o, i / groups, kh, kw]
        }
    }

    /// Moves the kernel `s` steps at a time (default 1); panics unless positive.
    pub fn stride(self, s: usize) -> Self {
        self.stride_hw(s, s)
    }

    /// Strides along height and width; panics unless positive.
    pub fn stride_hw(mut self, h: usize, w: usize) -> Self {
        assert!(h > 0 && w > 0, "{}: stride must be positive", Self::NAME);
        assert!(
            !self.same || (h, w) == (1, 1),
            "{}: padding \"same\" needs stride 1 (as in PyTorch)",
            Self::NAME
        );
        self.opts = self.opts.stride_hw(h, w);
        self
    }

    /// PyTorch's `padding`, on every side (default 0): `p` zeros around the input of a
    /// convolution; `p` rows and columns trimmed from the output of a transposed one.
    pub fn padding(self, p: usize) -> Self {
        self.padding_hw(p, p)
    }

    /// Paddings along height and width.
    pub fn padding_hw(mut self, h: usize, w: usize) -> Self {
        self.same = false;
        self.opts = self.opts.padding_hw(h, w);
        self
    }

    /// PyTorch's `padding="same"`: zeros so that the output has the input's height and width,
    /// split evenly with any odd one on the bottom and right, as PyTorch does. Needs stride 1;
    /// a forward convolution only.
    pub fn padding_same(mut self) -> Self {
        assert!(
            !TRANSPOSED,
            "{}: padding \"same\" is for forward convolutions",
            Self::NAME
        );
        assert!(
            self.opts.stride == [1, 1],
            "{}: padding \"same\" needs stride 1 (as in PyTorch)",
            Self::NAME
        );
        self.same = true;
        self
    }

    /// Spaces the kernel's taps `d` apart (default 1); panics unless positive.
    pub fn dilation(self, d: usize) -> Self {
        self.dilation_hw(d, d)
    }

    /// Dilations along height and width; panics unless positive.
    pub fn dilation_hw(mut self, h: usize, w: usize) -> Self {
        assert!(h > 0 && w > 0, "{}: dilation must be positive", Self::NAME);
        self.opts = self.opts.dilation_hw(h, w);
        self
    }

    /// Without a bias (PyTorch's `bias=False`).
    pub fn without_bias(mut self) -> Self {
        self.bias = None;
        self
    }

    /// Channels in `groups` separate groups (the weight is drawn again for its new shape).
    pub fn groups(mut self, g: usize) -> Self {
        assert!(
            g > 0 && self.in_channels.is_multiple_of(g) && self.out_channels.is_multiple_of(g),
            "{}: {g} groups do not divide {} inputs and {} outputs",
            Self::NAME,
            self.in_channels,
            self.out_channels
        );
        self.opts = self.opts.groups(g);
        let bias = self.bias.is_some().then_some(self.out_channels);
        (self.weight, self.bias) = conv_params(
            Self::weight_shape(self.in_channels, self.out_channels, self.kernel, g),
            bias,
        );
        self
    }

    /// The weight parameter, in the layout described on the type.
    pub fn weight(&self) -> &Param {
        &self.weight
    }
}

impl ConvLayer<true> {
    /// Extra rows and columns on one side of the output (PyTorch's `output_padding`).
    pub fn output_padding(self, p: usize) -> Self {
        self.output_padding_hw(p, p)
    }

    /// Output paddings along height and width.
    pub fn output_padding_hw(mut self, h: usize, w: usize) -> Self {
        self.opts = self.opts.output_padding_hw(h, w);
        self
    }
}

impl<const TRANSPOSED: bool> Module for ConvLayer<TRANSPOSED> {
    fn params(&self) -> Vec<(String, Param)> {
        let mut out = vec![("weight".to_string(), self.weight.clone())];
        out.extend(self.bias.iter().map(|b| ("bias".to_string(), b.clone())));
        out
    }

    fn name(&self) -> String {
        let [kh, kw] = self.kernel;
        let kernel = if kh == kw {
            kh.to_string()
        } else {
            format!("({kh}, {kw})")
        };
        format!(
            "{}({}, {}, {kernel})",
            Self::NAME,
            self.in_channels,
            self.out_channels
        )
    }
}

impl<const TRANSPOSED: bool> Layer for ConvLayer<TRANSPOSED> {
    fn forward(&self, x: &Tensor, _: Mode) -> Tensor {
        let fits = x.ndim() == 4 && x.shape()[1] == self.in_channels;
        expect_input(
            &self.name(),
            fits,
            &format!("[N, {}, H, W]", self.in_channels),
            x,
        );
        let w = self.weight.tensor();
        let y = if TRANSPOSED {
            x.conv_transpose2d(&w, &self.opts)
        } else if self.same {
            x.conv2d_same(&w, &self.opts)
        } else {
            x.conv2d(&w, &self.opts)
        };
        match &self.bias {
            Some(b) => {
                let b = b.tensor();
                &y + &b.reshape(&[1, b.numel(), 1, 1])
            }
            None => y,
        }
    }
}

macro_rules! pool_layer {
    ($(#[$doc:meta])* $name:ident, $op:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug)]
        pub struct $name {
            kernel: [usize; 2],
            stride: [usize; 2],
            padding: [usize; 2],
        }

        impl $name {
            /// Square windows of `kernel`, `stride` apart, no padding; panics unless both are
            /// positive.
            pub fn new(kernel: usize, stride: usize) -> Self {
                assert!(
                    kernel > 0 && stride > 0,
                    concat!(stringify!($name), ": kernel {} and stride {} must be positive"),
                    kernel,
                    stride
                );
                $name {
                    kernel: [kernel; 2],
                    stride: [stride; 2],
                    padding: [0, 0],
                }
            }

            /// Windows of `h × w` (PyTorch's `kernel_size=(h, w)`); panics unless positive.
            pub fn kernel_hw(mut self, h: usize, w: usize) -> Self {
                assert!(
                    h > 0 && w > 0,
                    concat!(stringify!($name), ": kernel {}x{} must be positive"),
                    h,
                    w
                );
                self.kernel = [h, w];
                self
            }

            /// Strides along height and width; panics unless positive.
            pub fn stride_hw(mut self, h: usize, w: usize) -> Self {
                assert!(
                    h > 0 && w > 0,
                    concat!(stringify!($name), ": stride {}x{} must be positive"),
                    h,
                    w
                );
                self.stride = [h, w];
                self
            }

            /// Pads every side of the input by `p` (default 0; the type says with what).
            pub fn padding(self, p: usize) -> Self {
                self.padding_hw(p, p)
            }

            /// Paddings along height and width.
            pub fn padding_hw(mut self, h: usize, w: usize) -> Self {
                self.padding = [h, w];
                self
            }
        }

        impl Module for $name {
            fn name(&self) -> String {
                let show = |[h, w]: [usize; 2]| {
                    if h == w { h.to_string() } else { format!("({h}, {w})") }
                };
                format!("{}({}, {})", stringify!($name), show(self.kernel), show(self.stride))
            }
        }

        impl Layer for $name {
            fn forward(&self, x: &Tensor, _: Mode) -> Tensor {
                expect_input(&self.name(), x.ndim() == 4, "[N, C, H, W]", x);
                x.$op(self.kernel, self.stride, self.padding)
            }
        }
    };
}

pool_layer!(
    /// Max pooling (PyTorch's `nn.MaxPool2d`, floor mode, padding as −∞).
    ///
    /// ```
    /// use ferrograd::prelude::*;
    ///
    /// let x = Tensor::arange(0.0, 16.0, 1.0, DType::F32).reshape(&[1, 1, 4, 4]);
    /// let y = Layer::forward(&MaxPool2d::new(2, 2), &x, Mode::Eval);
    /// assert_eq!(y.shape(), &[1, 1, 2, 2]);
    /// assert_eq!(y.to_vec::<f32>(), vec![5.0, 7.0, 13.0, 15.0]);
    /// ```
    MaxPool2d,
    max_pool2d_hw
);
pool_layer!(
    /// Average pooling (PyTorch's `nn.AvgPool2d`, floor mode, padding counted).
    AvgPool2d,
    avg_pool2d_hw
);
