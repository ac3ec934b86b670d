//! x86 F16 kernels: F16 weight rows against f16-rounded activations in
//! `quant::dot_row_f16`'s order (four accumulators of eight lanes per 32 values), on 256-bit
//! vectors for AVX2 and on 512-bit ones for the AVX-512 path. The weights are read as stored
//! (f16, converted per tile) or from a copy widened to f32 once per matmul task ([`Wide`]):
//! the same values in the same order, so the same bits.

#![cfg(target_arch = "x86_64")]
// Index loops mirror the tiles (several arrays indexed by the same row or column).
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;
use std::ops::Range;

use super::quant::QK;
use super::x86::PREFETCH_TILES;

/// How a kernel reads weights: `BYTES` per value, eight or sixteen at a time as f32.
pub trait Weights {
    const BYTES: usize;
    unsafe fn load8(p: *const u8) -> __m256;
    unsafe fn load16(p: *const u8) -> __m512;
}

/// F16 as stored, converted on every load.
pub struct Half;

impl Weights for Half {
    const BYTES: usize = 2;
    #[inline(always)]
    unsafe fn load8(p: *const u8) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
    }
    #[inline(always)]
    unsafe fn load16(p: *const u8) -> __m512 {
        _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
    }
}

/// F16 values widened to f32 beforehand ([`widen_f16`]).
pub struct Wide;

impl Weights for Wide {
    const BYTES: usize = 4;
    #[inline(always)]
    unsafe fn load8(p: *const u8) -> __m256 {
        _mm256_loadu_ps(p as *const f32)
    }
    #[inline(always)]
    unsafe fn load16(p: *const u8) -> __m512 {
        _mm512_loadu_ps(p as *const f32)
    }
}

/// F16 weight rows against `R` rows of f16-rounded activations (`quant::dot_row_f16`'s order)
/// on 256-bit vectors, two activation rows at a time (each weight block is converted once per
/// pair: four accumulators per row fill the sixteen registers).
#[inline(always)]
pub(super) unsafe fn f16_rows_256<W: Weights, const R: usize>(
    w: &[u8],
    row_bytes: usize,
    rows: Range<usize>,
    nb: usize,
    ys: [&[[f32; QK]]; R],
    out: &mut [&mut [f32]; R],
) {
    assert!(w.len() >= rows.end * row_bytes && row_bytes == nb * W::BYTES * QK);
    assert!(ys.iter().all(|y| y.len() >= nb) && out.iter().all(|o| o.len() >= rows.len()));
    let block_bytes = W::BYTES * QK;
    for j in rows.clone() {
        let p = w.as_ptr().add(j * row_bytes);
        let mut r0 = 0;
        while r0 < R {
            let group = (R - r0).min(2);
            let mut acc = [[_mm256_setzero_ps(); 4]; 2];
            for b in 0..nb {
                let at = p.add(b * block_bytes);
                if r0 == 0 {
                    _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(PREFETCH_TILES * row_bytes) as *const i8);
                }
                let wv = [
                    W::load8(at),
                    W::load8(at.add(8 * W::BYTES)),
                    W::load8(at.add(16 * W::BYTES)),
                    W::load8(at.add(24 * W::BYTES)),
                ];
                for g in 0..group {
                    let y = ys[r0 + g].as_ptr().add(b) as *const f32;
                    for q in 0..4 {
                        acc[g][q] = _mm256_fmadd_ps(wv[q], _mm256_loadu_ps(y.add(8 * q)), acc[g][q]);
                    }
                }
            }
            for g in 0..group {
                let [a0, a1, a2, a3] = acc[g];
                let x0 = _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
                let t0 = _mm_add_ps(_mm256_castps256_ps128(x0), _mm256_extractf128_ps(x0, 1));
                let t1 = _mm_hadd_ps(t0, t0);
                out[r0 + g][j - rows.start] = _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
            }
            r0 += group;
        }
    }
}

