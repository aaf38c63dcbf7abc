//! Convolution, pooling and padding, PyTorch's `F.conv2d`, `F.max_pool2d`, `F.pad` and friends.
//!
//! Every op here is a gather through a constant index map followed by ops that already exist
//! (a batched matmul for convolution, a max or mean over the window for pooling). The map
//! depends only on shapes and options, so it is built once on the host, uploaded once per
//! device and cached: a forward pass uploads nothing after its first call, and never reads
//! back. Gradients come from the ops used (the gather's backward is a deterministic
//! `index_add`, which is col2im), so every op runs forward and backward on every device the
//! gather and matmul run on. Positions outside the input read one extra element appended to
//! each image (0 for convolution, -inf for max pooling, the fill value for constant padding).

use super::dispatch;
use crate::error::{check_rank, invalid, mismatch};
use crate::ops::geometry::Geom;
use crate::{DType, Device, Error, Result, Tensor};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Options of [`Tensor::conv2d`], PyTorch's `stride`, `padding`, `dilation` and `groups`
/// (`[height, width]` pairs; [`Conv2dOptions::default`] is stride 1, no padding, dilation 1,
/// one group).
///
/// ```
/// use wgtensor::Conv2dOptions;
/// let o = Conv2dOptions::default().stride(2).padding(1);
/// assert_eq!((o.stride, o.padding, o.dilation, o.groups), ([2, 2], [1, 1], [1, 1], 1));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dOptions {
    /// Step between windows, `[height, width]`.
    pub stride: [usize; 2],
    /// Zeros added on each side, `[height, width]`.
    pub padding: [usize; 2],
    /// Spacing between kernel taps, `[height, width]`.
    pub dilation: [usize; 2],
    /// Input and output channels split into this many independent groups.
    pub groups: usize,
}

impl Default for Conv2dOptions {
    fn default() -> Self {
        Conv2dOptions {
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
        }
    }
}

impl Conv2dOptions {
    /// The same stride along both dims.
    ///
    /// ```
    /// assert_eq!(wgtensor::Conv2dOptions::default().stride(3).stride, [3, 3]);
    /// ```
    pub fn stride(mut self, s: usize) -> Self {
        self.stride = [s, s];
        self
    }
    /// The same padding along both dims.
    ///
    /// ```
    /// assert_eq!(wgtensor::Conv2dOptions::default().padding(1).padding, [1, 1]);
    /// ```
    pub fn padding(mut self, p: usize) -> Self {
        self.padding = [p, p];
        self
    }
    /// The same dilation along both dims.
    ///
    /// ```
    /// assert_eq!(wgtensor::Conv2dOptions::default().dilation(2).dilation, [2, 2]);
    /// ```
    pub fn dilation(mut self, d: usize) -> Self {
        self.dilation = [d, d];
        self
    }
    /// The number of groups (`groups = channels` is a depthwise convolution).
    ///
    /// ```
    /// assert_eq!(wgtensor::Conv2dOptions::default().groups(4).groups, 4);
    /// ```
    pub fn groups(mut self, g: usize) -> Self {
        self.groups = g;
        self
    }
}

/// Index maps and pooling matrices by device, dtype and shape. Bounded: cleared when full, as
/// a model cycles through a handful of shapes.
type ConstCache = Mutex<HashMap<String, Tensor>>;
static CONSTS: OnceLock<ConstCache> = OnceLock::new();
const CONST_CACHE_ENTRIES: usize = 256;

fn cached(device: &Device, key: String, make: impl FnOnce() -> Result<Tensor>) -> Result<Tensor> {
    let key = format!("{device}|{key}");
    let cache = CONSTS.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(t) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(t.clone());
    }
    // Built outside the lock: an upload can wait on the device.
    let t = make()?;
    let mut c = cache.lock().unwrap_or_else(|p| p.into_inner());
    if c.len() >= CONST_CACHE_ENTRIES {
        c.clear();
    }
    c.insert(key, t.clone());
    Ok(t)
}

