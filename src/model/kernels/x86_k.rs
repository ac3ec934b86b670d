//! x86 kernels for K-quant super-blocks: the quants of one weight super-block are unpacked once
//! into eight 32-byte vectors, then for each activation row the products are summed (`maddubs`,
//! then `madd` or VNNI's `vpdpwssd` with the sub-block scales) into the same exact integers
//! `kquant::block_sums` computes, and scaled with the same float operations, so every path gives
//! identical bits. Tiles of `R` activation rows × `C` weight rows as in `x86.rs`.

#![cfg(target_arch = "x86_64")]
// Index loops mirror the block layouts (several arrays indexed by the same sub-block).
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;
use std::ops::Range;

use super::kquant::{scales_mins, ActBlockK, KFormat, QK_K};
use super::quant::read_f16;
use super::x86::{prefetch, Isa, PREFETCH_TILES};

const _: () = assert!(QK_K == 256);

#[inline(always)]
unsafe fn hsum_i32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
    _mm_cvtsi128_si32(s)
}

/// Bit `shift` of every byte of `v`, moved to bit 4 (Q5_K's fifth bit).
#[inline(always)]
unsafe fn bit_to_16(v: __m256i, shift: i32) -> __m256i {
    let bit = _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(shift)), _mm256_set1_epi8(1));
    _mm256_slli_epi16(bit, 4)
}

/// Bits `shift` and `shift + 1` of every byte of `v`, moved to bits 4 and 5 (Q6_K's high bits).
#[inline(always)]
unsafe fn two_bits_to_16(v: __m256i, shift: i32) -> __m256i {
    let bits = _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(shift)), _mm256_set1_epi8(3));
    _mm256_slli_epi16(bits, 4)
}

/// Q4_K/Q5_K quants in value order: vector `j` holds values `32j..32j+32`.
#[inline(always)]
unsafe fn unpack_k45(qs: *const u8, qh: Option<*const u8>) -> [__m256i; 8] {
    let low4 = _mm256_set1_epi8(0x0F);
    let mut q = [_mm256_setzero_si256(); 8];
    let high = qh.map(|p| _mm256_loadu_si256(p as *const __m256i));
    for c in 0..4 {
        let bytes = _mm256_loadu_si256(qs.add(32 * c) as *const __m256i);
        let mut lo = _mm256_and_si256(bytes, low4);
        let mut hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
        if let Some(h) = high {
            lo = _mm256_or_si256(lo, bit_to_16(h, 2 * c as i32));
            hi = _mm256_or_si256(hi, bit_to_16(h, 2 * c as i32 + 1));
        }
        q[2 * c] = lo;
        q[2 * c + 1] = hi;
    }
    q
}

/// Q6_K quants (0..64, value = quant − 32) in value order.
#[inline(always)]
unsafe fn unpack_q6k(ql: *const u8, qh: *const u8) -> [__m256i; 8] {
    let low4 = _mm256_set1_epi8(0x0F);
    let mut q = [_mm256_setzero_si256(); 8];
    for half in 0..2 {
        let l0 = _mm256_loadu_si256(ql.add(64 * half) as *const __m256i);
        let l1 = _mm256_loadu_si256(ql.add(64 * half + 32) as *const __m256i);
        let h = _mm256_loadu_si256(qh.add(32 * half) as *const __m256i);
        q[4 * half] = _mm256_or_si256(_mm256_and_si256(l0, low4), two_bits_to_16(h, 0));
        q[4 * half + 1] = _mm256_or_si256(_mm256_and_si256(l1, low4), two_bits_to_16(h, 2));
        q[4 * half + 2] =
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), two_bits_to_16(h, 4));
        q[4 * half + 3] =
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4), two_bits_to_16(h, 6));
    }
    q
}

/// Σ over the 256 values of quant × activation quant × the scale of its 16-bit lane group
/// (`scales[j]` covers values `32j..32j+32`), in eight lanes whose total is the exact integer.
#[inline(always)]
unsafe fn scaled_sum<O: Isa>(q: &[__m256i; 8], scales: &[__m256i; 8], a: &ActBlockK) -> __m256i {
    // Two chains of accumulation, so that VNNI's multiply-accumulate latency overlaps.
    let mut sum = [_mm256_setzero_si256(); 2];
    for j in 0..8 {
        let y = _mm256_loadu_si256(a.qs.as_ptr().add(32 * j) as *const __m256i);
        sum[j % 2] = O::dot_i16(sum[j % 2], _mm256_maddubs_epi16(q[j], y), scales[j]);
    }
    _mm256_add_epi32(sum[0], sum[1])
}

