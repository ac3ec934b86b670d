//! AVX2 + FMA kernels: the same arithmetic as `quant::dot_row`, several activation rows at a
//! time so that one weight block is loaded and unpacked once for all of them.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use super::quant::{ActBlock, WeightFormat, QK};

/// Whether this CPU runs the kernels in this module.
pub fn available() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
}

#[inline(always)]
unsafe fn f16_at(p: *const u8) -> f32 {
    let bits = std::ptr::read_unaligned(p as *const u16);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

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

/// Signed × signed bytes, summed in eight i32 lanes of four, as f32.
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

/// Dot products of one weight row `w` (`nb` blocks) with `R` activation rows `ys[r]`.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `w` must hold `nb` blocks of `format` and every `ys[r]`
/// at least `nb` blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_rows<const R: usize>(
    format: WeightFormat,
    w: &[u8],
    nb: usize,
    ys: [&[ActBlock]; R],
) -> [f32; R] {
    debug_assert!(w.len() >= nb * format.block_bytes());
    debug_assert!(ys.iter().all(|y| y.len() >= nb));
    let mut acc = [_mm256_setzero_ps(); R];
    let mut summs = [0f32; R];
    let bb = format.block_bytes();
    let wp = w.as_ptr();
    for b in 0..nb {
        let blk = wp.add(b * bb);
        let dw = f16_at(blk);
        match format {
            WeightFormat::Q4_0 => {
                let x = _mm256_sub_epi8(nibbles(blk.add(2)), _mm256_set1_epi8(8));
                for r in 0..R {
                    let a = ys[r].get_unchecked(b);
                    let y = _mm256_loadu_si256(a.qs.as_ptr() as *const __m256i);
                    acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * a.d), lanes_ss(x, y), acc[r]);
                }
            }
            WeightFormat::Q4_1 => {
                let m = f16_at(blk.add(2));
                let x = nibbles(blk.add(4));
                for r in 0..R {
                    let a = ys[r].get_unchecked(b);
                    summs[r] += m * a.s;
                    let y = _mm256_loadu_si256(a.qs.as_ptr() as *const __m256i);
                    acc[r] = _mm256_fmadd_ps(lanes_us(x, y), _mm256_set1_ps(dw * a.d), acc[r]);
                }
            }
            WeightFormat::Q8_0 => {
                let x = _mm256_loadu_si256(blk.add(2) as *const __m256i);
                for r in 0..R {
                    let a = ys[r].get_unchecked(b);
                    let y = _mm256_loadu_si256(a.qs.as_ptr() as *const __m256i);
                    acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * a.d), lanes_ss(x, y), acc[r]);
                }
            }
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = hsum8(acc[r]) + summs[r];
    }
    out
}

const _: () = assert!(QK == 32);