/// A u32 index map on `device`, cached under `key`.
pub(super) fn index_map(
    device: &Device,
    key: String,
    make: impl FnOnce() -> Result<Vec<u32>>,
) -> Result<Tensor> {
    cached(device, key, || {
        let v = make()?;
        let n = v.len();
        Tensor::from_vec(v, &[n], device)
    })
}

/// `x2d` is `[batch, per]`; returns `[batch, map.len()]` with `out[b, i] = x2d[b, map[i]]`,
/// where index `per` reads `fill`.
pub(super) fn gather_with_fill(x2d: &Tensor, fill: f32, map: &Tensor) -> Result<Tensor> {
    if x2d.dtype() == DType::F16 {
        // The gather moves f32 words: f16 data goes through it widened (exact both ways,
        // and differentiable), and comes back as f16.
        return gather_with_fill(&x2d.to_dtype(DType::F32)?, fill, map)?.to_dtype(DType::F16);
    }
    let b = x2d.shape()[0];
    let filler = Tensor::full(&[b, 1], fill as f64, x2d.dtype(), x2d.device())?;
    let padded = Tensor::cat(&[x2d, &filler], 1)?;
    padded.index_select(1, map)
}

/// Output size of a window sweep, or an error naming the numbers.
fn out_len(
    op: &'static str,
    what: &str,
    size: usize,
    k: usize,
    s: usize,
    p: usize,
    d: usize,
) -> Result<usize> {
    if k == 0 || s == 0 || d == 0 {
        return Err(invalid(
            op,
            format!("{what}: kernel {k}, stride {s} and dilation {d} must all be at least 1"),
        ));
    }
    // Checked (debug and release alike): absurd kernels, dilations or paddings are a typed
    // error, never a wrapped length.
    let overflow = || Error::ShapeOverflow {
        shape: vec![size, k, s, p, d],
    };
    let span = d
        .checked_mul(k - 1)
        .and_then(|v| v.checked_add(1))
        .ok_or_else(overflow)?;
    let padded = p
        .checked_mul(2)
        .and_then(|v| v.checked_add(size))
        .ok_or_else(overflow)?;
    if padded < span {
        return Err(invalid(
            op,
            format!(
                "{what}: the input is {size} long with padding {p} on each side, shorter than \
                 the kernel's span {span} (kernel {k}, dilation {d}); pad more or use a smaller \
                 kernel"
            ),
        ));
    }
    Ok((padded - span) / s + 1)
}

/// A float 4-d (or unbatched 3-d) input as `[n, c, h, w]`, and whether it was unbatched.
fn as_4d(op: &'static str, x: &Tensor) -> Result<(Tensor, bool)> {
    if !x.dtype().is_float() {
        return Err(x.unsupported(op));
    }
    match x.ndim() {
        4 => Ok((x.clone(), false)),
        3 => Ok((x.unsqueeze(0)?, true)),
        n => Err(invalid(
            op,
            format!(
                "expects a [N, C, H, W] (or unbatched [C, H, W]) input, got {n} dims {:?}",
                x.shape()
            ),
        )),
    }
}

fn restore(out: Tensor, unbatched: bool) -> Result<Tensor> {
    if unbatched {
        out.squeeze(0)
    } else {
        Ok(out)
    }
}

/// Window geometry shared by convolution and pooling.
#[derive(Clone, Copy, Debug)]
struct Window {
    c: usize,
    h: usize,
    w: usize,
    k: [usize; 2],
    s: [usize; 2],
    p: [usize; 2],
    d: [usize; 2],
    out: [usize; 2],
}

impl Window {
    /// The kernels' geometry of these windows over `n` images with `o` output channels in `g`
    /// groups (max pooling: `o = g = c`).
    fn geom(&self, n: usize, o: usize, g: usize) -> Geom {
        let Window {
            c,
            h,
            w,
            k,
            s,
            p,
            d,
            out,
        } = *self;
        Geom {
            n,
            c,
            h,
            w,
            o,
            g,
            k,
            s,
            p,
            d,
            out,
        }
    }

