//! Block formats, activation quantization and the portable F16 kernel.
//!
//! Activations are quantized as llama.cpp quantizes them, so that our matmuls give the numbers
//! llama.cpp gives on the same GGUF: per 32 values to 8 bits with an f16 scale (plus, for the
//! formats with a minimum, the f16 block sum `s = d·Σq`). The block formats' dot products run on
//! weights repacked eight rows at a time ([`super::packed`]).

use half::f16;

/// Values per quantization block, for every format here.
pub const QK: usize = 32;

/// Weight formats with our own kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightFormat {
    /// `d: f16, qs: [u8; 16]`, value = d·(nibble − 8).
    Q4_0,
    /// `d: f16, m: f16, qs: [u8; 16]`, value = d·nibble + m.
    Q4_1,
    /// `d: f16, qh: u32, qs: [u8; 16]`, value = d·(q − 16) with q = nibble + 16·bit.
    Q5_0,
    /// `d: f16, m: f16, qh: u32, qs: [u8; 16]`, value = d·q + m with q = nibble + 16·bit.
    Q5_1,
    /// `d: f16, qs: [i8; 32]`, value = d·q.
    Q8_0,
}

impl WeightFormat {
    /// Bytes per 32-value block.
    pub const fn block_bytes(self) -> usize {
        match self {
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
            Self::Q5_0 => 22,
            Self::Q5_1 => 24,
            Self::Q8_0 => 34,
        }
    }
}

/// 32 activations quantized to 8 bits: llama.cpp's `block_q8_1` with its f16 fields widened
/// to f32 (their values are f16-rounded, so nothing differs but the layout), plus the exact
/// sum of the quants.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C, align(32))]
pub struct ActBlock {
    pub qs: [i8; QK],
    /// `Σ qs`: the kernels multiply unsigned by signed bytes, so signed weight quants are read
    /// as `q + offset` and `offset · sum` takes the excess back out exactly.
    pub sum: i32,
    /// Scale, f16-rounded.
    pub d: f32,
    /// `d·Σqs`, f16-rounded; only the kernels of formats with a minimum use it.
    pub s: f32,
}

impl ActBlock {
    pub const ZERO: Self = Self { qs: [0; QK], sum: 0, d: 0.0, s: 0.0 };
}

fn f16_round(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

#[inline]
pub fn read_f16(bytes: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([bytes[at], bytes[at + 1]])).to_f32()
}

/// Quantizes one row (`x.len()` a multiple of 32) into `out` (`x.len() / 32` blocks).
pub fn quantize_row(x: &[f32], out: &mut [ActBlock]) {
    debug_assert_eq!(x.len(), out.len() * QK);
    for (chunk, block) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let amax = chunk.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        let mut sum = 0i32;
        for (q, &v) in block.qs.iter_mut().zip(chunk) {
            // Round half to even, like `_mm256_round_ps(_, _MM_ROUND_NEAREST)`.
            let r = (v * id).round_ties_even() as i32;
            *q = r as i8;
            sum += r;
        }
        block.sum = sum;
        block.d = f16_round(d);
        block.s = f16_round(d * sum as f32);
    }
}

/// Dequantizes one weight row (for tests and reference computations).
#[cfg(test)]
pub fn dequantize_row(format: WeightFormat, w: &[u8]) -> Vec<f32> {
    let offset = format.quant_offset();
    let mut out = Vec::with_capacity(w.len() / format.block_bytes() * QK);
    for blk in w.chunks_exact(format.block_bytes()) {
        let (q, d, m) = super::packed::gguf_block(format, blk);
        let (d, m) =
            (f16::from_bits(u16::from_le_bytes(d)).to_f32(), f16::from_bits(u16::from_le_bytes(m)).to_f32());
        out.extend(q.iter().map(|&q| match format {
            WeightFormat::Q8_0 => d * (q as i8) as f32,
            _ => d * (q as i32 - offset) as f32 + m,
        }));
    }
    out
}

/// F16 weights against f16-rounded activations, in the order of llama.cpp's AVX `vec_dot_f16`:
/// four accumulators of eight lanes over each 32 values, then a fixed reduction.
pub fn dot_row_f16(w: &[u8], y: &[[f32; QK]]) -> f32 {
    let mut acc = [[0f32; 8]; 4];
    for (blk, ys) in w.chunks_exact(2 * QK).zip(y) {
        for (a, (lane_w, lane_y)) in acc.iter_mut().zip(blk.chunks_exact(16).zip(ys.chunks_exact(8))) {
            for l in 0..8 {
                a[l] = read_f16(lane_w, 2 * l).mul_add(lane_y[l], a[l]);
            }
        }
    }
    reduce_f16_acc(&acc)
}

/// llama.cpp's `GGML_F32x8_REDUCE` of four accumulators.
#[inline]
pub fn reduce_f16_acc(acc: &[[f32; 8]; 4]) -> f32 {
    let x: [f32; 8] = std::array::from_fn(|l| (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]));
    let t0: [f32; 4] = std::array::from_fn(|i| x[i] + x[i + 4]);
    let t1 = [t0[0] + t0[1], t0[2] + t0[3]];
    t1[0] + t1[1]
}

/// Activations rounded to f16 (F16 weights' dot product reads them so, as llama.cpp does).
pub fn round_row_f16(x: &[f32], out: &mut [[f32; QK]]) {
    for (chunk, block) in x.chunks_exact(QK).zip(out.iter_mut()) {
        for (o, &v) in block.iter_mut().zip(chunk) {
            *o = f16_round(v);
        }
    }
}
