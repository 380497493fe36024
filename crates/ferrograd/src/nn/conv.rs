//! Convolution and pooling layers, NCHW, with PyTorch's parameter names, layouts and default
//! initialisation (weight and bias uniform in ±1/√fan_in).

use super::{Layer, Mode, Module};
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

fn named(weight: &Param, bias: &Option<Param>) -> Vec<(String, Param)> {
    let mut out = vec![("weight".to_string(), weight.clone())];
    out.extend(bias.iter().map(|b| ("bias".to_string(), b.clone())));
    out
}

/// `y + bias` with the bias along the channel axis.
fn add_channel_bias(y: Tensor, bias: &Option<Param>) -> Tensor {
    match bias {
        Some(b) => {
            let b = b.tensor();
            &y + &b.reshape(&[1, b.numel(), 1, 1])
        }
        None => y,
    }
}

/// The builder methods both convolution layers share (they hold `opts` and `bias`).
macro_rules! conv_builders {
    () => {
        pub fn stride(mut self, s: usize) -> Self {
            self.opts = self.opts.stride(s);
            self
        }

        pub fn padding(mut self, p: usize) -> Self {
            self.opts = self.opts.padding(p);
            self
        }

        pub fn dilation(mut self, d: usize) -> Self {
            self.opts = self.opts.dilation(d);
            self
        }

        /// Without a bias (PyTorch's `bias=False`).
        pub fn without_bias(mut self) -> Self {
            self.bias = None;
            self
        }
    };
}

/// 2-D convolution (PyTorch's `nn.Conv2d`): `weight` `[out, in/groups, k, k]`, `bias` `[out]`.
pub struct Conv2D {
    in_channels: usize,
    out_channels: usize,
    kernel: usize,
    opts: ConvOpts,
    weight: Param,
    bias: Option<Param>,
}

impl Conv2D {
    /// `in_channels → out_channels` with a square `kernel`; stride 1, padding 0, a bias.
    pub fn new(in_channels: usize, out_channels: usize, kernel: usize) -> Conv2D {
        let shape = [out_channels, in_channels, kernel, kernel];
        let (weight, bias) = conv_params(shape, Some(out_channels));
        Conv2D {
            in_channels,
            out_channels,
            kernel,
            opts: ConvOpts::new(),
            weight,
            bias,
        }
    }

    conv_builders!();

    /// Channels in `groups` separate groups (the weight is drawn again for its new shape).
    pub fn groups(mut self, g: usize) -> Self {
        assert!(
            g > 0 && self.in_channels.is_multiple_of(g) && self.out_channels.is_multiple_of(g),
            "Conv2D: {g} groups do not divide {} inputs and {} outputs",
            self.in_channels,
            self.out_channels
        );
        self.opts = self.opts.groups(g);
        let shape = [
            self.out_channels,
            self.in_channels / g,
            self.kernel,
            self.kernel,
        ];
        let bias = self.bias.is_some().then_some(self.out_channels);
        (self.weight, self.bias) = conv_params(shape, bias);
        self
    }

    pub fn weight(&self) -> &Param {
        &self.weight
    }
}

impl Module for Conv2D {
    fn params(&self) -> Vec<(String, Param)> {
        named(&self.weight, &self.bias)
    }

    fn name(&self) -> String {
        format!(
            "Conv2D({}, {}, {})",
            self.in_channels, self.out_channels, self.kernel
        )
    }
}

impl Layer for Conv2D {
    fn forward(&self, x: &Tensor, _: Mode) -> Tensor {
        assert!(
            x.ndim() == 4 && x.shape()[1] == self.in_channels,
            "{}: expected input [N, {}, H, W], got {:?}",
            self.name(),
            self.in_channels,
            x.shape()
        );
        add_channel_bias(x.conv2d(&self.weight.tensor(), &self.opts), &self.bias)
    }
}

