//! x86 kernels for the 32-value block formats and F16: the same arithmetic as
//! `quant::dot_row` and `quant::dot_row_f16`, on tiles of `R` activation rows × `C` weight rows so
//! that a weight block is loaded and unpacked once for `R` rows, an activation block once for `C`
//! weight rows, and `R·C` independent accumulators keep the vector units busy.
//!
//! Two instruction sets share one body: AVX2 (byte products by `maddubs` + `madd`) and AVX-512
//! VNNI on 256-bit vectors (`vpdpbusd`, and 32 vector registers). Both sum the same four products
//! into each 32-bit lane without overflow, so they give the same integers and the same bits.

#![cfg(target_arch = "x86_64")]
// Index loops mirror the tiles (several arrays indexed by the same row or column).
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;
use std::ops::Range;

use super::kquant::{ActBlockK, KFormat};
use super::quant::{ActBlock, WeightFormat, QK};
use super::x86_f16::{f16_rows_256, f16_rows_512};

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
    /// Unsigned × signed bytes, four consecutive products summed per 32-bit lane.
    unsafe fn dot_us(x: __m256i, y: __m256i) -> __m256i;
    /// Signed weight quants `x` in the form [`Isa::dot_signed`] reads, once per weight block.
    unsafe fn prepare_signed(x: __m256i) -> __m256i;
    /// Signed `x` (and `prepared` from it) × the activation block's quants, four consecutive
    /// products summed per 32-bit lane.
    unsafe fn dot_signed(x: __m256i, prepared: __m256i, a: *const ActBlock) -> __m256i;
    /// `acc + Σ` of each lane's two i16 × i16 products.
    unsafe fn dot_i16(acc: __m256i, x: __m256i, y: __m256i) -> __m256i;
    /// F16 weight rows `rows` against `R` rows of f16-rounded activations.
    unsafe fn f16_rows<const R: usize, const C: usize>(
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
    #[inline(always)]
    unsafe fn dot_us(x: __m256i, y: __m256i) -> __m256i {
        _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1))
    }
    /// |x|: the products are |x| × (y with x's sign).
    #[inline(always)]
    unsafe fn prepare_signed(x: __m256i) -> __m256i {
        _mm256_sign_epi8(x, x)
    }
    #[inline(always)]
    unsafe fn dot_signed(x: __m256i, prepared: __m256i, a: *const ActBlock) -> __m256i {
        Self::dot_us(prepared, _mm256_sign_epi8(act_qs(a), x))
    }
    #[inline(always)]
    unsafe fn dot_i16(acc: __m256i, x: __m256i, y: __m256i) -> __m256i {
        _mm256_add_epi32(acc, _mm256_madd_epi16(x, y))
    }
    #[inline(always)]
    unsafe fn f16_rows<const R: usize, const C: usize>(
        w: &[u8],
        row_bytes: usize,
        rows: Range<usize>,
        nb: usize,
        ys: [&[[f32; QK]]; R],
        out: &mut [&mut [f32]; R],
    ) {
        f16_rows_256(w, row_bytes, rows, nb, ys, out)
    }
}

/// AVX-512 VNNI on 256-bit vectors.
pub struct Vnni;

impl Isa for Vnni {
    #[inline(always)]
    unsafe fn dot_us(x: __m256i, y: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), x, y)
    }
    /// x + 128 as unsigned bytes.
    #[inline(always)]
    unsafe fn prepare_signed(x: __m256i) -> __m256i {
        _mm256_xor_si256(x, _mm256_set1_epi8(-128))
    }
    /// Σ (x + 128)·y − 128·Σ y, the second term being the block's `bias`: one instruction per
    /// activation row instead of a sign flip and a product.
    #[inline(always)]
    unsafe fn dot_signed(_x: __m256i, prepared: __m256i, a: *const ActBlock) -> __m256i {
        let bias = _mm256_load_si256((*a).bias.as_ptr() as *const __m256i);
        _mm256_dpbusd_epi32(bias, prepared, act_qs(a))
    }
    #[inline(always)]
    unsafe fn dot_i16(acc: __m256i, x: __m256i, y: __m256i) -> __m256i {
        _mm256_dpwssd_epi32(acc, x, y)
    }
    #[inline(always)]
    unsafe fn f16_rows<const R: usize, const C: usize>(
        w: &[u8],
        row_bytes: usize,
        rows: Range<usize>,
        nb: usize,
        ys: [&[[f32; QK]]; R],
        out: &mut [&mut [f32]; R],
    ) {
        // Four activation rows × three weight rows (24 accumulators of the 32 registers), or
        // one activation row × four weight rows.
        if R >= 4 {
            for r0 in (0..R).step_by(4) {
                let group: [&[[f32; QK]]; 4] = std::array::from_fn(|g| ys[(r0 + g).min(R - 1)]);
                let mut group_out: [&mut [f32]; 4] = std::array::from_fn(|_| &mut [][..]);
                let n = (R - r0).min(4);
                for (g, o) in out[r0..r0 + n].iter_mut().enumerate() {
                    group_out[g] = &mut o[..];
                }
                f16_rows_512::<4, 3>(w, row_bytes, rows.clone(), nb, group, &mut group_out, n);
            }
        } else {
            f16_rows_512::<R, 4>(w, row_bytes, rows, nb, ys, out, R);
        }
    }
}

