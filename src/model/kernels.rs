//! Matrix multiplication against quantized weights.
//!
//! [`QLinear`] is the one entry point the model forward uses for weight matmuls. For Q4_0, Q4_1
//! and Q8_0 weights it runs our own kernels (candle 0.11's Q4_1 dot product is scalar code):
//! the activations are quantized to 8 bits once per matmul, as llama.cpp does, then every
//! output is an integer dot product per 32-value block, AVX2 when the CPU has it (detected at
//! run time) and portable scalar code with the same arithmetic otherwise, threaded over output
//! rows on rayon's pool. Other formats go through candle's `QMatMul`. AMX is never used: it
//! traps in the virtual machines we run on.

mod avx2;
mod quant;

use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{DType, Device, Module, Result, Storage, Tensor};
use rayon::prelude::*;

use quant::{ActBlock, WeightFormat, QK};

/// Which implementation of our kernels runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelPath {
    /// AVX2 + FMA + F16C.
    Avx2,
    /// Portable code, bit-identical results to [`KernelPath::Avx2`].
    Scalar,
}

impl KernelPath {
    /// The fastest path this CPU supports.
    pub fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        if avx2::available() {
            return Self::Avx2;
        }
        Self::Scalar
    }
}

/// A linear layer `y = x · Wᵀ` whose weight `W` (`[out, in]`) stays quantized.
#[derive(Debug, Clone)]
pub struct QLinear {
    weight: Arc<QTensor>,
    /// Set when our kernels handle this weight's format and shape.
    format: Option<WeightFormat>,
    fallback: QMatMul,
    out_features: usize,
    in_features: usize,
}

impl QLinear {
    pub fn new(weight: Arc<QTensor>) -> Result<Self> {
        let (out_features, in_features) = weight.shape().dims2()?;
        let format = match weight.dtype() {
            GgmlDType::Q4_0 => Some(WeightFormat::Q4_0),
            GgmlDType::Q4_1 => Some(WeightFormat::Q4_1),
            GgmlDType::Q8_0 => Some(WeightFormat::Q8_0),
            _ => None,
        }
        .filter(|_| in_features % QK == 0 && weight.device().is_cpu());
        Ok(Self { fallback: QMatMul::from_arc(weight.clone())?, weight, format, out_features, in_features })
    }

    pub fn out_features(&self) -> usize {
        self.out_features
    }

    pub fn in_features(&self) -> usize {
        self.in_features
    }

    /// Whether this layer runs our own kernels (else candle's `QMatMul`).
    pub fn uses_own_kernels(&self) -> bool {
        self.format.is_some()
    }

    /// `x`: `[..., in]` f32; returns `[..., out]` f32.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_on(x, KernelPath::detect())
    }

    /// [`QLinear::forward`] on a chosen kernel path (benchmarks and tests compare them).
    pub fn forward_on(&self, x: &Tensor, path: KernelPath) -> Result<Tensor> {
        match self.format {
            Some(format) if x.device().is_cpu() && x.dtype() == DType::F32 => {
                self.forward_own(x, format, path)
            }
            _ => self.fallback.forward(x),
        }
    }

    /// candle's own quantized matmul for this weight (benchmarks compare against it).
    pub fn forward_candle(&self, x: &Tensor) -> Result<Tensor> {
        self.fallback.forward(x)
    }

    fn forward_own(&self, x: &Tensor, format: WeightFormat, path: KernelPath) -> Result<Tensor> {
        let dims = x.dims();
        let k = self.in_features;
        if dims.last() != Some(&k) {
            candle_core::bail!(
                "QLinear: input's last dimension is {:?}, the weight expects {k}",
                dims.last()
            );
        }
        let m = x.elem_count() / k;
        let nb = k / QK;
        let x = x.contiguous()?;
        let (storage, layout) = x.storage_and_layout();
        let Storage::Cpu(cpu) = &*storage else { candle_core::bail!("QLinear: input is not on the CPU") };
        let xs = &cpu.as_slice::<f32>()?[layout.start_offset()..layout.start_offset() + m * k];

        let mut acts = vec![ActBlock::ZERO; m * nb];
        if m >= 16 {
            acts.par_chunks_mut(nb).zip(xs.par_chunks(k)).for_each(|(out, row)| quantize_row(path, row, out));
        } else {
            for (out, row) in acts.chunks_mut(nb).zip(xs.chunks(k)) {
                quantize_row(path, row, out);
            }
        }
        drop(storage);

        let data = self.weight.data()?;
        let mut out = vec![0f32; m * self.out_features];
        matmul(format, path, &data, self.out_features, nb, &acts, m, &mut out);

        let mut out_dims = dims.to_vec();
        *out_dims.last_mut().expect("checked above") = self.out_features;
        Tensor::from_vec(out, out_dims, &Device::Cpu)
    }
}

