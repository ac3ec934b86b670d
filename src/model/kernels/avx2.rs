//! AVX2 + FMA + F16C kernels: the same arithmetic as `quant::dot_row`, several activation rows
//! at a time so that one weight block is loaded and unpacked once for all of them.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use super::quant::{ActBlock, WeightFormat, QK};

const _: () = assert!(QK == 32);

/// Whether this CPU runs the kernels in this module.
pub fn available() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
}

#[inline(always)]
unsafe fn f16_at(p: *const u8) -> f32 {
    let bits = std::ptr::read_unaligned(p as *const u16);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

/// 16 bytes of packed nibbles to 32 bytes 0..15: low nibbles first, then high nibbles.
#[inline(always)]
unsafe fn nibbles(qs: *const u8) -> __m256i {
    let lo = _mm_loadu_si128(qs as *const __m128i);
    let hi = _mm_srli_epi16(lo, 4);
    _mm256_and_si256(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(0x0F))
}

/// Unsigned × signed bytes, summed in eight i32 lanes of four, as f32.
#[inline(always)]
unsafe fn lanes_us(x: __m256i, y: __m256i) -> __m256 {
    let pairs = _mm256_maddubs_epi16(x, y);
    _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
}

/// Signed × signed bytes (x ≠ −128), summed in eight i32 lanes of four, as f32.
#[inline(always)]
unsafe fn lanes_ss(x: __m256i, y: __m256i) -> __m256 {
    lanes_us(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
}

#[inline(always)]
unsafe fn hsum8(v: __m256) -> f32 {
    let r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    let r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    let r = _mm_add_ss(r, _mm_movehdup_ps(r));
    _mm_cvtss_f32(r)
}

#[inline(always)]
unsafe fn act_qs(a: *const ActBlock) -> __m256i {
    _mm256_loadu_si256((*a).qs.as_ptr() as *const __m256i)
}

/// Dot products of one weight row `w` (`nb` blocks) with `R` activation rows `ys[r]`.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `w` must hold `nb` blocks of `format` and every
/// `ys[r]` at least `nb` blocks.
#[inline]
pub unsafe fn dot_rows<const R: usize>(
    format: WeightFormat,
    w: &[u8],
    nb: usize,
    ys: [&[ActBlock]; R],
) -> [f32; R] {
    debug_assert!(w.len() >= nb * format.block_bytes());
    debug_assert!(ys.iter().all(|y| y.len() >= nb));
    let ys = ys.map(|y| y.as_ptr());
    match format {
        WeightFormat::Q4_0 | WeightFormat::Q5_0 | WeightFormat::Q8_0 => {
            dot_signed(format, w.as_ptr(), nb, ys)
        }
        WeightFormat::Q4_1 | WeightFormat::Q5_1 => dot_with_min(format, w.as_ptr(), nb, ys),
    }
}

/// Formats whose value is d·(signed quant): Σ over blocks of d_w·d_a·Σ x·y.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_signed<const R: usize>(
    format: WeightFormat,
    w: *const u8,
    nb: usize,
    ys: [*const ActBlock; R],
) -> [f32; R] {
    let mut acc = [_mm256_setzero_ps(); R];
    let mut blk = w;
    for b in 0..nb {
        let dw = f16_at(blk);
        let x = match format {
            WeightFormat::Q4_0 => _mm256_sub_epi8(nibbles(blk.add(2)), _mm256_set1_epi8(8)),
            // q − 16: the nibble where the fifth bit is set, nibble − 16 (0xF0 | nibble) where not.
            WeightFormat::Q5_0 => _mm256_or_si256(
                nibbles(blk.add(6)),
                _mm256_andnot_si256(bytes_from_bits(blk.add(2)), _mm256_set1_epi8(0xF0u8 as i8)),
            ),
            _ => _mm256_loadu_si256(blk.add(2) as *const __m256i),
        };
        for r in 0..R {
            let a = ys[r].add(b);
            let scale = _mm256_set1_ps(dw * (*a).d);
            acc[r] = _mm256_fmadd_ps(scale, lanes_ss(x, act_qs(a)), acc[r]);
        }
        blk = blk.add(format.block_bytes());
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = hsum8(acc[r]);
    }
    out
}

/// Formats whose value is d·(unsigned quant) + m: the minimum's share comes from the
/// activation block's sum `s`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_with_min<const R: usize>(
    format: WeightFormat,
    w: *const u8,
    nb: usize,
    ys: [*const ActBlock; R],
) -> [f32; R] {
    let mut acc = [_mm256_setzero_ps(); R];
    let mut summs = [0f32; R];
    let mut blk = w;
    for b in 0..nb {
        let dw = f16_at(blk);
        let m = f16_at(blk.add(2));
        let x = match format {
            WeightFormat::Q5_1 => _mm256_or_si256(
                nibbles(blk.add(8)),
                _mm256_and_si256(bytes_from_bits(blk.add(4)), _mm256_set1_epi8(0x10)),
            ),
            _ => nibbles(blk.add(4)),
        };
        for r in 0..R {
            let a = ys[r].add(b);
            summs[r] += m * (*a).s;
            let scale = _mm256_set1_ps(dw * (*a).d);
            acc[r] = _mm256_fmadd_ps(lanes_us(x, act_qs(a)), scale, acc[r]);
        }
        blk = blk.add(format.block_bytes());
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = hsum8(acc[r]) + summs[r];
    }
    out
}

