//! Matrix multiplication against quantized weights.
//!
//! [`QLinear`] is the one entry point the model forward uses for weight matmuls. For Q4_0, Q4_1,
//! Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K and F16 weights it runs our own kernels: the activations
//! are quantized once per matmul as llama.cpp does (8 bits per 32 values for the 32-value
//! formats, per 256 values for the K-quants, f16 rounding for F16), then every output is built
//! from exact integer dot products per block, with AVX-512 VNNI (on 256-bit vectors) or AVX2
//! when the CPU has them (detected at run time) and portable scalar code with the same
//! arithmetic otherwise, threaded over output rows on the engine's spinning team
//! ([`super::team`]). The 32-value formats are repacked at load eight weight rows per vector
//! ([`packed`]); the packed copy is the only one kept. Other formats go through candle's
//! `QMatMul`. AMX is never used: it traps in the virtual machines we run on.
//!
//! Every output element is computed by the same operations whatever the number of input rows
//! (rows are tiled, but each row has its own accumulators), so a row's result never depends on
//! the rows batched with it; every path gives the same bits.

mod kquant;
mod packed;
mod quant;
mod x86;
mod x86_f16;
mod x86_k;
mod x86_packed;

use std::ops::Range;
use std::sync::{Arc, OnceLock};

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{DType, Device, Module, Result, Storage, Tensor};

use super::team::{DisjointPtr, Team};
use kquant::{ActBlockK, KFormat, QK_K};
use quant::{ActBlock, WeightFormat, QK};

/// A weight format our kernels handle, by the activation form its dot product reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// 32-value blocks against 8-bit activations per 32 values.
    Block(WeightFormat),
    /// 256-value super-blocks against 8-bit activations per 256 values.
    K(KFormat),
    /// F16 against f16-rounded activations.
    F16,
}

impl Format {
    fn of(dtype: GgmlDType) -> Option<Self> {
        Some(match dtype {
            GgmlDType::Q4_0 => Self::Block(WeightFormat::Q4_0),
            GgmlDType::Q4_1 => Self::Block(WeightFormat::Q4_1),
            GgmlDType::Q5_0 => Self::Block(WeightFormat::Q5_0),
            GgmlDType::Q5_1 => Self::Block(WeightFormat::Q5_1),
            GgmlDType::Q8_0 => Self::Block(WeightFormat::Q8_0),
            GgmlDType::Q4K => Self::K(KFormat::Q4K),
            GgmlDType::Q5K => Self::K(KFormat::Q5K),
            GgmlDType::Q6K => Self::K(KFormat::Q6K),
            GgmlDType::F16 => Self::F16,
            _ => return None,
        })
    }

    /// Values per block (the row length must be a multiple).
    fn block_values(self) -> usize {
        match self {
            Self::K(_) => QK_K,
            Self::Block(_) | Self::F16 => QK,
        }
    }

    fn block_bytes(self) -> usize {
        match self {
            Self::Block(f) => f.block_bytes(),
            Self::K(f) => f.block_bytes(),
            Self::F16 => 2 * QK,
        }
    }
}

/// Which implementation of our kernels runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelPath {
    /// AVX2's features plus AVX-512 F/BW/DQ/VL/VNNI: 256-bit vectors, and 512-bit ones for F16.
    Avx512Vnni,
    /// AVX2 + FMA + F16C.
    Avx2,
    /// Portable code, bit-identical results to [`KernelPath::Avx2`].
    Scalar,
}

/// The path [`QLinear::forward`] runs, fixed on first use.
static IN_USE: OnceLock<KernelPath> = OnceLock::new();

impl KernelPath {
    /// The fastest path this CPU supports.
    pub fn detect() -> Self {
        Self::available().into_iter().next().unwrap_or(Self::Scalar)
    }

