//! x86 kernels for the block formats on packed weights (see `packed.rs`): `packed::dot_group`'s
//! arithmetic, eight weight rows per vector. For each activation row, eight integer dot
//! instructions (one per vector of four values × eight rows, the activations' four bytes
//! broadcast) give the eight rows' exact block sums, then one multiply and one or two fused
//! multiply-adds scale them, so every path gives the same bits.
//!
//! Tiles are `R` activation rows × `G` groups of eight weight rows: a packed block is loaded and
//! unpacked once for `R` rows.

#![cfg(target_arch = "x86_64")]
// Index loops mirror the tiles (several arrays indexed by the same row or group).
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;
use std::ops::Range;

use super::packed::GROUP;
use super::quant::{ActBlock, WeightFormat};
use super::x86::{prefetch, Isa, PREFETCH_TILES};

const _: () = assert!(GROUP == 8);

/// A block format, as a type so that each format's kernel is compiled on its own.
pub(super) trait Format {
    const FORMAT: WeightFormat;
}

macro_rules! formats {
    ($($name:ident),*) => {$(
        pub(super) struct $name;
        impl Format for $name {
            const FORMAT: WeightFormat = WeightFormat::$name;
        }
    )*};
}
formats!(Q4_0, Q4_1, Q5_0, Q5_1, Q8_0);

/// The eight quant vectors of a packed block: vector `k` holds values `4k..4k+4` of the eight
/// rows, unsigned as stored (4- and 5-bit formats) or signed (Q8_0).
#[inline(always)]
unsafe fn quant_vectors<F: Format>(blk: *const u8) -> [__m256i; 8] {
    let mut q = [_mm256_setzero_si256(); 8];
    if F::FORMAT == WeightFormat::Q8_0 {
        for k in 0..8 {
            q[k] = _mm256_loadu_si256(blk.add(32 * k) as *const __m256i);
        }
        return q;
    }
    let low4 = _mm256_set1_epi8(0x0F);
    for c in 0..4 {
        let bytes = _mm256_loadu_si256(blk.add(32 * c) as *const __m256i);
        q[c] = _mm256_and_si256(bytes, low4);
        q[c + 4] = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
    }
    if F::FORMAT.has_high_bits() {
        // Bit k of each byte is vector k's fifth bit: move it to bit 4. A 16-bit shift by at
        // most four keeps bit 4 of each byte coming from that same byte.
        let high = _mm256_loadu_si256(blk.add(F::FORMAT.packed_quant_bytes()) as *const __m256i);
        let bit4 = _mm256_set1_epi8(0x10);
        for k in 0..8 {
            let moved = if k < 4 {
                _mm256_sll_epi16(high, _mm_cvtsi32_si128(4 - k as i32))
            } else {
                _mm256_srl_epi16(high, _mm_cvtsi32_si128(k as i32 - 4))
            };
            q[k] = _mm256_or_si256(q[k], _mm256_and_si256(moved, bit4));
        }
    }
    q
}

/// `G` groups (at `w`, `w + group_bytes`, ...) against `R` activation rows: lane `j` of
/// `acc[g][r]` is weight row `8g + j` · activation row `r`.
#[inline(always)]
unsafe fn packed_tile<F: Format, O: Isa, const R: usize, const G: usize>(
    w: *const u8,
    group_bytes: usize,
    nb: usize,
    ys: [*const ActBlock; R],
) -> [[__m256; R]; G] {
    let format = F::FORMAT;
    let signed = format == WeightFormat::Q8_0;
    let pb = format.packed_block_bytes();
    let scales_at = format.packed_scales_at();
    let offset = if signed { O::SIGNED_OFFSET } else { format.quant_offset() };
    let mut acc = [[_mm256_setzero_ps(); R]; G];
    for b in 0..nb {
        for g in 0..G {
            let blk = w.add(g * group_bytes + b * pb);
            prefetch(blk.wrapping_add(PREFETCH_TILES * G * group_bytes), pb);
            let q = quant_vectors::<F>(blk);
            let mut prepared = q;
            if signed {
                for k in 0..8 {
                    prepared[k] = O::prepare_signed(q[k]);
                }
            }
            let d = _mm256_cvtph_ps(_mm_loadu_si128(blk.add(scales_at) as *const __m128i));
            let m = if format.has_min() {
                _mm256_cvtph_ps(_mm_loadu_si128(blk.add(scales_at + 16) as *const __m128i))
            } else {
                _mm256_setzero_ps()
            };
            for r in 0..R {
                let a = ys[r].add(b);
                let qs = (*a).qs.as_ptr() as *const i32;
                let mut isum =
                    if offset != 0 { _mm256_set1_epi32(-offset * (*a).sum) } else { _mm256_setzero_si256() };
                for k in 0..8 {
                    let y = _mm256_set1_epi32(*qs.add(k));
                    isum = if signed {
                        O::dot_signed(isum, q[k], prepared[k], y)
                    } else {
                        O::dot_us(isum, q[k], y)
                    };
                }
                let scale = _mm256_mul_ps(d, _mm256_broadcast_ss(&(*a).d));
                acc[g][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), scale, acc[g][r]);
                if format.has_min() {
                    acc[g][r] = _mm256_fmadd_ps(m, _mm256_broadcast_ss(&(*a).s), acc[g][r]);
                }
            }
        }
    }
    acc
}

/// Stores a tile's lanes that are inside `out`, group `i` of the tile from `at + 8i`.
#[inline(always)]
unsafe fn store_tile<const R: usize>(v: &[[__m256; R]], out: &mut [&mut [f32]; R], at: usize) {
    for (i, v) in v.iter().enumerate() {
        for r in 0..R {
            let mut lanes = [0f32; GROUP];
            _mm256_storeu_ps(lanes.as_mut_ptr(), v[r]);
            let from = at + i * GROUP;
            let n = (out[r].len() - from).min(GROUP);
            out[r][from..from + n].copy_from_slice(&lanes[..n]);
        }
    }
}

/// Packed groups `groups` (`group_bytes` each, `nb` blocks) against `R` activation rows, `G`
/// groups at a time: `out[r][8 (g - groups.start) + j]` for weight row `8g + j`, as far as
/// `out[r]` reaches (the last group may hold rows past the matrix).
#[inline(always)]
pub(super) unsafe fn packed_rows<F: Format, O: Isa, const R: usize, const G: usize>(
    w: &[u8],
    group_bytes: usize,
    groups: Range<usize>,
    nb: usize,
    ys: [&[ActBlock]; R],
    out: &mut [&mut [f32]; R],
) {
    assert!(w.len() >= groups.end * group_bytes && group_bytes == nb * F::FORMAT.packed_block_bytes());
    assert!(ys.iter().all(|y| y.len() >= nb));
    assert!(out.iter().all(|o| o.len() <= groups.len() * GROUP && o.len() + GROUP > groups.len() * GROUP));
    let ys = ys.map(|y| y.as_ptr());
    let mut g = groups.start;
    while g + G <= groups.end {
        let v = packed_tile::<F, O, R, G>(w.as_ptr().add(g * group_bytes), group_bytes, nb, ys);
        store_tile(&v, out, (g - groups.start) * GROUP);
        g += G;
    }
    for g in g..groups.end {
        let v = packed_tile::<F, O, R, 1>(w.as_ptr().add(g * group_bytes), group_bytes, nb, ys);
        store_tile(&v, out, (g - groups.start) * GROUP);
    }
}