/// F16 weight rows against the first `used` of `R` rows of f16-rounded activations, `C` weight
/// rows at a time, on 512-bit vectors: register `2q + h` holds what `quant::dot_row_f16`'s
/// accumulators `2q` and `2q + 1` hold side by side, so the lanes add the same terms in the same
/// order and the reduction pairs them as the scalar code does.
#[inline(always)]
pub(super) unsafe fn f16_rows_512<W: Weights, const R: usize, const C: usize>(
    w: &[u8],
    row_bytes: usize,
    rows: Range<usize>,
    nb: usize,
    ys: [&[[f32; QK]]; R],
    out: &mut [&mut [f32]; R],
    used: usize,
) {
    assert!(w.len() >= rows.end * row_bytes && row_bytes == nb * W::BYTES * QK && used <= R);
    assert!(ys.iter().all(|y| y.len() >= nb) && out[..used].iter().all(|o| o.len() >= rows.len()));
    let ys = ys.map(|y| y.as_ptr() as *const f32);
    let mut j = rows.start;
    while j < rows.end {
        let cols = (rows.end - j).min(C);
        let v = f16_tile_512::<W, R, C>(w.as_ptr().add(j * row_bytes), row_bytes, nb, ys, cols);
        for c in 0..cols {
            for r in 0..used {
                out[r][j + c - rows.start] = v[c][r];
            }
        }
        j += cols;
    }
}

/// `f16_rows_512`'s tile: weight rows `w`, `w + row_bytes`, ... (`cols` ≤ `C` of them; the
/// missing ones repeat the last) against `R` activation rows. A function, not a closure: a
/// closure would not inherit the caller's target features.
#[inline(always)]
unsafe fn f16_tile_512<W: Weights, const R: usize, const C: usize>(
    w: *const u8,
    row_bytes: usize,
    nb: usize,
    ys: [*const f32; R],
    cols: usize,
) -> [[f32; R]; C] {
    let mut acc = [[[_mm512_setzero_ps(); 2]; R]; C];
    for b in 0..nb {
        let mut wv = [[_mm512_setzero_ps(); 2]; C];
        for c in 0..C {
            let at = w.add(c.min(cols - 1) * row_bytes + b * W::BYTES * QK);
            _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(PREFETCH_TILES * C * row_bytes) as *const i8);
            wv[c][0] = W::load16(at);
            wv[c][1] = W::load16(at.add(16 * W::BYTES));
        }
        for r in 0..R {
            let y = ys[r].add(b * QK);
            let (y0, y1) = (_mm512_loadu_ps(y), _mm512_loadu_ps(y.add(16)));
            for c in 0..C {
                acc[c][r][0] = _mm512_fmadd_ps(wv[c][0], y0, acc[c][r][0]);
                acc[c][r][1] = _mm512_fmadd_ps(wv[c][1], y1, acc[c][r][1]);
            }
        }
    }
    let mut out = [[0f32; R]; C];
    for c in 0..C {
        for r in 0..R {
            // [a0+a2 | a1+a3], then (a0+a2) + (a1+a3) as `reduce_f16_acc`.
            let s = _mm512_add_ps(acc[c][r][0], acc[c][r][1]);
            let x0 = _mm256_add_ps(_mm512_castps512_ps256(s), _mm512_extractf32x8_ps::<1>(s));
            let t0 = _mm_add_ps(_mm256_castps256_ps128(x0), _mm256_extractf128_ps(x0, 1));
            let t1 = _mm_hadd_ps(t0, t0);
            out[c][r] = _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
        }
    }
    out
}

/// F16 values (little-endian bytes) widened to f32.
///
/// # Safety
/// The CPU must support AVX2 and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn widen_f16(f16: &[u8], out: &mut [f32]) {
    assert!(f16.len() == 2 * out.len() && out.len().is_multiple_of(8));
    for (i, o) in out.chunks_exact_mut(8).enumerate() {
        let v = _mm256_cvtph_ps(_mm_loadu_si128(f16.as_ptr().add(16 * i) as *const __m128i));
        _mm256_storeu_ps(o.as_mut_ptr(), v);
    }
}

/// `super::quant::round_row_f16` with F16C (round to nearest even, as `half` does).
///
/// # Safety
/// The CPU must support AVX2 and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn round_row_f16(x: &[f32], out: &mut [[f32; QK]]) {
    assert_eq!(x.len(), out.len() * QK);
    for (b, block) in out.iter_mut().enumerate() {
        for q in 0..QK / 8 {
            let v = _mm256_loadu_ps(x.as_ptr().add(b * QK + 8 * q));
            let h = _mm256_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT }>(v);
            _mm256_storeu_ps(block.as_mut_ptr().add(8 * q), _mm256_cvtph_ps(h));
        }
    }
}