    /// Its name in `REPAIRBENCH_KERNEL_PATH`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Avx512Vnni => "avx512",
            Self::Avx2 => "avx2",
            Self::Scalar => "scalar",
        }
    }

    /// The path the model runs: `REPAIRBENCH_KERNEL_PATH` when set (it must name a path this
    /// CPU runs), else the fastest. Checked when a model loads, so a bad value is an error then.
    pub fn chosen() -> std::result::Result<Self, crate::env::BadVariable> {
        let Some(value) = crate::env::get(crate::env::KERNEL_PATH) else { return Ok(Self::detect()) };
        Self::available().into_iter().find(|p| p.name() == value.trim()).ok_or(crate::env::BadVariable {
            name: crate::env::KERNEL_PATH,
            value,
            expected: "avx512, avx2 or scalar, a path this CPU runs",
        })
    }

    /// The path in use: [`Self::chosen`], or the fastest where that is an error.
    pub fn in_use() -> Self {
        *IN_USE.get_or_init(|| Self::chosen().unwrap_or_else(|_| Self::detect()))
    }

    /// Every path this CPU runs, fastest first (the scalar path last).
    pub fn available() -> Vec<Self> {
        let mut paths = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            if x86::has_avx512_vnni() {
                paths.push(Self::Avx512Vnni);
            }
            if x86::has_avx2() {
                paths.push(Self::Avx2);
            }
        }
        paths.push(Self::Scalar);
        paths
    }
}

/// The CPU's model name and the vector features that matter to our kernels and llama.cpp's,
/// as detected at run time: benchmark output records it, since our machines' CPUs differ.
pub fn cpu_description() -> String {
    let name = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    #[allow(unused_mut)]
    let mut features: Vec<&str> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! has {
            ($($f:tt),*) => {$(if is_x86_feature_detected!($f) { features.push($f); })*};
        }
        has!("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512vnni", "avxvnni");
    }
    format!("{name} [{}], kernel path {:?}", features.join(" "), KernelPath::in_use())
}

/// A linear layer `y = x · Wᵀ` whose weight `W` (`[out, in]`) stays quantized.
#[derive(Debug, Clone)]
pub struct QLinear {
    /// The weight as loaded; `None` for the block formats, whose one copy is `packed`.
    weight: Option<Arc<QTensor>>,
    dtype: GgmlDType,
    /// Set when our kernels handle this weight's format and shape.
    format: Option<Format>,
    /// candle's matmul for this weight, made on first use: for F16 it holds a dequantized copy
    /// of the weight, which our own kernels never need.
    fallback: Arc<OnceLock<QMatMul>>,
    /// Block-format weights repacked for our kernels ([`packed`]).
    packed: Option<Arc<Vec<u8>>>,
    out_features: usize,
    in_features: usize,
}

impl QLinear {
    pub fn new(weight: Arc<QTensor>) -> Result<Self> {
        let (out_features, in_features) = weight.shape().dims2()?;
        let dtype = weight.dtype();
        let format = Format::of(dtype)
            .filter(|f| in_features.is_multiple_of(f.block_values()) && weight.device().is_cpu());
        let fallback = Arc::new(OnceLock::new());
        if format.is_none() {
            // Made now, so that a weight candle cannot take fails at load time.
            let _ = fallback.set(QMatMul::from_arc(weight.clone())?);
        }
        let (weight, packed) = match format {
            Some(Format::Block(f)) => {
                (None, Some(Arc::new(packed::pack(f, &weight.data()?, out_features, in_features / QK))))
            }
            _ => (Some(weight), None),
        };
        Ok(Self { weight, dtype, format, fallback, packed, out_features, in_features })
    }

    /// The weight as a candle tensor (for block formats, rebuilt from the packed copy).
    pub fn weight(&self) -> Result<Arc<QTensor>> {
        match (&self.weight, &self.packed, self.format) {
            (Some(weight), ..) => Ok(weight.clone()),
            (None, Some(data), Some(Format::Block(f))) => {
                let raw = packed::unpack(f, data, self.out_features, self.in_features / QK);
                let dims = vec![self.out_features, self.in_features];
                let weight = candle_core::quantized::ggml_file::qtensor_from_ggml(
                    self.dtype,
                    &raw,
                    dims,
                    &Device::Cpu,
                )?;
                Ok(Arc::new(weight))
            }
            _ => unreachable!("only block formats are held packed alone"),
        }
    }

