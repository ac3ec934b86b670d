//! Keys and values per sequence, and causal attention over them.
//!
//! Each query row is computed in a fixed order that depends only on that row and its
//! sequence's cached positions, never on how many rows a call processes or which other
//! sequences share it: with row-invariant matmuls, one-pass and token-by-token scoring are
//! bit-identical, and batching never changes a sequence's results.

use half::f16;

use super::team::{DisjointPtr, Team};

/// Keys and values of one layer for one sequence: `[n_head_kv, capacity, head_dim]`, row-major,
/// in f16 as llama.cpp keeps them (the forward rounds them to f16 before writing, so nothing is
/// lost here, and attention reads half the bytes).
#[derive(Clone)]
pub(super) struct LayerKv {
    pub(super) keys: Vec<f16>,
    pub(super) values: Vec<f16>,
}

/// Keys and values of one sequence's past positions.
///
/// Buffers have room for `capacity` positions and each forward writes its new positions in
/// place, so no step copies the cache; a forward that needs more room doubles it (one copy per
/// doubling). [`KvCache::truncate`] rewinds it (to reuse a
/// shared prefix) without touching memory, and a clone starts another sequence from the same
/// prefix (sampling several continuations of one prompt).
#[derive(Clone)]
pub struct KvCache {
    pub(super) layers: Vec<LayerKv>,
    pub(super) len: usize,
    pub(super) capacity: usize,
    pub(super) n_kv: usize,
    pub(super) head_dim: usize,
}

impl KvCache {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes held by the key and value buffers.
    pub fn bytes(&self) -> usize {
        self.layers.len() * 2 * self.n_kv * self.capacity * self.head_dim * std::mem::size_of::<f16>()
    }

    /// Forgets positions from `len` on; they are overwritten by the next forward.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Makes room for `positions` positions, at least doubling the capacity when it grows.
    pub(super) fn reserve(&mut self, positions: usize) {
        if positions <= self.capacity {
            return;
        }
        let (old, hd) = (self.capacity, self.head_dim);
        let new = positions.max(old * 2);
        for kv in &mut self.layers {
            for buf in [&mut kv.keys, &mut kv.values] {
                let mut grown = vec![f16::ZERO; self.n_kv * new * hd];
                for h in 0..self.n_kv {
                    let kept = self.len * hd;
                    grown[h * new * hd..][..kept].copy_from_slice(&buf[h * old * hd..][..kept]);
                }
                *buf = grown;
            }
        }
        self.capacity = new;
    }

    /// Writes one layer's keys and values of one position (`[n_kv * head_dim]` each).
    pub(super) fn write(&mut self, layer: usize, key: &[f32], value: &[f32], pos: usize) {
        use half::slice::HalfFloatSliceExt;
        let (cap, hd) = (self.capacity, self.head_dim);
        let kv = &mut self.layers[layer];
        for (buf, row) in [(&mut kv.keys, key), (&mut kv.values, value)] {
            for (h, src) in row.chunks_exact(hd).enumerate() {
                let dst = (h * cap + pos) * hd;
                buf[dst..dst + hd].convert_from_f32_slice(src);
            }
        }
    }
}

/// Dot products of `q` with `N` keys. Each is eight lanes of fused multiply-adds over the
/// row (value `d` in lane `d % 8`), then the lanes summed in the tree of [`lanes_sum`], then
/// the values past the last multiple of eight: the result depends only on the two rows (not on
/// `N`, which only lets independent keys overlap).
trait Dots {
    fn dots<const N: usize>(q: &[f32], keys: [&[f16]; N]) -> [f32; N];
    /// `W` f16 values (a multiple of 8) as f32.
    fn widen<const W: usize>(values: &[f16]) -> [f32; W];
}

struct Portable;

impl Dots for Portable {
    #[inline(always)]
    fn dots<const N: usize>(q: &[f32], keys: [&[f16]; N]) -> [f32; N] {
        let mut lanes = [[0f32; 8]; N];
        let body = q.len() / 8 * 8;
        for (c, qc) in q[..body].chunks_exact(8).enumerate() {
            for n in 0..N {
                let kc = &keys[n][c * 8..][..8];
                for l in 0..8 {
                    lanes[n][l] = qc[l].mul_add(kc[l].to_f32(), lanes[n][l]);
                }
            }
        }
        std::array::from_fn(|n| tail_dot(q, keys[n], body, lanes_sum(&lanes[n])))
    }
    #[inline(always)]
    fn widen<const W: usize>(values: &[f16]) -> [f32; W] {
        std::array::from_fn(|i| values[i].to_f32())
    }
}