    fn new(
        op: &'static str,
        [c, h, w]: [usize; 3],
        k: [usize; 2],
        s: [usize; 2],
        p: [usize; 2],
        d: [usize; 2],
    ) -> Result<Window> {
        let oh = out_len(op, "height", h, k[0], s[0], p[0], d[0])?;
        let ow = out_len(op, "width", w, k[1], s[1], p[1], d[1])?;
        // The index maps hold u32 offsets into one image, plus `c * h * w` for the padding:
        // an image of 2^32 - 1 elements or more cannot be addressed (a typed error, never a
        // truncated offset), and the map's own length must not overflow.
        let image = c.checked_mul(h).and_then(|v| v.checked_mul(w));
        let map_len = [c, k[0], k[1], oh, ow]
            .iter()
            .try_fold(1usize, |acc, &v| acc.checked_mul(v));
        if image.is_none_or(|n| u32::try_from(n).is_err() || n == u32::MAX as usize)
            || map_len.is_none()
        {
            return Err(Error::ShapeOverflow {
                shape: vec![c, h, w, k[0], k[1], oh, ow],
            });
        }
        Ok(Window {
            c,
            h,
            w,
            k,
            s,
            p,
            d,
            out: [oh, ow],
        })
    }

    fn key(&self) -> String {
        format!("{:?}", self)
    }

    /// For output position `(oy, ox)` and tap `(i, j)`: the input offset within one channel,
    /// or `None` in the padding.
    fn tap(&self, oy: usize, ox: usize, i: usize, j: usize) -> Option<usize> {
        let y = (oy * self.s[0] + i * self.d[0]).checked_sub(self.p[0])?;
        let x = (ox * self.s[1] + j * self.d[1]).checked_sub(self.p[1])?;
        (y < self.h && x < self.w).then_some(y * self.w + x)
    }

    /// im2col order `[c, ki, kj, oy, ox]`: rows are (channel, tap), columns output positions.
    fn conv_map(&self) -> Vec<u32> {
        let (hw, fill) = (self.h * self.w, (self.c * self.h * self.w) as u32);
        let [oh, ow] = self.out;
        let mut v = Vec::with_capacity(self.c * self.k[0] * self.k[1] * oh * ow);
        for c in 0..self.c {
            for i in 0..self.k[0] {
                for j in 0..self.k[1] {
                    for oy in 0..oh {
                        for ox in 0..ow {
                            v.push(self.tap(oy, ox, i, j).map_or(fill, |t| (c * hw + t) as u32));
                        }
                    }
                }
            }
        }
        v
    }

    /// Pooling order `[c, oy, ox, ki, kj]`, so the window is the last dim. With `flat` the
    /// entries index the whole image (for the gather); without, the offset within the channel
    /// (PyTorch's max-pooling indices; padding never wins a max, so its entries are 0).
    fn pool_map(&self, flat: bool) -> Vec<u32> {
        let (hw, fill) = (self.h * self.w, (self.c * self.h * self.w) as u32);
        let [oh, ow] = self.out;
        let mut v = Vec::with_capacity(self.c * oh * ow * self.k[0] * self.k[1]);
        for c in 0..self.c {
            for oy in 0..oh {
                for ox in 0..ow {
                    for i in 0..self.k[0] {
                        for j in 0..self.k[1] {
                            v.push(match (self.tap(oy, ox, i, j), flat) {
                                (Some(t), true) => (c * hw + t) as u32,
                                (None, true) => fill,
                                (Some(t), false) => t as u32,
                                (None, false) => 0,
                            });
                        }
                    }
                }
            }
        }
        v
    }

    /// The input's windows, `[n, c, oh, ow, kh * kw]`, padding read as `fill`.
    fn windows(&self, x: &Tensor, fill: f32) -> Result<Tensor> {
        let n = x.shape()[0];
        let map = index_map(x.device(), format!("pool{}", self.key()), || {
            Ok(self.pool_map(true))
        })?;
        let x2d = x.reshape(&[n, self.c * self.h * self.w])?;
        let cols = gather_with_fill(&x2d, fill, &map)?;
        cols.reshape(&[n, self.c, self.out[0], self.out[1], self.k[0] * self.k[1]])
    }
}