#[inline(always)]
unsafe fn act_qs(a: *const ActBlock) -> __m256i {
    _mm256_load_si256((*a).qs.as_ptr() as *const __m256i)
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

/// One 32-value weight block format: its scale, its minimum (formats with one) and its quants.
trait Block {
    const FORMAT: WeightFormat;
    /// value = d·q + m (`q` unsigned) rather than d·q (`q` signed).
    const WITH_MIN: bool;
    unsafe fn quants(blk: *const u8) -> __m256i;
}

struct Q4_0;
struct Q4_1;
struct Q5_0;
struct Q5_1;
struct Q8_0;

impl Block for Q4_0 {
    const FORMAT: WeightFormat = WeightFormat::Q4_0;
    const WITH_MIN: bool = false;
    #[inline(always)]
    unsafe fn quants(blk: *const u8) -> __m256i {
        _mm256_sub_epi8(nibbles(blk.add(2)), _mm256_set1_epi8(8))
    }
}

impl Block for Q4_1 {
    const FORMAT: WeightFormat = WeightFormat::Q4_1;
    const WITH_MIN: bool = true;
    #[inline(always)]
    unsafe fn quants(blk: *const u8) -> __m256i {
        nibbles(blk.add(4))
    }
}

impl Block for Q5_0 {
    const FORMAT: WeightFormat = WeightFormat::Q5_0;
    const WITH_MIN: bool = false;
    /// q − 16: the nibble where the fifth bit is set, nibble − 16 (0xF0 | nibble) where not.
    #[inline(always)]
    unsafe fn quants(blk: *const u8) -> __m256i {
        _mm256_or_si256(
            nibbles(blk.add(6)),
            _mm256_andnot_si256(bytes_from_bits(blk.add(2)), _mm256_set1_epi8(0xF0u8 as i8)),
        )
    }
}

impl Block for Q5_1 {
    const FORMAT: WeightFormat = WeightFormat::Q5_1;
    const WITH_MIN: bool = true;
    #[inline(always)]
    unsafe fn quants(blk: *const u8) -> __m256i {
        _mm256_or_si256(
            nibbles(blk.add(8)),
            _mm256_and_si256(bytes_from_bits(blk.add(4)), _mm256_set1_epi8(0x10)),
        )
    }
}

impl Block for Q8_0 {
    const FORMAT: WeightFormat = WeightFormat::Q8_0;
    const WITH_MIN: bool = false;
    #[inline(always)]
    unsafe fn quants(blk: *const u8) -> __m256i {
        _mm256_loadu_si256(blk.add(2) as *const __m256i)
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

#[inline(always)]
unsafe fn hsum8(v: __m256) -> f32 {
    let r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    let r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    let r = _mm_add_ss(r, _mm_movehdup_ps(r));
    _mm_cvtss_f32(r)
}

/// `C` weight rows (`w`, `w + row_bytes`, ...) against `R` activation rows: `out[c][r]`.
#[inline(always)]
unsafe fn block_tile<B: Block, O: Isa, const R: usize, const C: usize>(
    w: *const u8,
    row_bytes: usize,
    nb: usize,
    ys: [*const ActBlock; R],
    sums: *const [f32; R],
) -> [[f32; R]; C] {
    let bb = B::FORMAT.block_bytes();
    let mut acc = [[_mm256_setzero_ps(); R]; C];
    let mut summs = [[0f32; R]; C];
    for b in 0..nb {
        for c in 0..C {
            let blk = w.add(c * row_bytes + b * bb);
            _mm_prefetch::<_MM_HINT_T0>(blk.wrapping_add(PREFETCH_TILES * C * row_bytes) as *const i8);
            let dw = _mm256_set1_ps(f16_at(blk));
            let x = B::quants(blk);
            let prepared = if B::WITH_MIN { x } else { O::prepare_signed(x) };
            if B::WITH_MIN {
                // The R rows' sums side by side: one vector multiply and add for all of them.
                let (m, s) = (f16_at(blk.add(2)), &*sums.add(b));
                for r in 0..R {
                    summs[c][r] += m * s[r];
                }
            }
            for r in 0..R {
                let a = ys[r].add(b);
                let lanes = if B::WITH_MIN { O::dot_us(x, act_qs(a)) } else { O::dot_signed(x, prepared, a) };
                // dw·d in every lane, from a broadcast load rather than a scalar product and a
                // broadcast (one shuffle-port instruction fewer per block and row).
                let scale = _mm256_mul_ps(dw, _mm256_broadcast_ss(&(*a).d));
                acc[c][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), scale, acc[c][r]);
            }
        }
    }
    let mut out = [[0f32; R]; C];
    for c in 0..C {
        for r in 0..R {
            out[c][r] = hsum8(acc[c][r]) + summs[c][r];
        }
    }
    out
}

/// Weight rows `rows` against `R` activation rows, `C` weight rows at a time: `out[r][j -
/// rows.start]` for row `j`.
#[inline(always)]
unsafe fn block_rows<B: Block, O: Isa, const R: usize, const C: usize>(
    w: &[u8],
    row_bytes: usize,
    rows: Range<usize>,
    nb: usize,
    ys: [&[ActBlock]; R],
    out: &mut [&mut [f32]; R],
) {
    assert!(w.len() >= rows.end * row_bytes && row_bytes == nb * B::FORMAT.block_bytes());
    assert!(ys.iter().all(|y| y.len() >= nb) && out.iter().all(|o| o.len() >= rows.len()));
    // Formats with a minimum read every row's block sum `s` per block: laid out by block.
    let sums: Vec<[f32; R]> =
        if B::WITH_MIN { (0..nb).map(|b| std::array::from_fn(|r| ys[r][b].s)).collect() } else { Vec::new() };
    let sums = sums.as_ptr();
    let ys = ys.map(|y| y.as_ptr());
    let mut j = rows.start;
    while j + C <= rows.end {
        let v = block_tile::<B, O, R, C>(w.as_ptr().add(j * row_bytes), row_bytes, nb, ys, sums);
        for c in 0..C {
            for r in 0..R {
                out[r][j + c - rows.start] = v[c][r];
            }
        }
        j += C;
    }
    for j in j..rows.end {
        let v = block_tile::<B, O, R, 1>(w.as_ptr().add(j * row_bytes), row_bytes, nb, ys, sums);
        for r in 0..R {
            out[r][j - rows.start] = v[0][r];
        }
    }
}

/// The entry points of one instruction set: `#[target_feature]` functions that instantiate the
/// bodies above (inlined into them, so compiled with those features).
macro_rules! entry_points {
    ($module:ident, $ops:ty, $features:literal) => {
        pub mod $module {
            use super::*;

            /// Block-format weight rows `rows` against `R` activation rows, `C` weight rows at a
            /// time; `out[r][j - rows.start]` for row `j`.
            ///
            /// # Safety
            /// The CPU must have this module's features; `w` must hold `rows.end` rows of
            /// `row_bytes` bytes (`nb` blocks of `format`), every `ys[r]` at least `nb` blocks
            /// and every `out[r]` at least `rows.len()` values.
            #[target_feature(enable = $features)]
            pub unsafe fn block_rows<const R: usize, const C: usize>(
                format: WeightFormat,
                w: &[u8],
                row_bytes: usize,
                rows: Range<usize>,
                nb: usize,
                ys: [&[ActBlock]; R],
                out: &mut [&mut [f32]; R],
            ) {
                match format {
                    WeightFormat::Q4_0 => {
                        super::block_rows::<Q4_0, $ops, R, C>(w, row_bytes, rows, nb, ys, out)
                    }
                    WeightFormat::Q4_1 => {
                        super::block_rows::<Q4_1, $ops, R, C>(w, row_bytes, rows, nb, ys, out)
                    }
                    WeightFormat::Q5_0 => {
                        super::block_rows::<Q5_0, $ops, R, C>(w, row_bytes, rows, nb, ys, out)
                    }
                    WeightFormat::Q5_1 => {
                        super::block_rows::<Q5_1, $ops, R, C>(w, row_bytes, rows, nb, ys, out)
                    }
                    WeightFormat::Q8_0 => {
                        super::block_rows::<Q8_0, $ops, R, C>(w, row_bytes, rows, nb, ys, out)
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

            /// F16 weight rows `rows` against `R` rows of f16-rounded activations.
            ///
            /// # Safety
            /// As for `block_rows`, with `nb · 32` f16 values per row.
            #[target_feature(enable = $features)]
            pub unsafe fn f16_rows<const R: usize, const C: usize>(
                w: &[u8],
                row_bytes: usize,
                rows: Range<usize>,
                nb: usize,
                ys: [&[[f32; QK]]; R],
                out: &mut [&mut [f32]; R],
            ) {
                <$ops as Isa>::f16_rows::<R, C>(w, row_bytes, rows, nb, ys, out)
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
        // Sums of four consecutive quants: after two horizontal adds, 128-bit half h holds
        // [q0, q1, q2, q3] lane sums of values 4h..4h+4 of each 8; reorder to value order.
        let quads = _mm256_hadd_epi32(_mm256_hadd_epi32(q[0], q[1]), _mm256_hadd_epi32(q[2], q[3]));
        let quads = _mm256_permutevar8x32_epi32(quads, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        let bias = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(quads, 7));
        _mm256_store_si256(block.bias.as_mut_ptr() as *mut __m256i, bias);
        block.d = f16_round(d);
        block.s = f16_round(d * isum as f32);
    }
}

#[inline(always)]
unsafe fn f16_round(x: f32) -> f32 {
    let h = _mm_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT }>(_mm_set_ss(x));
    _mm_cvtss_f32(_mm_cvtph_ps(h))
}