/// The activation block's sixteen 16-value sums, each times its weight in `weights` (16 × i16),
/// in eight lanes whose total is the exact integer.
#[inline(always)]
unsafe fn weighted_bsums(a: &ActBlockK, weights: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_loadu_si256(a.bsums.as_ptr() as *const __m256i), weights)
}

/// One super-block of one weight row against `R` activation rows, added to `acc` (and the
/// minimums' share to `acc_min`).
#[inline(always)]
unsafe fn add_block<O: Isa, const R: usize>(
    format: KFormat,
    blk: &[u8],
    ys: [&ActBlockK; R],
    acc: &mut [f32; R],
    acc_min: &mut [f32; R],
) {
    let p = blk.as_ptr();
    match format {
        KFormat::Q4K | KFormat::Q5K => {
            let (sc, m) = scales_mins(&blk[4..16]);
            let q = match format {
                KFormat::Q4K => unpack_k45(p.add(16), None),
                _ => unpack_k45(p.add(48), Some(p.add(16))),
            };
            // Loops, not closures: a closure would not inherit the caller's target features.
            let mut scales = [_mm256_setzero_si256(); 8];
            for j in 0..8 {
                scales[j] = _mm256_set1_epi16(sc[j] as i16);
            }
            // Minimum j weighs the sums of 16-value groups 2j and 2j + 1.
            let mins: [i16; 16] = std::array::from_fn(|g| m[g / 2] as i16);
            let mins = _mm256_loadu_si256(mins.as_ptr() as *const __m256i);
            let (d, dmin) = (read_f16(blk, 0), read_f16(blk, 2));
            for r in 0..R {
                let a = ys[r];
                let sumi = hsum_i32(scaled_sum::<O>(&q, &scales, a));
                let summ = hsum_i32(weighted_bsums(a, mins));
                acc[r] = (d * a.d).mul_add(sumi as f32, acc[r]);
                acc_min[r] = (dmin * a.d).mul_add(summ as f32, acc_min[r]);
            }
        }
        KFormat::Q6K => {
            let q = unpack_q6k(p, p.add(128));
            let sc: [i16; 16] = std::array::from_fn(|g| blk[192 + g] as i8 as i16);
            let mut scales = [_mm256_setzero_si256(); 8];
            for j in 0..8 {
                scales[j] = _mm256_set_m128i(_mm_set1_epi16(sc[2 * j + 1]), _mm_set1_epi16(sc[2 * j]));
            }
            let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(192) as *const __m128i));
            let d = read_f16(blk, 208);
            for r in 0..R {
                let a = ys[r];
                // Quants are stored as value + 32: take 32 · Σ scale · group sum back out.
                let offset = _mm256_slli_epi32(weighted_bsums(a, sc16), 5);
                let sumi = hsum_i32(_mm256_sub_epi32(scaled_sum::<O>(&q, &scales, a), offset));
                acc[r] = (d * a.d).mul_add(sumi as f32, acc[r]);
            }
        }
    }
}

/// `C` K-quant weight rows from row `j` against `R` activation rows: `out[c][r]`.
#[inline(always)]
unsafe fn k_tile<O: Isa, const R: usize, const C: usize>(
    format: KFormat,
    w: &[u8],
    row_bytes: usize,
    j: usize,
    nb: usize,
    ys: [&[ActBlockK]; R],
) -> [[f32; R]; C] {
    let bb = format.block_bytes();
    let (mut acc, mut acc_min) = ([[0f32; R]; C], [[0f32; R]; C]);
    for b in 0..nb {
        let a: [&ActBlockK; R] = std::array::from_fn(|r| ys[r].get_unchecked(b));
        for c in 0..C {
            let blk = w.get_unchecked((j + c) * row_bytes + b * bb..(j + c) * row_bytes + (b + 1) * bb);
            prefetch(blk.as_ptr().wrapping_add(PREFETCH_TILES * C * row_bytes), bb);
            add_block::<O, R>(format, blk, a, &mut acc[c], &mut acc_min[c]);
        }
    }
    let mut out = [[0f32; R]; C];
    for c in 0..C {
        for r in 0..R {
            out[c][r] = acc[c][r] - acc_min[c][r];
        }
    }
    out
}