/// `sum` plus the products of values `from..` (after the 8-lane part), in order.
#[inline(always)]
fn tail_dot(q: &[f32], key: &[f16], from: usize, mut sum: f32) -> f32 {
    for d in from..q.len() {
        sum = q[d].mul_add(key[d].to_f32(), sum);
    }
    sum
}

/// [`Portable`]'s operations on AVX2 vectors with FMA.
#[cfg(target_arch = "x86_64")]
struct Avx2Fma;

#[cfg(target_arch = "x86_64")]
impl Dots for Avx2Fma {
    #[inline(always)]
    fn dots<const N: usize>(q: &[f32], keys: [&[f16]; N]) -> [f32; N] {
        use std::arch::x86_64::*;
        let body = q.len() / 8 * 8;
        assert!(keys.iter().all(|k| k.len() >= q.len()));
        // SAFETY: only called from `head_rows_avx2`, whose caller checked AVX2, FMA and F16C; every
        // load is inside `q` or a key (asserted above).
        unsafe {
            let mut acc = [_mm256_setzero_ps(); N];
            let mut c = 0;
            while c < body {
                let qv = _mm256_loadu_ps(q.as_ptr().add(c));
                for n in 0..N {
                    let k = _mm256_cvtph_ps(_mm_loadu_si128(keys[n].as_ptr().add(c) as *const __m128i));
                    acc[n] = _mm256_fmadd_ps(qv, k, acc[n]);
                }
                c += 8;
            }
            std::array::from_fn(|n| {
                // [l0+l4, l1+l5, l2+l6, l3+l7], then [(l0+l4)+(l2+l6), (l1+l5)+(l3+l7)], then
                // their sum: the tree of `lanes_sum`.
                let v = _mm_add_ps(_mm256_castps256_ps128(acc[n]), _mm256_extractf128_ps(acc[n], 1));
                let v = _mm_add_ps(v, _mm_movehl_ps(v, v));
                let v = _mm_add_ss(v, _mm_movehdup_ps(v));
                tail_dot(q, keys[n], body, _mm_cvtss_f32(v))
            })
        }
    }
    #[inline(always)]
    fn widen<const W: usize>(values: &[f16]) -> [f32; W] {
        use std::arch::x86_64::*;
        assert!(W.is_multiple_of(8) && values.len() >= W);
        let mut out = [0f32; W];
        // SAFETY: as for `dots` (F16C checked with AVX2); loads and stores stay inside
        // `values` and `out`.
        unsafe {
            for c in (0..W).step_by(8) {
                let v = _mm256_cvtph_ps(_mm_loadu_si128(values.as_ptr().add(c) as *const __m128i));
                _mm256_storeu_ps(out.as_mut_ptr().add(c), v);
            }
        }
        out
    }
}

#[inline(always)]
fn lanes_sum(l: &[f32; 8]) -> f32 {
    ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
}

/// `e^x` for `x ≤ 0` within two ulps (Cephes' range reduction and polynomial), written with
/// plain float operations so that the softmax loop vectorises and every path gives the same
/// bits.
#[inline(always)]
fn exp(x: f32) -> f32 {
    // Below this the result is under f32's smallest normal; the softmax weight is 0 anyway.
    let x = x.max(-87.0);
    let n = (x * std::f32::consts::LOG2_E).round_ties_even();
    let r = n.mul_add(-0.693_359_4, x);
    let r = n.mul_add(2.121_944_4e-4, r);
    let mut p = 1.987_569_1e-4f32;
    for c in [1.398_2e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5] {
        p = p.mul_add(r, c);
    }
    let e = (p * r).mul_add(r, r) + 1.0;
    e * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// Head layout for [`attend`].
#[derive(Clone, Copy)]
pub(super) struct Heads {
    pub(super) n_head: usize,
    pub(super) n_kv: usize,
    pub(super) hd: usize,
}

/// One query row of [`attend`]: the sequence's key/value buffers (`[n_kv, cap, hd]`) and the
/// row's position, which sees positions `0..=pos`.
#[derive(Clone, Copy)]
pub(super) struct QueryRow<'a> {
    pub(super) keys: &'a [f16],
    pub(super) values: &'a [f16],
    pub(super) cap: usize,
    pub(super) pos: usize,
}

