//! Shapes, strides and broadcasting. Pure arithmetic: no device, no allocation of tensor data.

use crate::{DType, Error, Result};

/// Number of elements of `shape`, or [`Error::ShapeOverflow`] when it does not fit in `usize`.
/// A zero dim does not excuse the others: the product of the non-zero dims (what strides,
/// spans and contiguity checks multiply) must fit in `isize` too, so `[0, 2^40, 2^40]` is
/// refused here instead of overflowing later in stride arithmetic.
pub(crate) fn numel_checked(shape: &[usize]) -> Result<usize> {
    let overflow = || Error::ShapeOverflow {
        shape: shape.to_vec(),
    };
    let extent = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d.max(1)))
        .filter(|&e| e <= isize::MAX as usize)
        .ok_or_else(overflow)?;
    Ok(if shape.contains(&0) { 0 } else { extent })
}

/// Element count of a new `dtype` tensor of `shape`, or [`Error::ShapeOverflow`] when the count
/// does not fit in `usize` or its byte size exceeds `isize::MAX`, the largest allocation there can
/// be (`Vec` would panic with "capacity overflow" instead).
pub(crate) fn numel_for(shape: &[usize], dtype: DType) -> Result<usize> {
    let n = numel_checked(shape)?;
    match n.checked_mul(dtype.size_in_bytes()) {
        Some(bytes) if bytes <= isize::MAX as usize => Ok(n),
        _ => Err(Error::ShapeOverflow {
            shape: shape.to_vec(),
        }),
    }
}

/// Row-major strides (in elements) of a contiguous tensor of `shape`.
pub(crate) fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; shape.len()];
    let mut acc = 1usize;
    for (s, &d) in strides.iter_mut().zip(shape).rev() {
        *s = acc;
        // Saturating: shapes reaching here were checked by `numel_checked`; a zero dim makes
        // the product zero and later strides are never used to address memory.
        acc = acc.saturating_mul(d);
    }
    strides
}

/// The shape two operands broadcast to, with numpy/PyTorch rules: align trailing dims; each pair
/// must be equal or contain a 1. A result whose element count overflows is
/// [`Error::ShapeOverflow`] (every broadcasting op and `expand` go through here, so no tensor
/// with an unrepresentable element count is ever made).
pub(crate) fn broadcast_shapes(
    op: &'static str,
    lhs: &[usize],
    rhs: &[usize],
) -> Result<Vec<usize>> {
    let n = lhs.len().max(rhs.len());
    let mut out = vec![0; n];
    for (i, o) in out.iter_mut().enumerate() {
        let l = dim_from_end(lhs, n - 1 - i);
        let r = dim_from_end(rhs, n - 1 - i);
        *o = match (l, r) {
            (a, b) if a == b => a,
            (1, b) => b,
            (a, 1) => a,
            _ => {
                return Err(Error::ShapeMismatch {
                    op,
                    lhs: lhs.to_vec(),
                    rhs: rhs.to_vec(),
                });
            }
        };
    }
    numel_checked(&out)?;
    Ok(out)
}

/// `shape[len - 1 - k]`, or 1 when the shape has fewer dims (implicit leading ones).
fn dim_from_end(shape: &[usize], k: usize) -> usize {
    if k < shape.len() {
        shape[shape.len() - 1 - k]
    } else {
        1
    }
}

/// Resolves a PyTorch-style dim (`-1` is the last) against `ndim` dims. A 0-d tensor accepts
/// `0` and `-1`, as in PyTorch.
pub(crate) fn normalize_dim(op: &'static str, dim: isize, ndim: usize) -> Result<usize> {
    let n = ndim.max(1) as isize;
    let d = if dim < 0 { dim + n } else { dim };
    if d < 0 || d >= n {
        return Err(Error::InvalidArgument {
            op,
            message: format!(
                "dim {dim} is out of range for a tensor with {ndim} dims (expected {} to {})",
                -n,
                n - 1
            ),
        });
    }
    Ok(d as usize)
}

/// Where a tensor's elements sit in its storage: shape, strides (in elements) and start offset.
///
/// Views (broadcast, transpose, narrow) share storage and differ only in layout. A stride of 0
/// repeats an element along that dim (broadcasting without a copy).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub shape: Vec<usize>,
    pub strides: Vec<usize>,
    pub offset: usize,
}

