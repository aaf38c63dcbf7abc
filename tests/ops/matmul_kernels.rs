//! The matmul kernel variants against each other on every adapter, bit for bit: a variant the
//! autotuner or a heuristic may pick in place of another must give its bits (the tolerance
//! tests of every kernel against the CPU are in `matmul.rs`).

use crate::common::{data, gpus, values};
use wgtensor::{DType, Tensor};

/// `gemv_rows` (software adapters' kernel for a few rows times a transposed weight) gives the
/// register kernels' bits, in f32 and f16, a partial last group of 8 columns, several rows of
/// x, K past one 16,384 chunk, and layouts it cannot read in pairs (where it runs as
/// `register`), on every adapter.
#[test]
fn gemv_rows_gives_the_register_kernels_bits() {
    for d in gpus() {
        for (m, k, n, skip) in [
            (1, 768, 100, 0),
            (3, 512, 64, 0),
            (4, 258, 71, 0),
            (1, 16_390, 64, 0),
            (2, 300, 65, 1),
        ] {
            let x = Tensor::from_vec(data(m * (k + skip), 60, 1.0), &[m, k + skip], &d).unwrap();
            let w = Tensor::from_vec(data(n * (k + skip), 61, 1.0), &[n, k + skip], &d).unwrap();
            for dtype in [DType::F32, DType::F16] {
                // Converted first, so the views below are what the kernel reads.
                let x = x.to_dtype(dtype).unwrap().narrow(1, skip, k).unwrap();
                let w = w
                    .to_dtype(dtype)
                    .unwrap()
                    .narrow(1, skip, k)
                    .unwrap()
                    .t()
                    .unwrap();
                let bits = |kernel: &str| -> Vec<u32> {
                    let y = x.matmul_with_kernel(&w, kernel).unwrap();
                    values(&y.to_dtype(DType::F32).unwrap())
                        .iter()
                        .map(|v| v.to_bits())
                        .collect()
                };
                let want = bits("register");
                assert_eq!(want.len(), m * n);
                assert!(
                    bits("gemv_rows") == want,
                    "gemv_rows vs register: {m}x{k}x{n} {dtype:?} skip {skip} on {d}"
                );
            }
        }
    }
}