/// Causal grouped-query attention. `q`: `[rows, n_head * hd]` (row-major, after RoPE). Query
/// head `h` reads K/V head `h / (n_head / n_kv)`. Returns `[rows, n_head * hd]`. Each output
/// depends only on its own query row and its sequence's cached positions.
pub(super) fn attend(q: &[f32], rows: &[QueryRow<'_>], heads: Heads) -> Vec<f32> {
    let Heads { n_head, n_kv, hd } = heads;
    let mut out = vec![0f32; rows.len() * n_head * hd];
    // Work per call ~ head rows × visible positions; small calls are not worth a hand-off.
    let work: usize = rows.iter().map(|r| r.pos + 1).sum::<usize>() * n_head * hd;
    let team = Team::global();
    // A unit is the query heads of one row that read one K/V head, so that each key and value
    // is read from memory once for all of them; with too few units to keep every thread busy,
    // a unit is one query head. Either way each head row is computed the same way.
    let span = if rows.len() * n_kv >= 4 * team.threads() { n_head / n_kv } else { 1 };
    let units = rows.len() * n_head / span;
    let tasks = if work < 1 << 16 { 1 } else { (team.threads() * 4).min(units) };
    let out_ptr = DisjointPtr(out.as_mut_ptr());
    // Task t takes units t, t + tasks, ...: later rows see more positions, so interleaving
    // balances the tasks.
    team.for_each(tasks, |t| {
        let task = Task { first: t, step: tasks, span };
        #[cfg(target_arch = "x86_64")]
        if has_avx2_fma_f16c() {
            // SAFETY: the features were just detected.
            return unsafe { head_rows_avx2(q, rows, heads, task, out_ptr) };
        }
        head_rows_portable(q, rows, heads, task, out_ptr)
    });
    out
}

#[cfg(target_arch = "x86_64")]
fn has_avx2_fma_f16c() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
}

/// One task's share of [`attend`]: units `first, first + step, ...` of `span` consecutive
/// query heads (head rows `unit * span ..`, index `row * n_head + head`).
#[derive(Clone, Copy)]
struct Task {
    first: usize,
    step: usize,
    span: usize,
}

/// Keys (or values) per step of the inner loops: independent dot products in flight.
const KEYS: usize = 4;
/// Output values accumulated in registers at a time (eight 8-lane vectors).
const OUT_CHUNK: usize = 64;

/// The units of `task` (see [`Task`]) into `out`.
#[inline(always)]
fn head_rows<D: Dots>(q: &[f32], rows: &[QueryRow<'_>], heads: Heads, task: Task, out: DisjointPtr<f32>) {
    let Heads { n_head, n_kv, hd } = heads;
    let group = n_head / n_kv;
    let span = task.span;
    let scale = 1.0 / (hd as f32).sqrt();
    let mut scores = Vec::new();
    for unit in (task.first..rows.len() * n_head / span).step_by(task.step) {
        let first = unit * span;
        let r = &rows[first / n_head];
        let base = ((first % n_head) / group) * r.cap * hd;
        let visible = r.pos + 1;
        let keys = &r.keys[base..][..visible * hd];
        let values = &r.values[base..][..visible * hd];
        let q_rows = &q[first * hd..(first + span) * hd];
        scores.clear();
        scores.resize(span * visible, 0f32);
        // Each key is loaded once for the unit's query heads.
        let mut j = 0;
        while j + KEYS <= visible {
            let ks: [&[f16]; KEYS] = std::array::from_fn(|n| &keys[(j + n) * hd..][..hd]);
            for (g, q_row) in q_rows.chunks_exact(hd).enumerate() {
                let d = D::dots::<KEYS>(q_row, ks);
                for n in 0..KEYS {
                    scores[g * visible + j + n] = d[n] * scale;
                }
            }
            j += KEYS;
        }
        for j in j..visible {
            for (g, q_row) in q_rows.chunks_exact(hd).enumerate() {
                scores[g * visible + j] = D::dots::<1>(q_row, [&keys[j * hd..][..hd]])[0] * scale;
            }
        }
        for (g, scores) in scores.chunks_exact_mut(visible).enumerate() {
            // SAFETY: head row `first + g` belongs to this task only and is inside the output.
            let out_row = unsafe { out.slice((first + g) * hd..(first + g + 1) * hd) };
            weighted_values::<D>(scores, values, hd, out_row);
        }
    }
}

/// Softmax of one head row's `scores` (in place), then the weighted sum of `values` into
/// `out_row`.
#[inline(always)]
fn weighted_values<D: Dots>(scores: &mut [f32], values: &[f16], hd: usize, out_row: &mut [f32]) {
    let visible = scores.len();
    let max = scores.iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s));
    scores.iter_mut().for_each(|sc| *sc = exp(*sc - max));
    // Position j's weight goes to lane j % 8 (separate loops, so that both vectorise).
    let mut total = [0f32; 8];
    let body = visible / 8 * 8;
    for c in scores[..body].chunks_exact(8) {
        for l in 0..8 {
            total[l] += c[l];
        }
    }
    for (l, sc) in scores[body..].iter().enumerate() {
        total[l] += sc;
    }
    let inv = 1.0 / lanes_sum(&total);
    for (d0, out_chunk) in (0..hd).step_by(OUT_CHUNK).zip(out_row.chunks_mut(OUT_CHUNK)) {
        if out_chunk.len() == OUT_CHUNK {
            let mut acc = [0f32; OUT_CHUNK];
            for (j, &p) in scores.iter().enumerate() {
                let v = D::widen::<OUT_CHUNK>(&values[j * hd + d0..][..OUT_CHUNK]);
                for d in 0..OUT_CHUNK {
                    acc[d] = p.mul_add(v[d], acc[d]);
                }
            }
            for (o, a) in out_chunk.iter_mut().zip(acc) {
                *o = a * inv;
            }
        } else {
            out_chunk.fill(0.0);
            for (j, &p) in scores.iter().enumerate() {
                let v = &values[j * hd + d0..][..out_chunk.len()];
                for (o, v) in out_chunk.iter_mut().zip(v) {
                    *o = p.mul_add(v.to_f32(), *o);
                }
            }
            out_chunk.iter_mut().for_each(|o| *o *= inv);
        }
    }
}

