//! The host buffers MPI reads and writes for `group.rs`: f16 travels as f32, a contiguous CPU
//! tensor is sent from its own memory, and empty buffers never look like `MPI_IN_PLACE`.

use super::ReduceOp;
use crate::{DType, Device, Result, Tensor};
use half::f16;
use mpi::ffi;
use std::os::raw::c_void;

/// Host elements in the MPI type used for a dtype (f16 travels as f32, so reductions are exact
/// to f32 and the result is rounded once).
pub(super) enum HostBuf {
    F32(Vec<f32>),
    I32(Vec<i32>),
    U32(Vec<u32>),
    U8(Vec<u8>),
}

/// What a collective sends: a host copy, or (zero-copy) a contiguous CPU tensor's own memory.
pub(super) enum SendBuf {
    Host(HostBuf),
    Tensor(Tensor),
    None,
}

/// `n` zeros. Large receive buffers ask the kernel for transparent huge pages first: a fresh
/// 64 MiB result otherwise takes 16,384 page faults while MPI writes it, which cost more than
/// the reduction itself on a loopback all_reduce.
fn huge_zeros<T: Copy + Default>(n: usize) -> Vec<T> {
    let mut v: Vec<T> = Vec::with_capacity(n);
    let bytes = n * std::mem::size_of::<T>();
    #[cfg(target_os = "linux")]
    if bytes >= 4 << 20 {
        const HUGE: usize = 2 << 20;
        let start = v.as_mut_ptr() as usize;
        let aligned = start.next_multiple_of(HUGE);
        let len = (start + bytes).saturating_sub(aligned) / HUGE * HUGE;
        if len > 0 {
            // SAFETY: an advisory call on memory this Vec owns; failure only means small pages.
            unsafe {
                libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
            }
        }
    }
    v.resize(n, T::default());
    v
}

impl HostBuf {
    pub(super) fn zeros(dtype: DType, n: usize) -> HostBuf {
        match dtype {
            DType::F32 | DType::F16 => HostBuf::F32(huge_zeros(n)),
            DType::I32 => HostBuf::I32(huge_zeros(n)),
            DType::U32 => HostBuf::U32(huge_zeros(n)),
            DType::U8 => HostBuf::U8(huge_zeros(n)),
        }
    }

    pub(super) fn read(t: &Tensor) -> Result<HostBuf> {
        Ok(match t.dtype() {
            DType::F32 => HostBuf::F32(t.to_vec()?),
            DType::F16 => HostBuf::F32(t.to_vec::<f16>()?.into_iter().map(f32::from).collect()),
            DType::I32 => HostBuf::I32(t.to_vec()?),
            DType::U32 => HostBuf::U32(t.to_vec()?),
            DType::U8 => HostBuf::U8(t.to_vec()?),
        })
    }

    pub(super) fn ptr(&self) -> *const c_void {
        if self.is_empty() {
            return EMPTY.as_ptr().cast();
        }
        match self {
            HostBuf::F32(v) => v.as_ptr().cast(),
            HostBuf::I32(v) => v.as_ptr().cast(),
            HostBuf::U32(v) => v.as_ptr().cast(),
            HostBuf::U8(v) => v.as_ptr().cast(),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        match self {
            HostBuf::F32(v) => v.is_empty(),
            HostBuf::I32(v) => v.is_empty(),
            HostBuf::U32(v) => v.is_empty(),
            HostBuf::U8(v) => v.is_empty(),
        }
    }

    pub(super) fn ptr_mut(&mut self) -> *mut c_void {
        if self.is_empty() {
            // MPI writes nothing to an empty buffer; it only must not look like MPI_IN_PLACE.
            return EMPTY.as_ptr().cast_mut().cast();
        }
        match self {
            HostBuf::F32(v) => v.as_mut_ptr().cast(),
            HostBuf::I32(v) => v.as_mut_ptr().cast(),
            HostBuf::U32(v) => v.as_mut_ptr().cast(),
            HostBuf::U8(v) => v.as_mut_ptr().cast(),
        }
    }

    /// Elements `range` as a tensor of `dtype` and `shape` on `device`.
    pub(super) fn tensor(
        &self,
        range: std::ops::Range<usize>,
        dtype: DType,
        shape: &[usize],
        device: &Device,
    ) -> Result<Tensor> {
        match (self, dtype) {
            (HostBuf::F32(v), DType::F16) => Tensor::from_vec(
                v[range].iter().map(|&x| f16::from_f32(x)).collect(),
                shape,
                device,
            ),
            (HostBuf::F32(v), _) => Tensor::from_vec(v[range].to_vec(), shape, device),
            (HostBuf::I32(v), _) => Tensor::from_vec(v[range].to_vec(), shape, device),
            (HostBuf::U32(v), _) => Tensor::from_vec(v[range].to_vec(), shape, device),
            (HostBuf::U8(v), _) => Tensor::from_vec(v[range].to_vec(), shape, device),
        }
    }

    /// The whole buffer as a tensor, without copying when it already has the tensor's type.
    pub(super) fn into_tensor(
        self,
        dtype: DType,
        shape: &[usize],
        device: &Device,
    ) -> Result<Tensor> {
        match (self, dtype) {
            (HostBuf::F32(v), DType::F32) => Tensor::from_vec(v, shape, device),
            (HostBuf::I32(v), _) => Tensor::from_vec(v, shape, device),
            (HostBuf::U32(v), _) => Tensor::from_vec(v, shape, device),
            (HostBuf::U8(v), _) => Tensor::from_vec(v, shape, device),
            (h, _) => {
                let n = shape.iter().product();
                h.tensor(0..n, dtype, shape, device)
            }
        }
    }

    pub(super) fn divide(&mut self, by: usize) {
        if let HostBuf::F32(v) = self {
            let inv = 1.0 / by as f32;
            v.iter_mut().for_each(|x| *x *= inv);
        }
    }
}

impl SendBuf {
    /// A contiguous CPU tensor whose MPI type is its own is sent from its memory; anything
    /// else is read to the host once.
    pub(super) fn of(t: &Tensor) -> Result<SendBuf> {
        if t.dtype() != DType::F16 && t.host_packed_bytes()?.is_some() {
            return Ok(SendBuf::Tensor(t.clone()));
        }
        Ok(SendBuf::Host(HostBuf::read(t)?))
    }

