//! Host tensor data: one typed vector per dtype. The CPU backend's own storage type, so its
//! kernels take and return it without reaching up to `src/storage.rs` (which wraps it, beside
//! the GPU buffer, in the `Storage` a tensor holds).

use crate::{DType, WithDType};
use half::f16;

/// Host-side data, one variant per dtype so every element is properly typed and aligned.
#[derive(Clone, Debug)]
pub(crate) enum CpuStorage {
    F32(Vec<f32>),
    F16(Vec<f16>),
    I32(Vec<i32>),
    U32(Vec<u32>),
    U8(Vec<u8>),
}

impl CpuStorage {
    /// The raw little-endian bytes, as a GPU buffer holds them (f16 packs two per word).
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            CpuStorage::F32(v) => bytemuck::cast_slice(v),
            CpuStorage::F16(v) => bytemuck::cast_slice(v),
            CpuStorage::I32(v) => bytemuck::cast_slice(v),
            CpuStorage::U32(v) => bytemuck::cast_slice(v),
            CpuStorage::U8(v) => v,
        }
    }

    /// The raw bytes, writable (the in-place append of a KV cache).
    #[cfg_attr(not(feature = "models"), allow(dead_code))]
    pub(crate) fn as_bytes_mut(&mut self) -> &mut [u8] {
        match self {
            CpuStorage::F32(v) => bytemuck::cast_slice_mut(v),
            CpuStorage::F16(v) => bytemuck::cast_slice_mut(v),
            CpuStorage::I32(v) => bytemuck::cast_slice_mut(v),
            CpuStorage::U32(v) => bytemuck::cast_slice_mut(v),
            CpuStorage::U8(v) => v,
        }
    }

    /// Rebuilds typed host data from bytes read back from a GPU buffer (one copy).
    pub(crate) fn from_bytes(dtype: DType, bytes: &[u8]) -> crate::Result<CpuStorage> {
        fn typed<T: bytemuck::Pod>(bytes: &[u8]) -> crate::Result<Vec<T>> {
            let size = std::mem::size_of::<T>();
            let mut v = super::alloc::try_vec("readback", bytes.len() / size)?;
            match bytemuck::try_cast_slice::<u8, T>(bytes) {
                // Mapped memory is normally aligned: one memcpy, no zeroing pass.
                Ok(src) => v.extend_from_slice(src),
                Err(_) => v.extend(
                    bytes
                        .chunks_exact(size)
                        .map(bytemuck::pod_read_unaligned::<T>),
                ),
            }
            Ok(v)
        }
        Ok(match dtype {
            DType::F32 => CpuStorage::F32(typed(bytes)?),
            DType::F16 => CpuStorage::F16(typed(bytes)?),
            DType::I32 => CpuStorage::I32(typed(bytes)?),
            DType::U32 => CpuStorage::U32(typed(bytes)?),
            DType::U8 => CpuStorage::U8(typed(bytes)?),
        })
    }

    /// Typed access; `None` when `T` is not this storage's element type.
    pub(crate) fn as_slice<T: WithDType>(&self) -> Option<&[T]> {
        fn view<A: bytemuck::Pod, T: WithDType>(v: &[A], want: DType) -> Option<&[T]> {
            (T::DTYPE == want)
                .then(|| bytemuck::try_cast_slice(v).ok())
                .flatten()
        }
        match self {
            CpuStorage::F32(v) => view(v, DType::F32),
            CpuStorage::F16(v) => view(v, DType::F16),
            CpuStorage::I32(v) => view(v, DType::I32),
            CpuStorage::U32(v) => view(v, DType::U32),
            CpuStorage::U8(v) => view(v, DType::U8),
        }
    }

    /// Unwraps the typed vector without copying; `None` when `T` is not the element type.
    pub(crate) fn into_vec<T: WithDType>(self) -> Option<Vec<T>> {
        fn cast<A: bytemuck::Pod, T: WithDType>(v: Vec<A>, want: DType) -> Option<Vec<T>> {
            (T::DTYPE == want)
                .then(|| bytemuck::allocation::try_cast_vec(v).ok())
                .flatten()
        }
        match self {
            CpuStorage::F32(v) => cast(v, DType::F32),
            CpuStorage::F16(v) => cast(v, DType::F16),
            CpuStorage::I32(v) => cast(v, DType::I32),
            CpuStorage::U32(v) => cast(v, DType::U32),
            CpuStorage::U8(v) => cast(v, DType::U8),
        }
    }

    /// Wraps a typed vector without copying.
    pub(crate) fn from_vec<T: WithDType>(v: Vec<T>) -> CpuStorage {
        // Each arm only runs when `T` is exactly that type, so the casts are identity casts and
        // `cast_vec` cannot fail on size or alignment.
        match T::DTYPE {
            DType::F32 => CpuStorage::F32(bytemuck::allocation::cast_vec(v)),
            DType::F16 => CpuStorage::F16(bytemuck::allocation::cast_vec(v)),
            DType::I32 => CpuStorage::I32(bytemuck::allocation::cast_vec(v)),
            DType::U32 => CpuStorage::U32(bytemuck::allocation::cast_vec(v)),
            DType::U8 => CpuStorage::U8(bytemuck::allocation::cast_vec(v)),
        }
    }

    /// Packs the view `layout` into a new storage of the same dtype.
    pub(crate) fn contiguous(&self, layout: &crate::shape::Layout) -> crate::Result<CpuStorage> {
        use super::strided::contiguous as c;
        Ok(match self {
            CpuStorage::F32(v) => CpuStorage::F32(c(v, layout)?),
            CpuStorage::F16(v) => CpuStorage::F16(c(v, layout)?),
            CpuStorage::I32(v) => CpuStorage::I32(c(v, layout)?),
            CpuStorage::U32(v) => CpuStorage::U32(c(v, layout)?),
            CpuStorage::U8(v) => CpuStorage::U8(c(v, layout)?),
        })
    }

    /// Every element widened to f64, exactly (f64 holds each f32, f16, i32, u32 and u8 value):
    /// what printing reads, one number type for every dtype.
    pub(crate) fn to_f64s(&self) -> Vec<f64> {
        match self {
            CpuStorage::F32(v) => v.iter().map(|&x| x as f64).collect(),
            CpuStorage::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
            CpuStorage::I32(v) => v.iter().map(|&x| x as f64).collect(),
            CpuStorage::U32(v) => v.iter().map(|&x| x as f64).collect(),
            CpuStorage::U8(v) => v.iter().map(|&x| x as f64).collect(),
        }
    }

    /// Bytes held, as reported by memory statistics.
    pub(crate) fn size_in_bytes(&self) -> usize {
        self.as_bytes().len()
    }
}