fn head_rows_portable(q: &[f32], rows: &[QueryRow<'_>], heads: Heads, task: Task, out: DisjointPtr<f32>) {
    head_rows::<Portable>(q, rows, heads, task, out)
}

/// [`head_rows`] compiled for AVX2 and FMA: wider vectors, the same operations in the same
/// order, so the same bits.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn head_rows_avx2(q: &[f32], rows: &[QueryRow<'_>], heads: Heads, task: Task, out: DisjointPtr<f32>) {
    head_rows::<Avx2Fma>(q, rows, heads, task, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic pseudo-random fill.
    fn fill(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = crate::rng::SplitMix64::new(seed);
        (0..n).map(|_| rng.next_f64() as f32 * 2.0 - 1.0).collect()
    }

    /// [`fill`] in f16, as the cache holds keys and values.
    fn fill_f16(n: usize, seed: u64) -> Vec<f16> {
        fill(n, seed).into_iter().map(f16::from_f32).collect()
    }

    /// The definition of attention in float64 loops, the reference for [`attend`].
    /// `q`: `[t, heads, hd]` at positions `start..start+t`, `k`/`v`: `[n_kv, cap, hd]`.
    fn reference(q: &[f32], k: &[f16], v: &[f16], heads: Heads, start: usize, cap: usize) -> Vec<f32> {
        let Heads { n_head, n_kv, hd } = heads;
        let t = q.len() / (n_head * hd);
        let group = n_head / n_kv;
        let mut out = vec![0f32; t * n_head * hd];
        for h in 0..n_head {
            let kv = h / group;
            for i in 0..t {
                let q_row = &q[(i * n_head + h) * hd..][..hd];
                let scores: Vec<f64> = (0..=start + i)
                    .map(|j| {
                        let k_row = &k[(kv * cap + j) * hd..][..hd];
                        q_row.iter().zip(k_row).map(|(a, b)| *a as f64 * b.to_f64()).sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = scores.iter().map(|x| (x - max).exp()).sum();
                for (j, x) in scores.iter().enumerate() {
                    let p = (x - max).exp() / z;
                    for d in 0..hd {
                        out[(i * n_head + h) * hd + d] += (p * v[(kv * cap + j) * hd + d].to_f64()) as f32;
                    }
                }
            }
        }
        out
    }

    #[test]
    fn grouped_attention_matches_the_definition_and_ignores_batching() {
        let (t, start, cap) = (7, 3, 12);
        let heads = Heads { n_head: 9, n_kv: 3, hd: 64 };
        let q = fill(t * heads.n_head * heads.hd, 1);
        let k = fill_f16(heads.n_kv * cap * heads.hd, 2);
        let v = fill_f16(heads.n_kv * cap * heads.hd, 3);
        let rows: Vec<QueryRow<'_>> =
            (0..t).map(|i| QueryRow { keys: &k, values: &v, cap, pos: start + i }).collect();
        let got = attend(&q, &rows, heads);
        let want = reference(&q, &k, &v, heads, start, cap);
        let max_diff = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(max_diff < 1e-5, "max diff {max_diff}");
        // Row by row (as token-by-token decoding runs it) gives the very same bits, and so does
        // a row batched with rows of another sequence.
        let (k2, v2) = (fill_f16(heads.n_kv * 5 * heads.hd, 4), fill_f16(heads.n_kv * 5 * heads.hd, 5));
        let other = QueryRow { keys: &k2, values: &v2, cap: 5, pos: 4 };
        let row_len = heads.n_head * heads.hd;
        for (i, row) in rows.iter().enumerate() {
            let single = attend(&q[i * row_len..][..row_len], &[*row], heads);
            assert_eq!(single, got[i * row_len..][..row_len]);
            let mut mixed_q = fill(row_len, 6);
            mixed_q.extend_from_slice(&q[i * row_len..][..row_len]);
            let mixed = attend(&mixed_q, &[other, *row], heads);
            assert_eq!(mixed[row_len..], got[i * row_len..][..row_len]);
        }
    }

    #[test]
    fn exp_is_within_two_ulps_over_the_softmax_range() {
        let mut worst = 0f64;
        for i in 0..=200_000 {
            let x = -87.0 * i as f32 / 200_000.0;
            let want = (x as f64).exp();
            let rel = ((exp(x) as f64 - want) / want).abs();
            worst = worst.max(rel);
        }
        assert!(worst < 2.5 * f32::EPSILON as f64, "worst relative error {worst:e}");
        assert_eq!(exp(0.0), 1.0);
    }

    /// The AVX2 build of the kernel gives the portable build's bits (head sizes with and
    /// without a remainder past the 8-lane and 64-value chunks).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn every_path_gives_the_same_bits() {
        assert!(has_avx2_fma_f16c(), "this test needs a CPU with AVX2/FMA/F16C");
        for hd in [64, 100, 128] {
            let heads = Heads { n_head: 4, n_kv: 2, hd };
            let (t, cap) = (9, 11);
            let q = fill(t * heads.n_head * hd, 7);
            let k = fill_f16(heads.n_kv * cap * hd, 8);
            let v = fill_f16(heads.n_kv * cap * hd, 9);
            let rows: Vec<QueryRow<'_>> =
                (0..t).map(|i| QueryRow { keys: &k, values: &v, cap, pos: 2 + i }).collect();
            let mut portable = vec![0f32; q.len()];
            let one_head = Task { first: 0, step: 1, span: 1 };
            head_rows_portable(&q, &rows, heads, one_head, DisjointPtr(portable.as_mut_ptr()));
            // Query heads grouped by their K/V head, on both paths.
            for span in [1, 2] {
                let mut avx2 = vec![0f32; q.len()];
                let task = Task { span, ..one_head };
                // SAFETY: the features were checked above.
                unsafe { head_rows_avx2(&q, &rows, heads, task, DisjointPtr(avx2.as_mut_ptr())) };
                let same = portable.iter().zip(&avx2).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "head size {hd}, span {span}");
                let mut grouped = vec![0f32; q.len()];
                head_rows_portable(&q, &rows, heads, task, DisjointPtr(grouped.as_mut_ptr()));
                assert_eq!(portable, grouped, "head size {hd}, span {span}");
            }
        }
    }

    #[test]
    fn cache_rows_land_at_their_positions() {
        let (n_kv, cap, hd) = (2, 5, 4);
        let size = n_kv * cap * hd;
        let mut cache = KvCache {
            layers: vec![LayerKv { keys: vec![f16::ZERO; size], values: vec![f16::ZERO; size] }],
            len: 0,
            capacity: cap,
            n_kv,
            head_dim: hd,
        };
        let key: Vec<f32> = (0..n_kv * hd).map(|x| x as f32 + 1.0).collect();
        let value: Vec<f32> = key.iter().map(|x| -x).collect();
        cache.write(0, &key, &value, 3);
        // Head 1 of position 3.
        let dst = (cap + 3) * hd;
        let widened = |xs: &[f16]| xs.iter().map(|x| x.to_f32()).collect::<Vec<_>>();
        assert_eq!(widened(&cache.layers[0].keys[dst..dst + hd]), key[hd..]);
        assert_eq!(widened(&cache.layers[0].values[dst..dst + hd]), value[hd..]);
        assert!(cache.layers[0].keys[..3 * hd].iter().all(|&x| x == f16::ZERO), "positions 0..3 untouched");
        assert_eq!(cache.bytes(), 2 * size * 2);
    }
}