/// 32 bits to 32 bytes: 0xFF where the bit is set (llama.cpp's `bytes_from_bits_32`).
#[inline(always)]
unsafe fn bytes_from_bits(p: *const u8) -> __m256i {
    let bits = std::ptr::read_unaligned(p as *const u32);
    let shuffle =
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000);
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(bits as i32), shuffle);
    let bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1))
}

/// F16 weight row against `R` rows of f16-rounded activations (`quant::dot_row_f16`'s order).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `w` must hold `nb · 32` f16 values and every
/// `ys[r]` at least `nb` blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_rows_f16<const R: usize>(w: &[u8], nb: usize, ys: [&[[f32; QK]]; R]) -> [f32; R] {
    debug_assert!(w.len() >= nb * 2 * QK && ys.iter().all(|y| y.len() >= nb));
    let mut acc = [[_mm256_setzero_ps(); 4]; R];
    let p = w.as_ptr();
    for b in 0..nb {
        let at = |j: usize| p.add(b * 64 + j * 16) as *const __m128i;
        let wv = [
            _mm256_cvtph_ps(_mm_loadu_si128(at(0))),
            _mm256_cvtph_ps(_mm_loadu_si128(at(1))),
            _mm256_cvtph_ps(_mm_loadu_si128(at(2))),
            _mm256_cvtph_ps(_mm_loadu_si128(at(3))),
        ];
        for r in 0..R {
            let y = ys[r].as_ptr().add(b) as *const f32;
            for j in 0..4 {
                acc[r][j] = _mm256_fmadd_ps(wv[j], _mm256_loadu_ps(y.add(8 * j)), acc[r][j]);
            }
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        let [a0, a1, a2, a3] = acc[r];
        let x0 = _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
        let t0 = _mm_add_ps(_mm256_castps256_ps128(x0), _mm256_extractf128_ps(x0, 1));
        let t1 = _mm_hadd_ps(t0, t0);
        out[r] = _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
    }
    out
}

/// `quant::quantize_row` with AVX2: the same values (max, scale and rounding are exact or
/// done in the same f32 operations).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `x.len() == out.len() * 32`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn quantize_row(x: &[f32], out: &mut [ActBlock]) {
    debug_assert_eq!(x.len(), out.len() * QK);
    let sign_bit = _mm256_set1_ps(-0.0);
    for (b, block) in out.iter_mut().enumerate() {
        let p = x.as_ptr().add(b * QK);
        let v = [
            _mm256_loadu_ps(p),
            _mm256_loadu_ps(p.add(8)),
            _mm256_loadu_ps(p.add(16)),
            _mm256_loadu_ps(p.add(24)),
        ];
        let mut amax = _mm256_andnot_ps(sign_bit, v[0]);
        for vi in &v[1..] {
            amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_bit, *vi));
        }
        let m4 = _mm_max_ps(_mm256_extractf128_ps(amax, 1), _mm256_castps256_ps128(amax));
        let m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        let m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        let amax = _mm_cvtss_f32(m4);
        let d = amax / 127.0;
        let id = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
        let q = v.map(|vi| {
            _mm256_cvtps_epi32(_mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                _mm256_mul_ps(vi, id),
            ))
        });
        let sum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        let s4 = _mm_add_epi32(_mm256_extracti128_si256(sum, 1), _mm256_castsi256_si128(sum));
        let s4 = _mm_hadd_epi32(s4, s4);
        let s4 = _mm_hadd_epi32(s4, s4);
        let isum = _mm_cvtsi128_si32(s4);
        // i32 → i16 → i8 with saturation (values are within ±127), then undo the lane
        // interleaving of the 256-bit packs.
        let p16a = _mm256_packs_epi32(q[0], q[1]);
        let p16b = _mm256_packs_epi32(q[2], q[3]);
        let p8 = _mm256_packs_epi16(p16a, p16b);
        let p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(block.qs.as_mut_ptr() as *mut __m256i, p8);
        block.d = f16_round(d);
        block.s = f16_round(d * isum as f32);
    }
}

#[inline(always)]
unsafe fn f16_round(x: f32) -> f32 {
    let h = _mm_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT }>(_mm_set_ss(x));
    _mm_cvtss_f32(_mm_cvtph_ps(h))
}
