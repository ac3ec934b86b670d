//! Block formats and the portable (scalar) kernels.
//!
//! The arithmetic follows llama.cpp's CPU kernels step for step, so that our matmuls give the
//! numbers llama.cpp gives on the same GGUF: activations are quantized per 32 values to 8 bits
//! with an f16 scale (plus, for Q4_1, the f16 block sum `s = d·Σq`), integer products are summed
//! in eight lanes of four values each, each lane is scaled with a fused multiply-add, and the
//! lanes are added in the order of an AVX horizontal sum. The scalar code here computes exactly
//! what the AVX2 code computes; it is the fallback and the reference in the tests.

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
/// to f32 (their values are f16-rounded, so nothing differs but the layout), plus each lane's
/// quant sum times −128 for the VNNI kernels.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C, align(32))]
pub struct ActBlock {
    pub qs: [i8; QK],
    /// `−128 · Σ qs[4l..4l+4]` per lane `l`: VNNI multiplies unsigned by signed bytes, so signed
    /// weight quants are read as `x + 128` and this takes the excess back out exactly.
    pub bias: [i32; 8],
    /// Scale, f16-rounded.
    pub d: f32,
    /// `d·Σqs`, f16-rounded; only the kernels of formats with a minimum use it.
    pub s: f32,
}

impl ActBlock {
    pub const ZERO: Self = Self { qs: [0; QK], bias: [0; 8], d: 0.0, s: 0.0 };
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
        for (l, bias) in block.bias.iter_mut().enumerate() {
            *bias = -128 * block.qs[4 * l..4 * l + 4].iter().map(|&q| q as i32).sum::<i32>();
        }
        block.d = f16_round(d);
        block.s = f16_round(d * sum as f32);
    }
}

/// The horizontal sum of eight lanes in the order of llama.cpp's `hsum_float_8`.
#[inline]
pub fn hsum8(v: &[f32; 8]) -> f32 {
    let r = [v[4] + v[0], v[5] + v[1], v[6] + v[2], v[7] + v[3]];
    (r[0] + r[2]) + (r[1] + r[3])
}

/// Unpacks a 4-bit block: bytes 0..16 hold values 0..16 in their low nibbles and values
/// 16..32 in their high nibbles.
#[inline]
fn nibbles(qs: &[u8]) -> [i32; QK] {
    let mut v = [0i32; QK];
    for j in 0..QK / 2 {
        v[j] = (qs[j] & 0x0F) as i32;
        v[j + QK / 2] = (qs[j] >> 4) as i32;
    }
    v
}

/// A 5-bit block's quants (0..32): `qs` as for 4 bits, the fifth bit of value `j` is bit `j`
/// of the little-endian `qh`.
#[inline]
fn five_bits(qh: &[u8], qs: &[u8]) -> [i32; QK] {
    let high = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    let mut v = nibbles(qs);
    for (j, x) in v.iter_mut().enumerate() {
        *x |= (((high >> j) & 1) << 4) as i32;
    }
    v
}

/// Integer products summed in eight lanes of four consecutive values.
#[inline]
fn lane_sums(x: &[i32; QK], y: &[i8; QK]) -> [i32; 8] {
    let mut lanes = [0i32; 8];
    for (l, lane) in lanes.iter_mut().enumerate() {
        *lane = (4 * l..4 * l + 4).map(|j| x[j] * y[j] as i32).sum();
    }
    lanes
}

/// Dot product of one weight row (raw GGUF block bytes) with one quantized activation row.
pub fn dot_row(format: WeightFormat, w: &[u8], y: &[ActBlock]) -> f32 {
    let bb = format.block_bytes();
    let mut acc = [0f32; 8];
    let mut summs = 0f32;
    for (blk, a) in w.chunks_exact(bb).zip(y) {
        let (x, scale) = match format {
            WeightFormat::Q4_0 => {
                let mut x = nibbles(&blk[2..18]);
                x.iter_mut().for_each(|v| *v -= 8);
                (x, read_f16(blk, 0) * a.d)
            }
            WeightFormat::Q4_1 => {
                summs += read_f16(blk, 2) * a.s;
                (nibbles(&blk[4..20]), read_f16(blk, 0) * a.d)
            }
            WeightFormat::Q5_0 => {
                let mut x = five_bits(&blk[2..6], &blk[6..22]);
                x.iter_mut().for_each(|v| *v -= 16);
                (x, read_f16(blk, 0) * a.d)
            }
            WeightFormat::Q5_1 => {
                summs += read_f16(blk, 2) * a.s;
                (five_bits(&blk[4..8], &blk[8..24]), read_f16(blk, 0) * a.d)
            }
            WeightFormat::Q8_0 => {
                let mut x = [0i32; QK];
                for (v, &b) in x.iter_mut().zip(&blk[2..34]) {
                    *v = b as i8 as i32;
                }
                (x, read_f16(blk, 0) * a.d)
            }
        };
        let lanes = lane_sums(&x, &a.qs);
        for (acc, lane) in acc.iter_mut().zip(lanes) {
            *acc = (lane as f32).mul_add(scale, *acc);
        }
    }
    hsum8(&acc) + summs
}

/// Dequantizes one weight row (for tests and reference computations).
#[cfg(test)]
pub fn dequantize_row(format: WeightFormat, w: &[u8]) -> Vec<f32> {
    let bb = format.block_bytes();
    let mut out = Vec::with_capacity(w.len() / bb * QK);
    for blk in w.chunks_exact(bb) {
        let d = read_f16(blk, 0);
        match format {
            WeightFormat::Q4_0 => out.extend(nibbles(&blk[2..18]).iter().map(|&q| d * (q - 8) as f32)),
            WeightFormat::Q4_1 => {
                let m = read_f16(blk, 2);
                out.extend(nibbles(&blk[4..20]).iter().map(|&q| d * q as f32 + m))
            }
            WeightFormat::Q5_0 => {
                out.extend(five_bits(&blk[2..6], &blk[6..22]).iter().map(|&q| d * (q - 16) as f32))
            }
            WeightFormat::Q5_1 => {
                let m = read_f16(blk, 2);
                out.extend(five_bits(&blk[4..8], &blk[8..24]).iter().map(|&q| d * q as f32 + m))
            }
            WeightFormat::Q8_0 => out.extend(blk[2..34].iter().map(|&q| d * (q as i8) as f32)),
        }
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