fn pool_check(op: &'static str, k: [usize; 2], p: [usize; 2]) -> Result<()> {
    if p[0] * 2 > k[0] || p[1] * 2 > k[1] {
        return Err(invalid(
            op,
            format!(
                "padding {p:?} must be at most half the kernel {k:?} (as in PyTorch: a window \
                 of padding alone has no input)"
            ),
        ));
    }
    Ok(())
}

/// `stride` defaults to the kernel size, as in PyTorch.
fn pool_stride(k: [usize; 2], stride: Option<[usize; 2]>) -> [usize; 2] {
    stride.unwrap_or(k)
}

impl Tensor {
    /// 2-d convolution (cross-correlation), PyTorch's `F.conv2d(input, weight, bias, stride,
    /// padding, dilation, groups)`.
    ///
    /// `self` is `[N, C, H, W]` (or unbatched `[C, H, W]`), `weight` is `[O, C / groups, kH, kW]`
    /// and `bias` is `[O]`; the result is `[N, O, H', W']` with
    /// `H' = (H + 2 * padding - dilation * (kH - 1) - 1) / stride + 1`. On a GPU (f32) one
    /// implicit-GEMM kernel reads the windows in place, with no im2col matrix; f16, shapes past
    /// its index range and a weight that needs its gradient (which reuses the im2col matrix)
    /// take an im2col gather through a cached index map and the tuned batched matmul. On the CPU (f32) each image is
    /// unfolded a block of output rows at a time straight into the gemm crate's kernels, and
    /// both gradients run the same way. A 1x1 kernel with stride 1 and no padding is a matmul.
    /// Gradients flow to the input, the weight and the bias.
    ///
    /// ```
    /// use wgtensor::{Conv2dOptions, Device, Tensor};
    /// let d = Device::best();
    /// let x = Tensor::arange(0.0, 16.0, 1.0, &d)?.reshape(&[1, 1, 4, 4])?;
    /// let w = Tensor::ones(&[1, 1, 3, 3], wgtensor::DType::F32, &d)?;
    /// let y = x.conv2d(&w, None, &Conv2dOptions::default())?;
    /// assert_eq!(y.shape(), &[1, 1, 2, 2]);
    /// assert_eq!(y.to_vec::<f32>()?, vec![45.0, 54.0, 81.0, 90.0]);
    /// let same = x.conv2d(&w, None, &Conv2dOptions::default().padding(1))?;
    /// assert_eq!(same.shape(), &[1, 1, 4, 4]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the sizes when the ranks, channel counts, groups or
    /// kernel span do not fit; [`Error::UnsupportedDType`] for integer inputs; the device,
    /// dtype and GPU errors of every op.
    pub fn conv2d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        opts: &Conv2dOptions,
    ) -> Result<Tensor> {
        let op = "conv2d";
        let (x, unbatched) = as_4d(op, self)?;
        let layout = "[out_channels, in_channels / groups, kH, kW]";
        check_rank(op, "weight", weight.shape(), 4, layout)?;
        let &[n, c, h, w] = x.shape() else {
            unreachable!()
        };
        let &[o, cg, kh, kw] = weight.shape() else {
            unreachable!()
        };
        let g = opts.groups;
        if g == 0 || c % g != 0 || o % g != 0 || cg.checked_mul(g) != Some(c) {
            return Err(invalid(
                op,
                format!(
                    "input has {c} channels and weight {:?} (out {o}, in-per-group {cg}) with \
                     groups {g}: need groups >= 1 dividing both channel counts and \
                     weight.shape[1] * groups == input channels",
                    weight.shape()
                ),
            ));
        }
        if let Some(b) = bias {
            if b.shape() != [o] {
                return Err(mismatch(op, &[o], b.shape()));
            }
        }
        let win = Window::new(
            op,
            [c, h, w],
            [kh, kw],
            opts.stride,
            opts.padding,
            opts.dilation,
        )?;
        let [oh, ow] = win.out;
        let (l, kk) = (oh * ow, cg * kh * kw);
        let pointwise = kh == 1 && kw == 1 && win.s == [1, 1] && win.p == [0, 0];
        let geo = win.geom(n, o, g);
        if !pointwise && x.conv2d_on_cpu(weight) && Tensor::conv2d_bias_on_cpu(bias) {
            return restore(x.conv2d_cpu(weight, bias, geo)?, unbatched);
        }
        if !pointwise {
            // The implicit GEMM when it applies; its backward builds the index map on demand.
            let dev = x.device().clone();
            let map: super::conv_gpu::MapFn = Arc::new(move || {
                index_map(&dev, format!("conv{}", win.key()), || Ok(win.conv_map()))
            });
            if let Some(out) = x.conv2d_implicit(weight, bias, geo, map)? {
                return restore(out, unbatched);
            }
        }
        let cols = if pointwise {
            x.reshape(&[n, g, cg, h * w])?
        } else {
            let map = index_map(x.device(), format!("conv{}", win.key()), || {
                Ok(win.conv_map())
            })?;
            let x2d = x.reshape(&[n, c * h * w])?;
            gather_with_fill(&x2d, 0.0, &map)?.reshape(&[n, g, kk, l])?
        };
        let wm = weight.reshape(&[g, o / g, kk])?;
        let mut out = wm.matmul(&cols)?.reshape(&[n, o, oh, ow])?;
        if let Some(b) = bias {
            out = out.add(&b.reshape(&[1, o, 1, 1])?)?;
        }
        restore(out, unbatched)
    }

    /// 1-d convolution, PyTorch's `F.conv1d`: `self` is `[N, C, L]` (or `[C, L]`), `weight`
    /// `[O, C / groups, K]`; the options' second (width) entries apply.
    ///
    /// ```
    /// use wgtensor::{Conv2dOptions, Device, Tensor};
    /// let d = Device::best();
    /// let x = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[1, 1, 4], &d)?;
    /// let w = Tensor::from_vec(vec![1f32, -1.0], &[1, 1, 2], &d)?;
    /// let y = x.conv1d(&w, None, &Conv2dOptions::default())?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![-1.0, -1.0, -1.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::conv2d`].
    pub fn conv1d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        opts: &Conv2dOptions,
    ) -> Result<Tensor> {
        let op = "conv1d";
        let (x, unbatched) = match self.ndim() {
            3 => (self.clone(), false),
            2 => (self.unsqueeze(0)?, true),
            n => {
                return Err(invalid(
                    op,
                    format!(
                        "expects [N, C, L] or [C, L], got {n} dims {:?}",
                        self.shape()
                    ),
                ))
            }
        };
        check_rank(op, "weight", weight.shape(), 3, "[out, in / groups, K]")?;
        let o2 = Conv2dOptions {
            stride: [1, opts.stride[1]],
            padding: [0, opts.padding[1]],
            dilation: [1, opts.dilation[1]],
            groups: opts.groups,
        };
        let y = x
            .unsqueeze(2)?
            .conv2d(&weight.unsqueeze(2)?, bias, &o2)?
            .squeeze(2)?;
        if unbatched {
            y.squeeze(0)
        } else {
            Ok(y)
        }
    }

    /// 2-d max pooling, PyTorch's `F.max_pool2d(input, kernel_size, stride, padding)`:
    /// `stride` defaults to the kernel; padding reads as -inf and must be at most half the
    /// kernel. The gradient goes to the first maximum of each window, as PyTorch's does.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let x = Tensor::arange(0.0, 16.0, 1.0, &Device::best())?.reshape(&[1, 1, 4, 4])?;
    /// let y = x.max_pool2d([2, 2], None, [0, 0])?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![5.0, 7.0, 13.0, 15.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::conv2d`], and [`Error::InvalidArgument`] for padding above half the kernel.
    pub fn max_pool2d(
        &self,
        kernel: [usize; 2],
        stride: Option<[usize; 2]>,
        padding: [usize; 2],
    ) -> Result<Tensor> {
        Ok(self.max_pool(kernel, stride, padding, false)?.0)
    }

    /// [`Tensor::max_pool2d`] that also returns where each maximum came from: a u32 tensor of
    /// the output's shape holding offsets within each `H x W` plane (PyTorch's
    /// `return_indices=True`, `F.max_unpool2d`'s input).
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![1f32, 9.0, 3.0, 4.0], &[1, 1, 2, 2], &Device::best())?;
    /// let (v, i) = x.max_pool2d_with_indices([2, 2], None, [0, 0])?;
    /// assert_eq!((v.to_vec::<f32>()?, i.to_vec::<u32>()?), (vec![9.0], vec![1]));
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::max_pool2d`].
    pub fn max_pool2d_with_indices(
        &self,
        kernel: [usize; 2],
        stride: Option<[usize; 2]>,
        padding: [usize; 2],
    ) -> Result<(Tensor, Tensor)> {
        let (v, i) = self.max_pool(kernel, stride, padding, true)?;
        let i = i.ok_or_else(|| invalid("max_pool2d_with_indices", "no indices".into()))?;
        Ok((v, i))
    }

    fn max_pool(
        &self,
        kernel: [usize; 2],
        stride: Option<[usize; 2]>,
        padding: [usize; 2],
        want_indices: bool,
    ) -> Result<(Tensor, Option<Tensor>)> {
        let op = "max_pool2d";
        let (x, unbatched) = as_4d(op, self)?;
        // gather moves f32 words: f16 windows are widened (exactly) and the maxima narrowed back.
        let half = x.dtype() == DType::F16;
        let x = if half { x.to_dtype(DType::F32)? } else { x };
        pool_check(op, kernel, padding)?;
        let &[n, c, h, w] = x.shape() else {
            unreachable!()
        };
        let s = pool_stride(kernel, stride);
        let win = Window::new(op, [c, h, w], kernel, s, padding, [1, 1])?;
        // A backend with its own max-pooling kernel runs it, recorded with its own backward.
        if dispatch::conv::own_conv(&[&x]) && x.dtype() == DType::F32 && !half && x.numel() > 0 {
            // Pooling's windows are a depthwise convolution's: each plane on its own.
            let geo = win.geom(n, c, c);
            let (values, indices) = x.max_pool2d_cpu(geo, want_indices)?;
            if want_indices && h * w > 1 << 24 {
                return Err(invalid(
                    "max_pool2d_with_indices",
                    format!("planes of {h} x {w} are too large for exact indices (at most 2^24)"),
                ));
            }
            let indices = indices.map(|i| restore(i, unbatched)).transpose()?;
            return Ok((restore(values, unbatched)?, indices));
        }
        let cols = win.windows(&x, f32::NEG_INFINITY)?;
        let arg = cols.argmax(-1, true)?;
        // A gather (not `max`): its gradient goes to one element, as PyTorch's max pooling.
        let values = cols.gather(-1, &arg)?.squeeze(-1)?;
        let values = restore(
            if half {
                values.to_dtype(DType::F16)?
            } else {
                values
            },
            unbatched,
        )?;
        if !want_indices {
            return Ok((values, None));
        }
        if h * w > 1 << 24 {
            return Err(invalid(
                "max_pool2d_with_indices",
                format!("planes of {h} x {w} are too large for exact indices (at most 2^24)"),
            ));
        }
        let [oh, ow] = win.out;
        let kk = kernel[0] * kernel[1];
        // Plane offsets as f32 (exact below 2^24) because gather moves float data.
        let dev = x.device();
        let local = cached(dev, format!("poolidx{}", win.key()), || {
            let v: Vec<f32> = win.pool_map(false).into_iter().map(|i| i as f32).collect();
            let len = v.len();
            Tensor::from_vec(v, &[len], dev)
        })?
        .reshape(&[1, c, oh, ow, kk])?
        .expand(&[n, c, oh, ow, kk])?;
        let indices = local.gather(-1, &arg)?.squeeze(-1)?.to_dtype(DType::U32)?;
        Ok((values, Some(restore(indices, unbatched)?)))
    }

    /// 2-d average pooling, PyTorch's `F.avg_pool2d(input, kernel_size, stride, padding)` with
    /// its default `count_include_pad=True` (padding counts as zeros in the mean).
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let x = Tensor::arange(0.0, 16.0, 1.0, &Device::best())?.reshape(&[1, 1, 4, 4])?;
    /// let y = x.avg_pool2d([2, 2], None, [0, 0])?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![2.5, 4.5, 10.5, 12.5]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::max_pool2d`].
    pub fn avg_pool2d(
        &self,
        kernel: [usize; 2],
        stride: Option<[usize; 2]>,
        padding: [usize; 2],
    ) -> Result<Tensor> {
        let op = "avg_pool2d";
        let (x, unbatched) = as_4d(op, self)?;
        pool_check(op, kernel, padding)?;
        let &[_, c, h, w] = x.shape() else {
            unreachable!()
        };
        let s = pool_stride(kernel, stride);
        let win = Window::new(op, [c, h, w], kernel, s, padding, [1, 1])?;
        restore(win.windows(&x, 0.0)?.mean(-1, false)?, unbatched)
    }

    /// Adaptive average pooling to `[out_h, out_w]`, PyTorch's `F.adaptive_avg_pool2d`: output
    /// cell `i` averages input rows `floor(i * H / out_h) .. ceil((i + 1) * H / out_h)` (and the
    /// same for columns). Computed as `P_h @ x @ P_w^T` with cached averaging matrices.
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// let x = Tensor::arange(0.0, 16.0, 1.0, &Device::best())?.reshape(&[1, 1, 4, 4])?;
    /// assert_eq!(x.adaptive_avg_pool2d([1, 1])?.to_vec::<f32>()?, vec![7.5]);
    /// assert_eq!(x.adaptive_avg_pool2d([2, 2])?.to_vec::<f32>()?, vec![2.5, 4.5, 10.5, 12.5]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero output size or an input that is not 3-d or 4-d;
    /// the errors of matmul.
    pub fn adaptive_avg_pool2d(&self, out: [usize; 2]) -> Result<Tensor> {
        let op = "adaptive_avg_pool2d";
        let (x, unbatched) = as_4d(op, self)?;
        let &[_, _, h, w] = x.shape() else {
            unreachable!()
        };
        if out[0] == 0 || out[1] == 0 {
            return Err(invalid(
                op,
                format!("output size {out:?} must be at least 1x1"),
            ));
        }
        let dev = x.device();
        let dt = x.dtype();
        let ph = cached(dev, format!("adapt{dt:?}{h}>{}", out[0]), || {
            averaging(h, out[0])?.to(dev)?.to_dtype(dt)
        })?;
        let pw = cached(dev, format!("adaptT{dt:?}{w}>{}", out[1]), || {
            averaging(w, out[1])?
                .t()?
                .contiguous()?
                .to(dev)?
                .to_dtype(dt)
        })?;
        restore(ph.matmul(&x)?.matmul(&pw)?, unbatched)
    }
}

/// `[out, n]`: row `i` averages `floor(i n / out) .. ceil((i + 1) n / out)`.
fn averaging(n: usize, out: usize) -> Result<Tensor> {
    let mut m = vec![0f32; out * n];
    for i in 0..out {
        let a = i * n / out;
        let b = ((i + 1) * n).div_ceil(out);
        for j in a..b {
            m[i * n + j] = 1.0 / (b - a) as f32;
        }
    }
    Tensor::from_vec(m, &[out, n], &Device::cpu())
}