    /// Rows `ids` of the weight as f32, `[ids.len(), in]`: the embedding lookup of an embedding
    /// matrix.
    pub fn rows(&self, ids: &[u32]) -> Result<Tensor> {
        let k = self.in_features;
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= self.out_features) {
            candle_core::bail!("row {bad} of a weight with {} rows", self.out_features);
        }
        match (&self.packed, self.format) {
            (Some(data), Some(Format::Block(f))) => {
                let nb = k / QK;
                let group_bytes = nb * f.packed_block_bytes();
                let mut out = vec![0f32; ids.len() * k];
                for (&id, row) in ids.iter().zip(out.chunks_exact_mut(k)) {
                    let (g, j) = (id as usize / packed::GROUP, id as usize % packed::GROUP);
                    packed::dequantize_row(f, &data[g * group_bytes..][..group_bytes], j, row);
                }
                Tensor::from_vec(out, (ids.len(), k), &Device::Cpu)
            }
            _ => self.weight()?.embedding(&Tensor::new(ids, &Device::Cpu)?),
        }
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
        self.forward_on(x, KernelPath::in_use())
    }

    /// [`QLinear::forward`] on a chosen kernel path (benchmarks and tests compare them).
    pub fn forward_on(&self, x: &Tensor, path: KernelPath) -> Result<Tensor> {
        match self.format {
            Some(format) if x.device().is_cpu() && x.dtype() == DType::F32 => {
                self.forward_own(x, format, path)
            }
            _ => self.candle()?.forward(x),
        }
    }

    /// candle's own quantized matmul for this weight (benchmarks compare against it).
    pub fn forward_candle(&self, x: &Tensor) -> Result<Tensor> {
        self.candle()?.forward(x)
    }

    fn candle(&self) -> Result<&QMatMul> {
        if let Some(matmul) = self.fallback.get() {
            return Ok(matmul);
        }
        let matmul = QMatMul::from_arc(self.weight()?)?;
        Ok(self.fallback.get_or_init(|| matmul))
    }

    fn forward_own(&self, x: &Tensor, format: Format, path: KernelPath) -> Result<Tensor> {
        let dims = x.dims();
        let k = self.in_features;
        if dims.last() != Some(&k) {
            candle_core::bail!(
                "QLinear: input's last dimension is {:?}, the weight expects {k}",
                dims.last()
            );
        }
        let m = x.elem_count() / k;
        let nb = k / format.block_values();
        let x = x.contiguous()?;
        let (storage, layout) = x.storage_and_layout();
        let Storage::Cpu(cpu) = &*storage else { candle_core::bail!("QLinear: input is not on the CPU") };
        let xs = &cpu.as_slice::<f32>()?[layout.start_offset()..layout.start_offset() + m * k];
        let mut out = vec![0f32; m * self.out_features];
        let shape = Shape { n: self.out_features, nb, m, row_bytes: nb * format.block_bytes() };
        match format {
            Format::Block(f) => {
                let acts = activations(xs, k, nb, ActBlock::ZERO, |row, out| quantize_row(path, row, out));
                let packed = self.packed.as_ref().expect("block formats are packed at load");
                let shape = Shape { row_bytes: nb * f.packed_block_bytes(), ..shape };
                matmul(&BlockDot { format: f, path }, packed, &acts, shape, &mut out);
            }
            Format::K(f) => {
                let data = self.weight()?;
                let data = data.data()?;
                let acts = activations(xs, k, nb, ActBlockK::ZERO, |row, out| quantize_row_k(path, row, out));
                matmul(&KDot { format: f, path }, &data, &acts, shape, &mut out);
            }
            Format::F16 => {
                let data = self.weight()?;
                let data = data.data()?;
                let acts = activations(xs, k, nb, [0f32; QK], |row, out| f16::round_row_f16(path, row, out));
                f16::matmul_f16(path, &data, &acts, shape, &mut out);
            }
        }
        drop(storage);

        let mut out_dims = dims.to_vec();
        *out_dims.last_mut().expect("checked above") = self.out_features;
        Tensor::from_vec(out, out_dims, &Device::Cpu)
    }
}

/// `m` rows of `k` inputs in the activation form of a format (`nb` blocks per row).
fn activations<A: Copy + Send + Sync>(
    xs: &[f32],
    k: usize,
    nb: usize,
    zero: A,
    quantize: impl Fn(&[f32], &mut [A]) + Sync,
) -> Vec<A> {
    let m = xs.len() / k;
    let mut acts = vec![zero; m * nb];
    if m >= 16 {
        let acts_ptr = DisjointPtr(acts.as_mut_ptr());
        Team::global().for_each_range(m, 2, |rows| {
            // SAFETY: tasks quantize disjoint row ranges of `acts`.
            let out = unsafe { acts_ptr.slice(rows.start * nb..rows.end * nb) };
            for (out, row) in out.chunks_mut(nb).zip(xs[rows.start * k..rows.end * k].chunks(k)) {
                quantize(row, out);
            }
        });
    } else {
        for (out, row) in acts.chunks_mut(nb).zip(xs.chunks(k)) {
            quantize(row, out);
        }
    }
    acts
}

