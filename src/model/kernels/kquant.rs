//! K-quant super-blocks (256 values: Q4_K, Q5_K, Q6_K) against activations quantized per 256
//! values (llama.cpp's `block_q8_K`), portable code.
//!
//! As in llama.cpp, each super-block's dot product is an exact integer sum (quants × activation
//! quants × sub-block scales, and the minimums against the activations' 16-value sums), scaled
//! once by the f16 super-block scales and the activation scale. Our AVX2 code computes the same
//! integers, so both paths give identical bits.

use super::quant::read_f16;

/// Values per super-block.
pub const QK_K: usize = 256;

/// 256 activations quantized to 8 bits with one f32 scale, and their sums per 16 values.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C, align(32))]
pub struct ActBlockK {
    pub qs: [i8; QK_K],
    pub bsums: [i16; QK_K / 16],
    pub d: f32,
}

impl ActBlockK {
    pub const ZERO: Self = Self { qs: [0; QK_K], bsums: [0; QK_K / 16], d: 0.0 };
}

/// llama.cpp's `quantize_row_q8_K`: the scale maps the value of largest magnitude to −127
/// (rounding half to even, as its `nearest_int`).
pub fn quantize_row_k(x: &[f32], out: &mut [ActBlockK]) {
    debug_assert_eq!(x.len(), out.len() * QK_K);
    for (chunk, block) in x.chunks_exact(QK_K).zip(out.iter_mut()) {
        let (mut max, mut amax) = (0f32, 0f32);
        for &v in chunk {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            *block = ActBlockK::ZERO;
            continue;
        }
        let iscale = -127.0 / max;
        for (q, &v) in block.qs.iter_mut().zip(chunk) {
            *q = ((iscale * v).round_ties_even() as i32).min(127) as i8;
        }
        for (sum, group) in block.bsums.iter_mut().zip(block.qs.chunks_exact(16)) {
            *sum = group.iter().map(|&q| q as i16).sum();
        }
        block.d = 1.0 / iscale;
    }
}

/// The 6-bit scales and minimums of Q4_K/Q5_K's eight 32-value sub-blocks (llama.cpp's
/// `get_scale_min_k4`).
#[inline]
pub fn scales_mins(packed: &[u8]) -> ([u8; 8], [u8; 8]) {
    let (mut sc, mut m) = ([0u8; 8], [0u8; 8]);
    for j in 0..8 {
        if j < 4 {
            sc[j] = packed[j] & 63;
            m[j] = packed[j + 4] & 63;
        } else {
            sc[j] = (packed[j + 4] & 0xF) | ((packed[j - 4] >> 6) << 4);
            m[j] = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
        }
    }
    (sc, m)
}

/// The 256 unsigned quants of a Q4_K (`high_bits` None) or Q5_K super-block, in value order:
/// each 64 values are 32 low nibbles then 32 high nibbles of 32 bytes; Q5_K's fifth bit of
/// value `64c + 32h + l` is bit `2c + h` of `qh[l]`.
#[inline]
pub fn unpack_k45(qs: &[u8], high_bits: Option<&[u8]>) -> [u8; QK_K] {
    let mut q = [0u8; QK_K];
    for c in 0..4 {
        for l in 0..32 {
            let byte = qs[32 * c + l];
            q[64 * c + l] = byte & 0xF;
            q[64 * c + 32 + l] = byte >> 4;
            if let Some(qh) = high_bits {
                q[64 * c + l] |= ((qh[l] >> (2 * c)) & 1) << 4;
                q[64 * c + 32 + l] |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
            }
        }
    }
    q
}

/// The 256 unsigned 6-bit quants of a Q6_K super-block (value = quant − 32), in value order.
#[inline]
pub fn unpack_q6k(ql: &[u8], qh: &[u8]) -> [u8; QK_K] {
    let mut q = [0u8; QK_K];
    for half in 0..2 {
        let (ql, qh, out) = (&ql[64 * half..], &qh[32 * half..], &mut q[128 * half..]);
        for l in 0..32 {
            out[l] = (ql[l] & 0xF) | ((qh[l] & 3) << 4);
            out[l + 32] = (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4);
            out[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
            out[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
        }
    }
    q
}

/// K-quant weight formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KFormat {
    /// `d, dmin: f16, scales: [u8; 12], qs: [u8; 128]`; value = d·sc·q − dmin·m.
    Q4K,
    /// Q4_K's fields with `qh: [u8; 32]` before `qs` (a fifth bit per value).
    Q5K,
    /// `ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16`; value = d·sc·(q − 32).
    Q6K,
}

impl KFormat {
    pub const fn block_bytes(self) -> usize {
        match self {
            Self::Q4K => 144,
            Self::Q5K => 176,
            Self::Q6K => 210,
        }
    }
}

/// One super-block's contribution as exact integers: `(Σ sc·q·y, Σ m·Σy)`, and its f16 scales
/// `(d, dmin)`. Q6_K's `q − 32` offset is folded into the first sum; it has no minimums.
#[inline]
pub fn block_sums(format: KFormat, blk: &[u8], a: &ActBlockK) -> (i32, i32, f32, f32) {
    match format {
        KFormat::Q4K | KFormat::Q5K => {
            let (sc, m) = scales_mins(&blk[4..16]);
            let q = match format {
                KFormat::Q4K => unpack_k45(&blk[16..144], None),
                _ => unpack_k45(&blk[48..176], Some(&blk[16..48])),
            };
            let (mut sumi, mut summ) = (0i32, 0i32);
            for j in 0..8 {
                let dot: i32 = (0..32).map(|l| q[32 * j + l] as i32 * a.qs[32 * j + l] as i32).sum();
                sumi += sc[j] as i32 * dot;
                summ += m[j] as i32 * (a.bsums[2 * j] as i32 + a.bsums[2 * j + 1] as i32);
            }
            (sumi, summ, read_f16(blk, 0), read_f16(blk, 2))
        }
        KFormat::Q6K => {
            let q = unpack_q6k(&blk[..128], &blk[128..192]);
            let scales = &blk[192..208];
            let mut sumi = 0i32;
            for g in 0..16 {
                let sc = scales[g] as i8 as i32;
                let dot: i32 = (0..16).map(|l| q[16 * g + l] as i32 * a.qs[16 * g + l] as i32).sum();
                sumi += sc * (dot - 32 * a.bsums[g] as i32);
            }
            (sumi, 0, read_f16(blk, 208), 0.0)
        }
    }
}

/// Dot product of one K-quant weight row with one activation row.
pub fn dot_row_k(format: KFormat, w: &[u8], y: &[ActBlockK]) -> f32 {
    let (mut acc, mut acc_min) = (0f32, 0f32);
    for (blk, a) in w.chunks_exact(format.block_bytes()).zip(y) {
        let (sumi, summ, d, dmin) = block_sums(format, blk, a);
        acc = (d * a.d).mul_add(sumi as f32, acc);
        acc_min = (dmin * a.d).mul_add(summ as f32, acc_min);
    }
    acc - acc_min
}