/// Activation rows handled together against one weight row.
const ROW_TILE: usize = 4;

/// Output pointer shared by tasks that write disjoint columns.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: every task writes a disjoint set of elements (its own output columns).
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// Through a method so closures capture the whole (Send) wrapper, not its raw field.
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// `out[i, j] = Σ acts[i] · w[j]` for `m` activation rows and `n` weight rows of `nb` blocks.
#[allow(clippy::too_many_arguments)]
fn matmul(
    format: WeightFormat,
    path: KernelPath,
    w: &[u8],
    n: usize,
    nb: usize,
    acts: &[ActBlock],
    m: usize,
    out: &mut [f32],
) {
    let row_bytes = nb * format.block_bytes();
    assert!(w.len() >= n * row_bytes, "weight data shorter than its shape");
    assert_eq!(acts.len(), m * nb);
    assert_eq!(out.len(), m * n);
    // Enough tasks per thread to balance, each a contiguous run of weight rows that stays in
    // cache while every activation row streams past it.
    let tasks = (rayon::current_num_threads() * 4).min(n).max(1);
    let rows_per_task = n.div_ceil(tasks);
    let out_ptr = OutPtr(out.as_mut_ptr());
    (0..n.div_ceil(rows_per_task)).into_par_iter().for_each(|t| {
        let j0 = t * rows_per_task;
        let j1 = (j0 + rows_per_task).min(n);
        let store = |i: usize, j: usize, v: f32| {
            debug_assert!(i < m && j < n);
            // SAFETY: in bounds (i < m, j < n) and column j belongs to this task only.
            unsafe { *out_ptr.get().add(i * n + j) = v };
        };
        let act_row = |i: usize| &acts[i * nb..(i + 1) * nb];
        let mut i = 0;
        while i + ROW_TILE <= m {
            let ys: [&[ActBlock]; ROW_TILE] = std::array::from_fn(|r| act_row(i + r));
            for j in j0..j1 {
                let wr = &w[j * row_bytes..(j + 1) * row_bytes];
                let dots = dot_rows(format, path, wr, nb, ys);
                for (r, v) in dots.into_iter().enumerate() {
                    store(i + r, j, v);
                }
            }
            i += ROW_TILE;
        }
        for i in i..m {
            let ys = [act_row(i)];
            for j in j0..j1 {
                let wr = &w[j * row_bytes..(j + 1) * row_bytes];
                store(i, j, dot_rows(format, path, wr, nb, ys)[0]);
            }
        }
    });
}

fn quantize_row(path: KernelPath, x: &[f32], out: &mut [ActBlock]) {
    match path {
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx2 if avx2::available() => {
            assert_eq!(x.len(), out.len() * QK);
            // SAFETY: the CPU features are checked just above, the lengths asserted.
            unsafe { avx2::quantize_row(x, out) }
        }
        _ => quant::quantize_row(x, out),
    }
}

#[inline]
fn dot_rows<const R: usize>(
    format: WeightFormat,
    path: KernelPath,
    w: &[u8],
    nb: usize,
    ys: [&[ActBlock]; R],
) -> [f32; R] {
    match path {
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx2 if avx2::available() => {
            // SAFETY: the CPU features are checked just above; the caller sized `w` and `ys`.
            unsafe { avx2::dot_rows(format, w, nb, ys) }
        }
        _ => ys.map(|y| quant::dot_row(format, w, y)),
    }
}

#[cfg(test)]
mod tests;
