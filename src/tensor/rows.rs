//! The row ops' public `Tensor` methods, with their rustdoc and the backward each records,
//! generated from the row-op table (`src/ops/rows.rs`). Each calls its family's entry point:
//! `row_dim` (`tensor/softmax.rs`) or `norm` (`tensor/norm.rs`).

use super::Tensor;
use crate::ops::RowOp;
use crate::Result;

crate::ops::row_tensor_half!();