/// Dot products of weight rows with `R` activation rows, for one weight format and path.
trait RowDot: Sync {
    type Act: Sync;
    /// Weight rows per unit of `w`: 1, or [`packed::GROUP`] for packed groups.
    const UNIT: usize;
    /// `out[r][UNIT·(u - rows.start) + i] = w_{UNIT·u + i} · ys[r]` for every unit `u` in `rows`
    /// as far as `out[r]` reaches, `C` units at a time (unit `u` is
    /// `w[u * row_bytes..][..row_bytes]`, `nb` blocks).
    fn dot_rows<const R: usize, const C: usize>(
        &self,
        w: &[u8],
        row_bytes: usize,
        rows: Range<usize>,
        nb: usize,
        ys: [&[Self::Act]; R],
        out: &mut [&mut [f32]; R],
    );
}

/// The scalar path: one weight row and one activation row at a time.
fn scalar_rows<A, const R: usize>(
    w: &[u8],
    row_bytes: usize,
    rows: Range<usize>,
    ys: [&[A]; R],
    out: &mut [&mut [f32]; R],
    dot: impl Fn(&[u8], &[A]) -> f32,
) {
    for j in rows.clone() {
        let wr = &w[j * row_bytes..][..row_bytes];
        for r in 0..R {
            out[r][j - rows.start] = dot(wr, ys[r]);
        }
    }
}

/// Runs the x86 entry point `$f` of the path's instruction set, else the scalar code.
macro_rules! dispatch {
    ($path:expr, $f:ident::<$($g:tt),*>($($arg:expr),*), else $scalar:expr) => {
        match $path {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU features are checked just before; the entry points assert sizes.
            KernelPath::Avx512Vnni if x86::has_avx512_vnni() => unsafe { x86::avx512_vnni::$f::<$($g),*>($($arg),*) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            KernelPath::Avx2 if x86::has_avx2() => unsafe { x86::avx2::$f::<$($g),*>($($arg),*) },
            _ => $scalar,
        }
    };
}

// After `dispatch!`, which it uses.
mod f16;

struct BlockDot {
    format: WeightFormat,
    path: KernelPath,
}

impl RowDot for BlockDot {
    type Act = ActBlock;
    const UNIT: usize = packed::GROUP;
    fn dot_rows<const R: usize, const C: usize>(
        &self,
        w: &[u8],
        row_bytes: usize,
        rows: Range<usize>,
        nb: usize,
        ys: [&[ActBlock]; R],
        out: &mut [&mut [f32]; R],
    ) {
        dispatch!(
            self.path,
            packed_rows::<R, C>(self.format, w, row_bytes, rows, nb, ys, out),
            else {
                for g in rows.clone() {
                    let group = &w[g * row_bytes..][..row_bytes];
                    let at = (g - rows.start) * packed::GROUP;
                    for r in 0..R {
                        let v = packed::dot_group(self.format, group, ys[r]);
                        let n = (out[r].len() - at).min(packed::GROUP);
                        out[r][at..at + n].copy_from_slice(&v[..n]);
                    }
                }
            }
        )
    }
}

struct KDot {
    format: KFormat,
    path: KernelPath,
}

impl RowDot for KDot {
    type Act = ActBlockK;
    const UNIT: usize = 1;
    fn dot_rows<const R: usize, const C: usize>(
        &self,
        w: &[u8],
        row_bytes: usize,
        rows: Range<usize>,
        nb: usize,
        ys: [&[ActBlockK]; R],
        out: &mut [&mut [f32]; R],
    ) {
        dispatch!(
            self.path,
            k_rows::<R, C>(self.format, w, row_bytes, rows, nb, ys, out),
            else scalar_rows(w, row_bytes, rows, ys, out, |wr, y| kquant::dot_row_k(self.format, wr, y))
        )
    }
}

/// A matmul's sizes: `n` weight rows of `nb` blocks (`row_bytes` per unit of rows), `m`
/// activation rows.
#[derive(Clone, Copy)]
struct Shape {
    n: usize,
    nb: usize,
    m: usize,
    row_bytes: usize,
}

/// `out[i, j] = Σ acts[i] · w[j]`.
fn matmul<D: RowDot>(dot: &D, w: &[u8], acts: &[D::Act], shape: Shape, out: &mut [f32]) {
    let Shape { n, nb, m, row_bytes } = shape;
    let units = n.div_ceil(D::UNIT);
    assert!(w.len() >= units * row_bytes, "weight data shorter than its shape");
    assert_eq!(acts.len(), m * nb);
    assert_eq!(out.len(), m * n);
    // Enough tasks per thread to balance, each a contiguous run of weight rows that stays in
    // cache while every activation row streams past it.
    let out_ptr = DisjointPtr(out.as_mut_ptr());
    Team::global().for_each_range(units, 4, |units| {
        let tile = Tile { w, row_bytes, first_unit: 0, nb, acts, n, out: out_ptr };
        tile.run_all(dot, m, units);
    });
}

/// One task's view of a matmul: its weight units start at unit `first_unit` of `w`.
struct Tile<'a, A> {
    w: &'a [u8],
    row_bytes: usize,
    first_unit: usize,
    nb: usize,
    acts: &'a [A],
    n: usize,
    out: DisjointPtr<f32>,
}