/// Transposed 2-D convolution (PyTorch's `nn.ConvTranspose2d`): `weight`
/// `[in, out/groups, k, k]`, `bias` `[out]`.
pub struct ConvTranspose2D {
    in_channels: usize,
    out_channels: usize,
    kernel: usize,
    opts: ConvOpts,
    weight: Param,
    bias: Option<Param>,
}

impl ConvTranspose2D {
    /// `in_channels → out_channels` with a square `kernel`; stride 1, padding 0, a bias.
    pub fn new(in_channels: usize, out_channels: usize, kernel: usize) -> ConvTranspose2D {
        // PyTorch's fan-in here is the weight's second axis: the output channels.
        let shape = [in_channels, out_channels, kernel, kernel];
        let (weight, bias) = conv_params(shape, Some(out_channels));
        ConvTranspose2D {
            in_channels,
            out_channels,
            kernel,
            opts: ConvOpts::new(),
            weight,
            bias,
        }
    }

    conv_builders!();

    pub fn output_padding(mut self, p: usize) -> Self {
        self.opts = self.opts.output_padding(p);
        self
    }

    /// Channels in `groups` separate groups (the weight is drawn again for its new shape).
    pub fn groups(mut self, g: usize) -> Self {
        assert!(
            g > 0 && self.in_channels.is_multiple_of(g) && self.out_channels.is_multiple_of(g),
            "ConvTranspose2D: {g} groups do not divide {} inputs and {} outputs",
            self.in_channels,
            self.out_channels
        );
        self.opts = self.opts.groups(g);
        let shape = [
            self.in_channels,
            self.out_channels / g,
            self.kernel,
            self.kernel,
        ];
        let bias = self.bias.is_some().then_some(self.out_channels);
        (self.weight, self.bias) = conv_params(shape, bias);
        self
    }
}

impl Module for ConvTranspose2D {
    fn params(&self) -> Vec<(String, Param)> {
        named(&self.weight, &self.bias)
    }

    fn name(&self) -> String {
        format!(
            "ConvTranspose2D({}, {}, {})",
            self.in_channels, self.out_channels, self.kernel
        )
    }
}

impl Layer for ConvTranspose2D {
    fn forward(&self, x: &Tensor, _: Mode) -> Tensor {
        assert!(
            x.ndim() == 4 && x.shape()[1] == self.in_channels,
            "{}: expected input [N, {}, H, W], got {:?}",
            self.name(),
            self.in_channels,
            x.shape()
        );
        add_channel_bias(
            x.conv_transpose2d(&self.weight.tensor(), &self.opts),
            &self.bias,
        )
    }
}

macro_rules! pool_layer {
    ($(#[$doc:meta])* $name:ident, $op:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug)]
        pub struct $name {
            kernel: usize,
            stride: usize,
            padding: usize,
        }

        impl $name {
            /// Square windows of `kernel`, `stride` apart, no padding.
            pub fn new(kernel: usize, stride: usize) -> Self {
                $name {
                    kernel,
                    stride,
                    padding: 0,
                }
            }

            pub fn padding(mut self, p: usize) -> Self {
                self.padding = p;
                self
            }
        }

        impl Module for $name {
            fn name(&self) -> String {
                format!("{}({}, {})", stringify!($name), self.kernel, self.stride)
            }
        }

        impl Layer for $name {
            fn forward(&self, x: &Tensor, _: Mode) -> Tensor {
                assert!(
                    x.ndim() == 4,
                    "{}: expected input [N, C, H, W], got {:?}",
                    self.name(),
                    x.shape()
                );
                x.$op(self.kernel, self.stride, self.padding)
            }
        }
    };
}

pool_layer!(
    /// Max pooling (PyTorch's `nn.MaxPool2d`, floor mode, padding as −∞).
    MaxPool2D,
    max_pool2d
);
pool_layer!(
    /// Average pooling (PyTorch's `nn.AvgPool2d`, floor mode, padding counted).
    AvgPool2D,
    avg_pool2d
);
