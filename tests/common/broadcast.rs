//! Broadcasting references and shape strategies shared by the property tests, written
//! independently of the library.

use proptest::prelude::*;

/// numpy's broadcast of two shapes, written independently of the library.
pub fn numpy_broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    let pad = |s: &[usize]| -> Vec<usize> {
        std::iter::repeat_n(1, n - s.len())
            .chain(s.iter().copied())
            .collect()
    };
    let (a, b) = (pad(a), pad(b));
    a.iter()
        .zip(&b)
        .map(|(&x, &y)| match (x, y) {
            _ if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// Row-major index into `shape` (right-aligned, size-1 dims repeated) of output element `i`.
pub fn source_index(mut i: usize, out: &[usize], shape: &[usize]) -> usize {
    let (mut idx, mut stride) = (0, 1);
    for k in 0..out.len() {
        let coord = i % out[out.len() - 1 - k];
        i /= out[out.len() - 1 - k];
        if let Some(&s) = shape.len().checked_sub(k + 1).map(|j| &shape[j]) {
            idx += if s == 1 { 0 } else { coord * stride };
            stride *= s;
        }
    }
    idx
}

pub fn shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..=6, 0..=4)
}

/// (lhs, rhs, expected output shape): one random shape and a broadcast-compatible derivative.
pub fn compatible_pair() -> impl Strategy<Value = (Vec<usize>, Vec<usize>, Vec<usize>)> {
    shape()
        .prop_flat_map(|s| {
            let n = s.len();
            (
                Just(s),
                prop::collection::vec(any::<bool>(), n),
                0..=n,
                any::<bool>(),
            )
        })
        .prop_map(|(s, ones, drop, swap)| {
            let derived: Vec<usize> = s
                .iter()
                .zip(&ones)
                .map(|(&d, &one)| if one { 1 } else { d })
                .skip(drop)
                .collect();
            if swap {
                (derived, s.clone(), s)
            } else {
                (s.clone(), derived, s)
            }
        })
}