/// K-quant weight rows `rows` against `R` activation rows, `C` weight rows at a time:
/// `out[r][j - rows.start]` for row `j`.
///
/// # Safety
/// The CPU must have the features of the entry point that inlines this (`x86::avx2`,
/// `x86::avx512_vnni`); `w` must hold `rows.end` rows of `nb` super-blocks of `format`, every
/// `ys[r]` at least `nb` blocks and every `out[r]` at least `rows.len()` values.
#[inline(always)]
pub(super) unsafe fn k_rows<O: Isa, const R: usize, const C: usize>(
    format: KFormat,
    w: &[u8],
    row_bytes: usize,
    rows: Range<usize>,
    nb: usize,
    ys: [&[ActBlockK]; R],
    out: &mut [&mut [f32]; R],
) {
    assert!(w.len() >= rows.end * row_bytes && row_bytes == nb * format.block_bytes());
    assert!(ys.iter().all(|y| y.len() >= nb) && out.iter().all(|o| o.len() >= rows.len()));
    // One instantiation per format, so that the per-block match folds away.
    macro_rules! per_format {
        ($f:expr) => {{
            let mut j = rows.start;
            while j + C <= rows.end {
                let v = k_tile::<O, R, C>($f, w, row_bytes, j, nb, ys);
                for c in 0..C {
                    for r in 0..R {
                        out[r][j + c - rows.start] = v[c][r];
                    }
                }
                j += C;
            }
            for j in j..rows.end {
                let v = k_tile::<O, R, 1>($f, w, row_bytes, j, nb, ys);
                for r in 0..R {
                    out[r][j - rows.start] = v[0][r];
                }
            }
        }};
    }
    match format {
        KFormat::Q4K => per_format!(KFormat::Q4K),
        KFormat::Q5K => per_format!(KFormat::Q5K),
        KFormat::Q6K => per_format!(KFormat::Q6K),
    }
}

/// `kquant::quantize_row_k` with AVX2: the same values (the maximum, the scale and the
/// rounding are exact or the same f32 operations).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `x.len() == out.len() * 256`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn quantize_row_k(x: &[f32], out: &mut [ActBlockK]) {
    assert_eq!(x.len(), out.len() * QK_K);
    let sign_bit = _mm256_set1_ps(-0.0);
    for (chunk, block) in x.chunks_exact(QK_K).zip(out.iter_mut()) {
        let p = chunk.as_ptr();
        let mut amax = _mm256_setzero_ps();
        for i in 0..QK_K / 8 {
            // `max(|v|, m)` keeps `m` where `v` is NaN, as the scalar comparison does.
            amax = _mm256_max_ps(_mm256_andnot_ps(sign_bit, _mm256_loadu_ps(p.add(8 * i))), amax);
        }
        let m4 = _mm_max_ps(_mm256_extractf128_ps(amax, 1), _mm256_castps256_ps128(amax));
        let m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        let amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
        if amax == 0.0 {
            *block = ActBlockK::ZERO;
            continue;
        }
        // The first value of largest magnitude gives the scale its sign.
        let amax_v = _mm256_set1_ps(amax);
        let mut max = amax;
        for i in 0..QK_K / 8 {
            let v = _mm256_loadu_ps(p.add(8 * i));
            let hits = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(_mm256_andnot_ps(sign_bit, v), amax_v));
            if hits != 0 {
                max = chunk[8 * i + hits.trailing_zeros() as usize];
                break;
            }
        }
        let iscale = -127.0 / max;
        let scale = _mm256_set1_ps(iscale);
        let limit = _mm256_set1_epi32(127);
        for g in 0..QK_K / 32 {
            let q: [__m256i; 4] = std::array::from_fn(|i| {
                let v = _mm256_loadu_ps(p.add(32 * g + 8 * i));
                let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
                    scale, v,
                ));
                _mm256_min_epi32(_mm256_cvtps_epi32(r), limit)
            });
            let p8 = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
            let p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256(block.qs.as_mut_ptr().add(32 * g) as *mut __m256i, p8);
            for h in 0..2 {
                let s = _mm256_add_epi32(q[2 * h], q[2 * h + 1]);
                block.bsums[2 * g + h] = hsum_i32(s) as i16;
            }
        }
        block.d = 1.0 / iscale;
    }
}
