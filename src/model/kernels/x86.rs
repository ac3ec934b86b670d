//! x86 entry points of our kernels (block formats in `x86_packed.rs`, K-quants in `x86_k.rs`,
//! F16 in `x86_f16.rs`) and what the two instruction sets provide them.
//!
//! Two instruction sets share one body per kernel: AVX2 (byte products by `maddubs` + `madd`)
//! and AVX-512 VNNI on 256-bit vectors (`vpdpbusd`, and 32 vector registers). Both sum the same
//! products into each 32-bit lane without overflow, so they give the same integers and the same
//! bits.

#![cfg(target_arch = "x86_64")]
// Index loops mirror the tiles (several arrays indexed by the same row or column).
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;
use std::ops::Range;

use super::kquant::{ActBlockK, KFormat};
use super::quant::{ActBlock, WeightFormat, QK};
use super::x86_f16::{f16_rows_256, f16_rows_512, Weights};

const _: () = assert!(QK == 32);

/// Whether this CPU runs the AVX2 kernels.
pub fn has_avx2() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
}

/// Whether this CPU runs the AVX-512 VNNI kernels (AVX2's features plus AVX-512
/// F/BW/DQ/VL/VNNI).
pub fn has_avx512_vnni() -> bool {
    has_avx2()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512dq")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
}

/// An instruction set's share of the kernels: its integer dot products and its F16 kernel.
pub trait Isa {
    /// What [`Isa::dot_signed`] adds to every signed weight quant: its result exceeds the
    /// true sum by this times the sum of the activation quants.
    const SIGNED_OFFSET: i32;
    /// `acc` + unsigned `x` (at most 128) × signed `y`, four consecutive products summed per
    /// 32-bit lane.
    unsafe fn dot_us(acc: __m256i, x: __m256i, y: __m256i) -> __m256i;
    /// Signed weight quants `x` in the form [`Isa::dot_signed`] reads, once per weight block.
    unsafe fn prepare_signed(x: __m256i) -> __m256i;
    /// `acc` + signed `x` (and `prepared` from it) × signed `y`, four consecutive products
    /// summed per 32-bit lane, plus [`Isa::SIGNED_OFFSET`] times the sum of `y`'s four bytes.
    unsafe fn dot_signed(acc: __m256i, x: __m256i, prepared: __m256i, y: __m256i) -> __m256i;
    /// `acc + Σ` of each lane's two i16 × i16 products.
    unsafe fn dot_i16(acc: __m256i, x: __m256i, y: __m256i) -> __m256i;
    /// F16 weight rows `rows` (read as `W`) against `R` rows of f16-rounded activations.
    unsafe fn f16_rows<W: Weights, const R: usize, const C: usize>(
        w: &[u8],
        row_bytes: usize,
        rows: Range<usize>,
        nb: usize,
        ys: [&[[f32; QK]]; R],
        out: &mut [&mut [f32]; R],
    );
}

/// AVX2: `maddubs` (pairs to i16, which cannot saturate for our quants) then `madd` with ones.
pub struct Avx2;

impl Isa for Avx2 {
    const SIGNED_OFFSET: i32 = 0;
    #[inline(always)]
    unsafe fn dot_us(acc: __m256i, x: __m256i, y: __m256i) -> __m256i {
        _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1)))
    }
    /// |x|: the products are |x| × (y with x's sign).
    #[inline(always)]
    unsafe fn prepare_signed(x: __m256i) -> __m256i {
        _mm256_sign_epi8(x, x)
    }
    #[inline(always)]
    unsafe fn dot_signed(acc: __m256i, x: __m256i, prepared: __m256i, y: __m256i) -> __m256i {
        Self::dot_us(acc, prepared, _mm256_sign_epi8(y, x))
    }
    #[inline(always)]
    unsafe fn dot_i16(acc: __m256i, x: __m256i, y: __m256i) -> __m256i {
        _mm256_add_epi32(acc, _mm256_madd_epi16(x, y))
    }
    #[inline(always)]
    unsafe fn f16_rows<W: Weights, const R: usize, const C: usize>(
        w: &[u8],
        row_bytes: usize,
        rows: Range<usize>,
        nb: usize,
        ys: [&[[f32; QK]]; R],
        out: &mut [&mut [f32]; R],
    ) {
        f16_rows_256::<W, R>(w, row_bytes, rows, nb, ys, out)
    }
}

/// AVX-512 VNNI on 256-bit vectors.
pub struct Vnni;

