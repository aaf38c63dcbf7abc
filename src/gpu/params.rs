//! Building the `params: array<u32>` metadata that the shaders read: index-range checks and strided layouts flattened to words.

use crate::shape::Layout;
use crate::{Error, Result};

/// Headroom above the largest index a kernel computes: a reduction workgroup may form
/// `chunk start + 4096` before comparing it with the row length, which must not wrap.
const HEADROOM: usize = 1 << 16;

/// Shaders index with `u32`; views reaching further (or with more elements) are refused here
/// with a clear error instead of wrapping silently on the device.
pub(crate) fn check_u32(op: &'static str, layout: &Layout) -> Result<()> {
    let reach = layout.span().max(layout.numel());
    if reach > u32::MAX as usize - HEADROOM {
        return Err(Error::InvalidArgument {
            op,
            message: format!(
                "{reach} elements exceed the 2^32 - 2^16 elements a GPU kernel can index; \
                 split the tensor"
            ),
        });
    }
    Ok(())
}

/// A size, stride or offset already bounded by [`check_u32`].
pub(crate) fn w(x: usize) -> u32 {
    x as u32
}

/// Appends every entry of `v` (bounded by [`check_u32`]) as a word.
pub(crate) fn extend(params: &mut Vec<u32>, v: &[usize]) {
    params.extend(v.iter().map(|&x| x as u32));
}
