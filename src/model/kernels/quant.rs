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
    /// `d: f16, qs: [i8; 32]`, value = d·q.
    Q8_0,
}

impl WeightFormat {
    /// Bytes per 32-value block.
    pub const fn block_bytes(self) -> usize {
        match self {
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
            Self::Q8_0 => 34,
        }
    }
}

/// 32 activations quantized to 8 bits: llama.cpp's `block_q8_1` with its f16 fields widened
/// to f32 (their values are f16-rounded, so nothing differs but the layout).
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C, align(8))]
pub struct ActBlock {
    /// Scale, f16-rounded.
    pub d: f32,
    /// `d·Σqs`, f16-rounded; only Q4_1's kernel uses it.
    pub s: f32,
    pub qs: [i8; QK],
}

impl ActBlock {
    pub const ZERO: Self = Self { d: 0.0, s: 0.0, qs: [0; QK] };
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
            WeightFormat::Q8_0 => out.extend(blk[2..34].iter().map(|&q| d * (q as i8) as f32)),
        }
    }
    out
}
