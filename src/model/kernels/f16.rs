//! F16 weights: the matmul reads them as stored for a few activation rows (decode) and from a
//! copy widened to f32 per task for many (prefill), where every tile of four activation rows
//! would otherwise convert them again. Both read the same values in the same order.

use std::ops::Range;

#[cfg(target_arch = "x86_64")]
use super::{
    super::team::{DisjointPtr, Team},
    x86, x86_f16, Tile,
};
use super::{matmul, quant, scalar_rows, KernelPath, RowDot, Shape, QK};

/// Activation rows from which an F16 matmul task widens its weight rows to f32 once instead of
/// converting them in every tile (each tile of four rows converted them again).
#[cfg(target_arch = "x86_64")]
const WIDEN_F16_ROWS: usize = 16;

#[cfg(target_arch = "x86_64")]
thread_local! {
    /// A task's F16 weight rows widened to f32, kept between matmuls on the team's threads.
    static WIDENED: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// F16 weights: as stored for a few activation rows; widened per task for many.
pub(super) fn matmul_f16(path: KernelPath, w: &[u8], acts: &[[f32; QK]], shape: Shape, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if shape.m >= WIDEN_F16_ROWS && path != KernelPath::Scalar && x86::has_avx2() {
        return matmul_f16_widened(path, w, acts, shape, out);
    }
    let dot = F16Dot::<StoredF16> { path, weights: std::marker::PhantomData };
    matmul(&dot, w, acts, shape, out);
}

/// `matmul_f16` for many rows: each task widens its weight rows, a chunk at a time that stays
/// in a core's cache (about 256 KiB of f32).
#[cfg(target_arch = "x86_64")]
fn matmul_f16_widened(path: KernelPath, w: &[u8], acts: &[[f32; QK]], shape: Shape, out: &mut [f32]) {
    let Shape { n, nb, m, row_bytes } = shape;
    assert!(w.len() >= n * row_bytes, "weight data shorter than its shape");
    assert_eq!(acts.len(), m * nb);
    assert_eq!(out.len(), m * n);
    let dot = F16Dot::<x86_f16::Wide> { path, weights: std::marker::PhantomData };
    let chunk = ((256 << 10) / (2 * row_bytes)).max(1);
    let out_ptr = DisjointPtr(out.as_mut_ptr());
    Team::global().for_each_range(n, 4, |units| {
        WIDENED.with_borrow_mut(|wide| {
            let mut start = units.start;
            while start < units.end {
                let units = start..(start + chunk).min(units.end);
                wide.resize(units.len() * nb * QK, 0.0);
                let f16 = &w[units.start * row_bytes..units.end * row_bytes];
                // SAFETY: the caller checked AVX2/F16C; the lengths match.
                unsafe { x86_f16::widen_f16(f16, wide) };
                // SAFETY: plain f32 values seen as their bytes.
                let bytes = unsafe { std::slice::from_raw_parts(wide.as_ptr() as *const u8, wide.len() * 4) };
                let tile = Tile {
                    w: bytes,
                    row_bytes: 2 * row_bytes,
                    first_unit: units.start,
                    nb,
                    acts,
                    n,
                    out: out_ptr,
                };
                tile.run_all(&dot, m, units.clone());
                start = units.end;
            }
        })
    });
}

/// F16 weights read as `W`: as stored, or widened to f32.
struct F16Dot<W> {
    path: KernelPath,
    weights: std::marker::PhantomData<W>,
}

#[cfg(target_arch = "x86_64")]
use super::x86_f16::{Half as StoredF16, Weights as F16Read};
/// Off x86 only the scalar path runs, on the stored f16 values.
#[cfg(not(target_arch = "x86_64"))]
trait F16Read {
    const BYTES: usize;
}
#[cfg(not(target_arch = "x86_64"))]
struct StoredF16;
#[cfg(not(target_arch = "x86_64"))]
impl F16Read for StoredF16 {
    const BYTES: usize = 2;
}

impl<W: F16Read + Sync> RowDot for F16Dot<W> {
    type Act = [f32; QK];
    const UNIT: usize = 1;
    fn dot_rows<const R: usize, const C: usize>(
        &self,
        w: &[u8],
        row_bytes: usize,
        rows: Range<usize>,
        nb: usize,
        ys: [&[[f32; QK]]; R],
        out: &mut [&mut [f32]; R],
    ) {
        dispatch!(
            self.path,
            f16_rows::<W, R, C>(w, row_bytes, rows, nb, ys, out),
            else {
                assert_eq!(W::BYTES, 2, "widened F16 weights on the scalar path");
                scalar_rows(w, row_bytes, rows, ys, out, quant::dot_row_f16)
            }
        )
    }
}

/// Activations rounded to f16, as F16 weights' dot products read them.
pub(super) fn round_row_f16(path: KernelPath, x: &[f32], out: &mut [[f32; QK]]) {
    match path {
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx512Vnni | KernelPath::Avx2 if x86::has_avx2() => {
            // SAFETY: the CPU features are checked just above; the lengths are asserted inside.
            unsafe { x86_f16::round_row_f16(x, out) }
        }
        _ => quant::round_row_f16(x, out),
    }
}