impl<A> Tile<'_, A> {
    /// Every activation row against `units`.
    fn run_all<D: RowDot<Act = A>>(&self, dot: &D, m: usize, units: Range<usize>) {
        // Activation rows in tiles of 8, then 4, then 1: one weight block is loaded and
        // unpacked once per tile; the fewer the activation rows, the more weight rows a tile
        // holds, so that it keeps as many independent accumulators.
        let mut i = 0;
        while i + 8 <= m {
            self.run::<D, 8, 1>(dot, i, units.clone());
            i += 8;
        }
        while i + 4 <= m {
            self.run::<D, 4, 2>(dot, i, units.clone());
            i += 4;
        }
        for i in i..m {
            self.run::<D, 1, 4>(dot, i, units.clone());
        }
    }

    /// Activation rows `i..i+R` against the weight rows of `units`, `C` units at a time.
    #[inline]
    fn run<D: RowDot<Act = A>, const R: usize, const C: usize>(
        &self,
        dot: &D,
        i: usize,
        units: Range<usize>,
    ) {
        let m = self.acts.len() / self.nb;
        let columns = units.start * D::UNIT..(units.end * D::UNIT).min(self.n);
        assert!(i + R <= m && columns.start <= columns.end);
        let ys: [&[A]; R] = std::array::from_fn(|r| &self.acts[(i + r) * self.nb..][..self.nb]);
        // SAFETY: row i + r < m and columns ⊆ 0..n, so each slice is inside the m × n output;
        // the R slices are on different rows, and these columns belong to this task only.
        let mut out: [&mut [f32]; R] = std::array::from_fn(|r| unsafe {
            std::slice::from_raw_parts_mut(
                self.out.get().add((i + r) * self.n + columns.start),
                columns.len(),
            )
        });
        let local = units.start - self.first_unit..units.end - self.first_unit;
        dot.dot_rows::<R, C>(self.w, self.row_bytes, local, self.nb, ys, &mut out);
    }
}

fn quantize_row_k(path: KernelPath, x: &[f32], out: &mut [ActBlockK]) {
    match path {
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx512Vnni | KernelPath::Avx2 if x86::has_avx2() => {
            // SAFETY: the CPU features are checked just above; the lengths are asserted inside.
            unsafe { x86_k::quantize_row_k(x, out) }
        }
        _ => kquant::quantize_row_k(x, out),
    }
}

fn quantize_row(path: KernelPath, x: &[f32], out: &mut [ActBlock]) {
    match path {
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx512Vnni | KernelPath::Avx2 if x86::has_avx2() => {
            assert_eq!(x.len(), out.len() * QK);
            // SAFETY: the CPU features are checked just above, the lengths asserted.
            unsafe { x86::quantize_row(x, out) }
        }
        _ => quant::quantize_row(x, out),
    }
}

#[cfg(test)]
mod tests;
