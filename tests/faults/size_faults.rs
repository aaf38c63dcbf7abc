//! Sizes past what a device can hold, and shapes whose arithmetic overflows: the same typed
//! error for the same condition whichever op meets it, never an abort, a wrapped count or a
//! validation error from wgpu.

use crate::common;

use common::devices;
use wgtensor::{DType, Error, PadMode, Tensor};

/// A matmul whose result needs 1 TiB fails as `zeros` of that size does: `BufferTooLarge` on
/// a GPU (the result exceeds `max_buffer_size`), whatever the CPU says for both.
#[test]
fn a_1_tib_matmul_fails_like_zeros_of_that_size() {
    for d in devices() {
        let n = 1usize << 19; // n x n f32 = 1 TiB
        let z = Tensor::zeros(&[n, n], DType::F32, &d)
            .map(drop)
            .unwrap_err();
        let a = Tensor::ones(&[n, 1], DType::F32, &d).unwrap();
        let b = Tensor::ones(&[1, n], DType::F32, &d).unwrap();
        let m = a.matmul(&b).map(drop).unwrap_err();
        eprintln!("{d}: zeros: {z}\n{d}: matmul: {m}");
        assert_eq!(
            std::mem::discriminant(&z),
            std::mem::discriminant(&m),
            "{d}: zeros gives {z:?}, matmul {m:?}"
        );
    }
}

/// Padding a 2x2 image by 2^20 on every side needs a 2^21 x 2^21 result (16 TiB of f32): a
/// typed size error, not an abort from an unchecked index-map allocation.
#[test]
fn absurd_padding_is_a_typed_error() {
    for d in devices() {
        let x = Tensor::ones(&[1, 1, 2, 2], DType::F32, &d).unwrap();
        let r = x.pad(&[1 << 20; 4], PadMode::Constant(0.0)).map(drop);
        match r {
            Err(
                Error::OutOfMemory { .. }
                | Error::BufferTooLarge { .. }
                | Error::ShapeOverflow { .. },
            ) => {}
            other => panic!("{d}: expected a size error, got {other:?}"),
        }
    }
}

/// A zero before huge dims (`[0, 2^40, 2^40]`) has no elements but strides that overflow: every
/// way to make such a shape is `ShapeOverflow`, in debug and release builds alike.
#[test]
fn a_zero_before_huge_dims_is_a_shape_overflow() {
    let huge = [0usize, 1 << 40, 1 << 40];
    for d in devices() {
        let overflow = |r: wgtensor::Result<Tensor>, what: &str| match r {
            Err(Error::ShapeOverflow { .. }) => {}
            other => panic!(
                "{d} {what}: expected ShapeOverflow, got {:?}",
                other.map(|t| t.shape().to_vec())
            ),
        };
        overflow(Tensor::zeros(&huge, DType::F32, &d), "zeros");
        overflow(Tensor::from_vec(Vec::<f32>::new(), &huge, &d), "from_vec");
        let empty = Tensor::zeros(&[0, 4], DType::F32, &d).unwrap();
        overflow(empty.reshape(&huge), "reshape");
        overflow(empty.reshape(&[0, 1, 1]).unwrap().expand(&huge), "expand");
        let wide = Tensor::zeros(&[0, 1 << 40], DType::F32, &d);
        if let Ok(w) = wide {
            overflow(
                w.unsqueeze(2)
                    .and_then(|u| u.expand(&[0, 1 << 40, 1 << 40])),
                "unsqueeze+expand",
            );
        }
    }
}

fn size_error(d: &wgtensor::Device, what: &str, r: wgtensor::Result<Tensor>) {
    match r {
        Err(
            Error::ShapeOverflow { .. } | Error::BufferTooLarge { .. } | Error::OutOfMemory { .. },
        ) => {}
        other => panic!(
            "{d} {what}: expected a size error, got {:?}",
            other.map(|t| t.shape().to_vec())
        ),
    }
}

/// Convolution and pooling address one image with u32 index maps: an image of 2^33 elements (a
/// broadcast view, so nothing is allocated) is a typed size error, never truncated offsets; so
/// are paddings and dilations whose window arithmetic overflows.
#[test]
fn conv_and_pool_sizes_past_their_index_maps_are_typed_errors() {
    for d in devices() {
        let big = Tensor::zeros(&[1, 1, 1, 1], DType::F32, &d)
            .unwrap()
            .expand(&[1, 1 << 16, 1 << 16, 2])
            .unwrap();
        let w = Tensor::zeros(&[1, 1, 1, 1], DType::F32, &d)
            .unwrap()
            .expand(&[1, 1 << 16, 3, 1])
            .unwrap();
        let opts = wgtensor::Conv2dOptions::default();
        size_error(
            &d,
            "conv2d of a 2^33-element image",
            big.conv2d(&w, None, &opts),
        );
        size_error(&d, "max_pool2d of it", big.max_pool2d([2, 2], None, [0, 0]));
        let x = Tensor::ones(&[1, 1, 4, 4], DType::F32, &d).unwrap();
        let k = Tensor::ones(&[1, 1, 3, 3], DType::F32, &d).unwrap();
        for (what, o) in [
            ("padding usize::MAX", opts.padding(usize::MAX)),
            (
                "padding usize::MAX / 2 + 1",
                opts.padding(usize::MAX / 2 + 1),
            ),
            ("dilation usize::MAX", opts.dilation(usize::MAX)),
        ] {
            size_error(&d, what, x.conv2d(&k, None, &o));
        }
        // The same image within the maps' reach works.
        let y = x.conv2d(&k, None, &opts).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), vec![9.0; 4], "{d}");
    }
}

/// `slice_assign` with a start near `usize::MAX`: the range is past the end (its documented
/// `InvalidArgument`), never a wrapped range.
#[test]
fn slice_assign_offsets_are_checked() {
    for d in devices() {
        let cache = Tensor::zeros(&[2, 4], DType::F32, &d).unwrap();
        let src = Tensor::ones(&[2, 2], DType::F32, &d).unwrap();
        for start in [usize::MAX, usize::MAX - 1, 3] {
            match cache.slice_assign(1, start, &src).map(drop) {
                Err(Error::InvalidArgument { op, .. }) => assert_eq!(op, "slice_assign"),
                other => panic!("{d} start {start}: expected InvalidArgument, got {other:?}"),
            }
        }
        let ok = cache.slice_assign(1, 2, &src).unwrap();
        assert_eq!(
            ok.to_vec::<f32>().unwrap(),
            vec![0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0],
            "{d}"
        );
    }
}

/// Attention whose broadcast batch overflows (`[2^40, 1]` with `[1, 2^40]`, broadcast views):
/// `ShapeOverflow`, never a wrapped count of scores.
#[test]
fn attention_batch_overflow_is_a_shape_overflow() {
    for d in devices() {
        let one = Tensor::zeros(&[1, 1, 1, 4], DType::F32, &d).unwrap();
        let q = one.expand(&[1 << 40, 1, 1, 4]).unwrap();
        let k = one.expand(&[1, 1 << 40, 1, 4]).unwrap();
        size_error(
            &d,
            "attention",
            Tensor::scaled_dot_product_attention(&q, &k, &k, None, false, 0.0, None),
        );
    }
}