impl Layout {
    /// The layout of a freshly allocated, row-major tensor.
    pub fn contiguous(shape: &[usize]) -> Layout {
        Layout {
            shape: shape.to_vec(),
            strides: contiguous_strides(shape),
            offset: 0,
        }
    }

    /// Element count (already validated when the tensor was made).
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether elements are row-major and packed (size-1 dims may have any stride).
    pub fn is_contiguous(&self) -> bool {
        let mut expected = 1usize;
        for (&d, &s) in self.shape.iter().zip(&self.strides).rev() {
            if d != 1 && s != expected {
                return false;
            }
            expected *= d;
        }
        true
    }

    /// This layout read as `target` (which must be a valid broadcast of `self.shape`): broadcast
    /// dims get stride 0, so no data is copied.
    pub fn broadcast_to(&self, target: &[usize]) -> Layout {
        let extra = target.len() - self.shape.len();
        let mut strides = vec![0; target.len()];
        for (i, s) in strides.iter_mut().enumerate().skip(extra) {
            let src = i - extra;
            *s = if self.shape[src] == 1 && target[i] != 1 {
                0
            } else {
                self.strides[src]
            };
        }
        Layout {
            shape: target.to_vec(),
            strides,
            offset: self.offset,
        }
    }

    /// One past the largest storage index this layout reads (0 when empty).
    pub fn span(&self) -> usize {
        if self.shape.contains(&0) {
            return 0;
        }
        self.offset
            + self
                .shape
                .iter()
                .zip(&self.strides)
                .map(|(&d, &s)| (d - 1) * s)
                .sum::<usize>()
            + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_rules() {
        assert_eq!(broadcast_shapes("t", &[3, 1], &[1, 4]).unwrap(), vec![3, 4]);
        assert_eq!(
            broadcast_shapes("t", &[5, 3, 1], &[4]).unwrap(),
            vec![5, 3, 4]
        );
        assert_eq!(broadcast_shapes("t", &[], &[2]).unwrap(), vec![2]);
        assert_eq!(broadcast_shapes("t", &[0, 1], &[1, 3]).unwrap(), vec![0, 3]);
        assert!(broadcast_shapes("t", &[3, 1], &[2, 2]).is_err());
        // 2^32 x 2^32 elements do not fit a usize: an error, not a wrapped count.
        assert!(matches!(
            broadcast_shapes("t", &[1 << 32, 1], &[1, 1 << 32]),
            Err(Error::ShapeOverflow { .. })
        ));
    }

    #[test]
    fn strides_and_contiguity() {
        let l = Layout::contiguous(&[2, 3, 4]);
        assert_eq!(l.strides, vec![12, 4, 1]);
        assert!(l.is_contiguous());
        let b = Layout::contiguous(&[3, 1]).broadcast_to(&[2, 3, 4]);
        assert_eq!(b.strides, vec![0, 1, 0]);
        assert!(!b.is_contiguous());
        assert_eq!(b.span(), 3);
    }

    #[test]
    fn overflow_is_an_error() {
        assert!(numel_checked(&[1 << 40, 1 << 40]).is_err());
        assert_eq!(numel_checked(&[]).unwrap(), 1);
        assert_eq!(numel_checked(&[0, 5]).unwrap(), 0);
        // The element count fits, the byte count does not.
        assert!(numel_checked(&[1 << 31, 1 << 31]).is_ok());
        assert!(numel_for(&[1 << 31, 1 << 31], DType::F32).is_err());
        assert!(numel_for(&[1 << 31, 1 << 31], DType::F16).is_err());
        assert_eq!(numel_for(&[2, 3], DType::F32).unwrap(), 6);
    }

    #[test]
    fn negative_dims() {
        assert_eq!(normalize_dim("t", -1, 3).unwrap(), 2);
        assert_eq!(normalize_dim("t", 0, 3).unwrap(), 0);
        assert!(normalize_dim("t", 3, 3).is_err());
        assert!(normalize_dim("t", -4, 3).is_err());
        assert_eq!(normalize_dim("t", -1, 0).unwrap(), 0);
        assert!(normalize_dim("t", 1, 0).is_err());
    }
}