impl Isa for Vnni {
    /// `x + 128` as unsigned bytes: one instruction per product vector instead of a sign flip
    /// and a product; the caller takes `128·Σy` back out.
    const SIGNED_OFFSET: i32 = 128;
    #[inline(always)]
    unsafe fn dot_us(acc: __m256i, x: __m256i, y: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(acc, x, y)
    }
    #[inline(always)]
    unsafe fn prepare_signed(x: __m256i) -> __m256i {
        _mm256_xor_si256(x, _mm256_set1_epi8(-128))
    }
    #[inline(always)]
    unsafe fn dot_signed(acc: __m256i, _x: __m256i, prepared: __m256i, y: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(acc, prepared, y)
    }
    #[inline(always)]
    unsafe fn dot_i16(acc: __m256i, x: __m256i, y: __m256i) -> __m256i {
        _mm256_dpwssd_epi32(acc, x, y)
    }
    #[inline(always)]
    unsafe fn f16_rows<W: Weights, const R: usize, const C: usize>(
        w: &[u8],
        row_bytes: usize,
        rows: Range<usize>,
        nb: usize,
        ys: [&[[f32; QK]]; R],
        out: &mut [&mut [f32]; R],
    ) {
        // Four activation rows × three weight rows (24 accumulators of the 32 registers); fewer
        // activation rows (decode) go one weight row at a time: one stream of weights from
        // memory decoded 33% faster than four rows side by side on a Zen 4 (F16, 2 threads).
        if R >= 4 {
            for r0 in (0..R).step_by(4) {
                let group: [&[[f32; QK]]; 4] = std::array::from_fn(|g| ys[(r0 + g).min(R - 1)]);
                let mut group_out: [&mut [f32]; 4] = std::array::from_fn(|_| &mut [][..]);
                let n = (R - r0).min(4);
                for (g, o) in out[r0..r0 + n].iter_mut().enumerate() {
                    group_out[g] = &mut o[..];
                }
                f16_rows_512::<W, 4, 3>(w, row_bytes, rows.clone(), nb, group, &mut group_out, n);
            }
        } else {
            f16_rows_512::<W, R, 1>(w, row_bytes, rows, nb, ys, out, R);
        }
    }
}

/// How many tiles ahead the kernels prefetch weights: decode streams every weight once, and
/// the hardware prefetcher alone leaves the loads waiting (2.2× decode tok/s with this, measured
/// on Q4_1 at one thread).
pub const PREFETCH_TILES: usize = 2;

/// Prefetches the cache lines of `len` bytes from `p` (a hint: `p` may be past the data).
#[inline(always)]
pub unsafe fn prefetch(p: *const u8, len: usize) {
    let mut at = 0;
    while at < len {
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(at) as *const i8);
        at += 64;
    }
}

/// The entry points of one instruction set: `#[target_feature]` functions that instantiate the
/// bodies above (inlined into them, so compiled with those features).
macro_rules! entry_points {
    ($module:ident, $ops:ty, $features:literal) => {
        pub mod $module {
            use super::*;

            /// Packed block-format groups `groups` against `R` activation rows, `G` groups at a
            /// time; `out[r][8 (g - groups.start) + j]` for weight row `8g + j`.
            ///
            /// # Safety
            /// The CPU must have this module's features; `w` must hold `groups.end` packed
            /// groups of `group_bytes` bytes (`nb` packed blocks of `format`), every `ys[r]` at
            /// least `nb` blocks, and every `out[r]` must end inside the last group.
            #[target_feature(enable = $features)]
            pub unsafe fn packed_rows<const R: usize, const G: usize>(
                format: WeightFormat,
                w: &[u8],
                group_bytes: usize,
                groups: Range<usize>,
                nb: usize,
                ys: [&[ActBlock]; R],
                out: &mut [&mut [f32]; R],
            ) {
                use super::super::x86_packed::{packed_rows, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0};
                match format {
                    WeightFormat::Q4_0 => {
                        packed_rows::<Q4_0, $ops, R, G>(w, group_bytes, groups, nb, ys, out)
                    }
                    WeightFormat::Q4_1 => {
                        packed_rows::<Q4_1, $ops, R, G>(w, group_bytes, groups, nb, ys, out)
                    }
                    WeightFormat::Q5_0 => {
                        packed_rows::<Q5_0, $ops, R, G>(w, group_bytes, groups, nb, ys, out)
                    }
                    WeightFormat::Q5_1 => {
                        packed_rows::<Q5_1, $ops, R, G>(w, group_bytes, groups, nb, ys, out)
                    }
                    WeightFormat::Q8_0 => {
                        packed_rows::<Q8_0, $ops, R, G>(w, group_bytes, groups, nb, ys, out)
                    }
                }
            }

            /// K-quant weight rows `rows` against `R` activation rows, `C` weight rows at a time.
            ///
            /// # Safety
            /// As for `block_rows`, with `nb` super-blocks of `format` per row.
            #[target_feature(enable = $features)]
            pub unsafe fn k_rows<const R: usize, const C: usize>(
                format: KFormat,
                w: &[u8],
                row_bytes: usize,
                rows: Range<usize>,
                nb: usize,
                ys: [&[ActBlockK]; R],
                out: &mut [&mut [f32]; R],
            ) {
                super::super::x86_k::k_rows::<$ops, R, C>(format, w, row_bytes, rows, nb, ys, out)
            }

            /// F16 weight rows `rows` (read as `W`) against `R` rows of f16-rounded
            /// activations.
            ///
            /// # Safety
            /// As for `block_rows`, with `nb · 32` values of `W` per row.
            #[target_feature(enable = $features)]
            pub unsafe fn f16_rows<W: Weights, const R: usize, const C: usize>(
                w: &[u8],
                row_bytes: usize,
                rows: Range<usize>,
                nb: usize,
                ys: [&[[f32; QK]]; R],
                out: &mut [&mut [f32]; R],
            ) {
                <$ops as Isa>::f16_rows::<W, R, C>(w, row_bytes, rows, nb, ys, out)
            }
        }
    };
}

entry_points!(avx2, Avx2, "avx2,fma,f16c");
entry_points!(avx512_vnni, Vnni, "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni");

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
        block.sum = isum;
        block.d = f16_round(d);
        block.s = f16_round(d * isum as f32);
    }
}

#[inline(always)]
unsafe fn f16_round(x: f32) -> f32 {
    let h = _mm_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT }>(_mm_set_ss(x));
    _mm_cvtss_f32(_mm_cvtph_ps(h))
}