    pub(super) fn ptr(&self) -> *const c_void {
        match self {
            SendBuf::Host(h) => h.ptr(),
            SendBuf::Tensor(t) if t.numel() == 0 => EMPTY.as_ptr().cast(),
            SendBuf::Tensor(t) => match t.host_packed_bytes() {
                Ok(Some(bytes)) => bytes.as_ptr().cast(),
                // `SendBuf::of` keeps only packed CPU tensors, so this never sends.
                _ => std::ptr::null(),
            },
            SendBuf::None => std::ptr::null(),
        }
    }
}

/// dtype and shape of one rank's operand, as exchanged before a collective.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Meta {
    pub(super) dtype: DType,
    pub(super) shape: Vec<usize>,
}

/// What one rank is calling: the collective, its root (broadcast) and its reduce op,
/// exchanged with the operand's metadata so that ranks calling different collectives, or the
/// same one with different roots or ops, all get `Error::Distributed` instead of a hang or
/// wrong values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Call {
    pub(super) kind: &'static str,
    pub(super) root: Option<usize>,
    pub(super) op: Option<ReduceOp>,
}

impl Call {
    pub(super) const KINDS: [&'static str; 5] = [
        "all_reduce",
        "broadcast",
        "all_gather",
        "reduce_scatter",
        "barrier",
    ];
    const OPS: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Mean,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Product,
    ];

    pub(super) fn encode(&self) -> [i64; 3] {
        let kind = Call::KINDS.iter().position(|k| *k == self.kind);
        let op = self.op.and_then(|o| Call::OPS.iter().position(|x| *x == o));
        [
            kind.map_or(-1, |k| k as i64),
            self.root.map_or(-1, |r| r as i64),
            op.map_or(-1, |o| o as i64),
        ]
    }

    /// A readable description of an encoded call (for the mismatch message).
    pub(super) fn describe(code: &[i64]) -> String {
        let kind = usize::try_from(code[0])
            .ok()
            .and_then(|k| Call::KINDS.get(k))
            .copied()
            .unwrap_or("an unknown collective");
        let mut out = kind.to_string();
        if let Ok(root) = usize::try_from(code[1]) {
            out.push_str(&format!(" with root {root}"));
        }
        if let Some(op) = usize::try_from(code[2]).ok().and_then(|o| Call::OPS.get(o)) {
            out.push_str(&format!(" with op {op}"));
        }
        out
    }
}

pub(super) const META_DIMS: usize = 8;
/// The call (3), the dtype, the rank count and the dims.
pub(super) const META_LEN: usize = 3 + 2 + META_DIMS;

pub(super) fn dtype_code(d: DType) -> i64 {
    match d {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::I32 => 2,
        DType::U32 => 3,
        DType::U8 => 4,
    }
}

pub(super) fn code_dtype(c: i64) -> Option<DType> {
    [DType::F32, DType::F16, DType::I32, DType::U32, DType::U8]
        .get(usize::try_from(c).ok()?)
        .copied()
}

/// What an empty buffer points at. An empty `Vec<u8>`'s dangling pointer is 0x1, which is
/// Open MPI's `MPI_IN_PLACE`: handing it over as a receive buffer is `MPI_ERR_ARG`.
pub(super) static EMPTY: [u64; 2] = [0; 2];

pub(super) fn mpi_type(d: DType) -> ffi::MPI_Datatype {
    // SAFETY: reading MPI's predefined handles, valid after MPI_Init.
    unsafe {
        match d {
            DType::F32 | DType::F16 => ffi::RSMPI_FLOAT,
            DType::I32 => ffi::RSMPI_INT32_T,
            DType::U32 => ffi::RSMPI_UINT32_T,
            DType::U8 => ffi::RSMPI_UINT8_T,
        }
    }
}

pub(super) fn mpi_op(op: ReduceOp) -> ffi::MPI_Op {
    // SAFETY: reading MPI's predefined handles, valid after MPI_Init.
    unsafe {
        match op {
            ReduceOp::Sum | ReduceOp::Mean => ffi::RSMPI_SUM,
            ReduceOp::Max => ffi::RSMPI_MAX,
            ReduceOp::Min => ffi::RSMPI_MIN,
            ReduceOp::Product => ffi::RSMPI_PROD,
        }
    }
}
