//! `pad`, PyTorch's `F.pad` (constant, reflect and replicate), as a gather through a cached
//! index map (see `conv.rs`).

use super::conv::{gather_with_fill, index_map};
use crate::error::invalid;
use crate::{Error, Result, Tensor};

/// How [`Tensor::pad`] fills the border.
///
/// ```
/// use wgtensor::{Device, PadMode, Tensor};
/// let t = Tensor::from_vec(vec![1f32, 2.0, 3.0], &[1, 3], &Device::cpu())?;
/// let r = t.pad(&[2, 1], PadMode::Reflect)?;
/// assert_eq!(r.to_vec::<f32>()?, vec![3.0, 2.0, 1.0, 2.0, 3.0, 2.0]);
/// let c = t.pad(&[1, 0], PadMode::Constant(9.0))?;
/// assert_eq!(c.to_vec::<f32>()?, vec![9.0, 1.0, 2.0, 3.0]);
/// # Ok::<(), wgtensor::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PadMode {
    /// Every added element is this value (PyTorch's `mode='constant'`).
    Constant(f32),
    /// Mirror without repeating the edge (`mode='reflect'`): padding must be < the dim.
    Reflect,
    /// Repeat the edge element (`mode='replicate'`).
    Replicate,
}

impl Tensor {
    /// Pads the last dims, PyTorch's `F.pad(input, pad, mode, value)`: `pads` holds
    /// `(before, after)` pairs starting from the last dim (`[left, right, top, bottom, ...]`).
    /// Gradients flow to the input (padding positions get none).
    ///
    /// ```
    /// use wgtensor::{Device, PadMode, Tensor};
    /// let t = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[2, 2], &Device::best())?;
    /// let p = t.pad(&[1, 0, 0, 1], PadMode::Constant(0.0))?;
    /// assert_eq!(p.shape(), &[3, 3]);
    /// assert_eq!(p.to_vec::<f32>()?, vec![0.0, 1.0, 2.0, 0.0, 3.0, 4.0, 0.0, 0.0, 0.0]);
    /// let e = t.pad(&[1, 1], PadMode::Replicate)?;
    /// assert_eq!(e.to_vec::<f32>()?, vec![1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0]);
    /// # Ok::<(), wgtensor::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an odd-length `pads`, more pairs than dims, or reflect
    /// padding not smaller than its dim; [`Error::UnsupportedDType`] for integer tensors.
    pub fn pad(&self, pads: &[usize], mode: PadMode) -> Result<Tensor> {
        let op = "pad";
        if !self.dtype().is_float() {
            return Err(self.unsupported(op));
        }
        let k = pads.len() / 2;
        if !pads.len().is_multiple_of(2) || k > self.ndim() {
            return Err(invalid(
                op,
                format!(
                    "pads {pads:?} must be (before, after) pairs for at most the {} dims of {:?}",
                    self.ndim(),
                    self.shape()
                ),
            ));
        }
        if pads.iter().all(|&p| p == 0) {
            return Ok(self.clone());
        }
        let shape = self.shape();
        let lead = self.ndim() - k;
        let inner_in: Vec<usize> = shape[lead..].to_vec();
        // pads[0..2] is the last dim: reverse into dim order.
        let pairs: Vec<(usize, usize)> = (0..k)
            .map(|i| (pads[2 * (k - 1 - i)], pads[2 * (k - 1 - i) + 1]))
            .collect();
        if mode == PadMode::Reflect {
            for (i, &(a, b)) in pairs.iter().enumerate() {
                if a >= inner_in[i] || b >= inner_in[i] {
                    return Err(invalid(
                        op,
                        format!(
                            "reflect padding ({a}, {b}) must be smaller than dim {} of size {}",
                            lead + i,
                            inner_in[i]
                        ),
                    ));
                }
            }
        }
        if mode == PadMode::Replicate && inner_in.contains(&0) {
            return Err(invalid(
                op,
                format!("cannot replicate the edge of {shape:?}"),
            ));
        }
        // Sizes are checked before anything is allocated: absurd pads are a typed error, and
        // the u32 index map must not wrap.
        let overflow = || Error::ShapeOverflow {
            shape: shape.to_vec(),
        };
        let inner_out: Vec<usize> = inner_in
            .iter()
            .zip(&pairs)
            .map(|(&n, &(a, b))| n.checked_add(a)?.checked_add(b))
            .collect::<Option<_>>()
            .ok_or_else(overflow)?;
        let mut out_shape = shape[..lead].to_vec();
        out_shape.extend(&inner_out);
        let out_numel = crate::shape::numel_for(&out_shape, self.dtype())?;
        let total = crate::shape::numel_for(&inner_out, crate::DType::U32)?;
        // Checked before the index map is built on the host for a result no device can hold.
        let bytes = (out_numel as u64).max(total as u64) * 4;
        super::dispatch::check_buffer_size(op, self.device(), bytes)?;
        let outer: usize = shape[..lead].iter().product();
        let per: usize = inner_in.iter().product();
        // Map entries are input offsets, or `per` for the fill.
        if u32::try_from(per).is_err() {
            return Err(overflow());
        }
        let fill = match mode {
            PadMode::Constant(v) => v,
            _ => 0.0,
        };
        let key = format!("pad{inner_in:?}{pairs:?}{}", mode_key(mode));
        let map = index_map(self.device(), key, || {
            pad_map(&inner_in, &inner_out, &pairs, mode)
        })?;
        let x2d = self.reshape(&[outer, per])?;
        let out = gather_with_fill(&x2d, fill, &map)?;
        out.reshape(&out_shape)
    }
}

fn mode_key(m: PadMode) -> &'static str {
    match m {
        PadMode::Constant(_) => "c",
        PadMode::Reflect => "r",
        PadMode::Replicate => "e",
    }
}

/// For every output position of the padded block, the input offset (or `per`, the fill).
fn pad_map(
    inner_in: &[usize],
    inner_out: &[usize],
    pairs: &[(usize, usize)],
    mode: PadMode,
) -> Result<Vec<u32>> {
    let per: usize = inner_in.iter().product();
    let total: usize = inner_out.iter().product();
    let k = inner_in.len();
    let mut v = crate::storage::try_vec("pad", total)?;
    let mut idx = vec![0usize; k];
    for _ in 0..total {
        let mut off = 0usize;
        let mut inside = true;
        for d in 0..k {
            let n = inner_in[d] as isize;
            let mut i = idx[d] as isize - pairs[d].0 as isize;
            match mode {
                PadMode::Constant(_) => inside &= i >= 0 && i < n,
                PadMode::Reflect => {
                    if i < 0 {
                        i = -i;
                    }
                    if i >= n {
                        i = 2 * (n - 1) - i;
                    }
                }
                PadMode::Replicate => i = i.clamp(0, n - 1),
            }
            off = off * inner_in[d] + i.max(0) as usize;
        }
        v.push(if inside { off as u32 } else { per as u32 });
        // Next output position, last dim fastest.
        for d in (0..k).rev() {
            idx[d] += 1;
            if idx[d] < inner_out[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(v)
}
