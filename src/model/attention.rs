//! Keys and values per sequence, and causal attention over them.
//!
//! Each query row is computed in a fixed order that depends only on that row and its
//! sequence's cached positions, never on how many rows a call processes or which other
//! sequences share it: with row-invariant matmuls, one-pass and token-by-token scoring are
//! bit-identical, and batching never changes a sequence's results.

use super::team::{DisjointPtr, Team};

/// Keys and values of one layer for one sequence: `[n_head_kv, capacity, head_dim]`, row-major.
#[derive(Clone)]
pub(super) struct LayerKv {
    pub(super) keys: Vec<f32>,
    pub(super) values: Vec<f32>,
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
        self.layers.len() * 2 * self.n_kv * self.capacity * self.head_dim * std::mem::size_of::<f32>()
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
                let mut grown = vec![0f32; self.n_kv * new * hd];
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
        let (cap, hd) = (self.capacity, self.head_dim);
        let kv = &mut self.layers[layer];
        for (buf, row) in [(&mut kv.keys, key), (&mut kv.values, value)] {
            for (h, src) in row.chunks_exact(hd).enumerate() {
                let dst = (h * cap + pos) * hd;
                buf[dst..dst + hd].copy_from_slice(src);
            }
        }
    }
}

/// `a · b` summed in a fixed order (eight lanes, then the lanes in order), so the result depends
/// only on the two rows. The lanes let the compiler vectorise it (with AVX2 inside
/// [`head_rows_avx2`]: products and sums stay separate operations, so every path gives the
/// same bits).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (ac, ar) = a.split_at(a.len() / 8 * 8);
    let (bc, br) = b.split_at(ac.len());
    for (x, y) in ac.chunks_exact(8).zip(bc.chunks_exact(8)) {
        for l in 0..8 {
            lanes[l] += x[l] * y[l];
        }
    }
    let mut sum = lanes.iter().sum::<f32>();
    for (x, y) in ar.iter().zip(br) {
        sum += x * y;
    }
    sum
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
    pub(super) keys: &'a [f32],
    pub(super) values: &'a [f32],
    pub(super) cap: usize,
    pub(super) pos: usize,
}

/// Causal grouped-query attention. `q`: `[rows, n_head * hd]` (row-major, after RoPE). Query
/// head `h` reads K/V head `h / (n_head / n_kv)`. Returns `[rows, n_head * hd]`. Each output
/// depends only on its own query row and its sequence's cached positions.
pub(super) fn attend(q: &[f32], rows: &[QueryRow<'_>], heads: Heads) -> Vec<f32> {
    let Heads { n_head, hd, .. } = heads;
    let head_rows = rows.len() * n_head;
    let mut out = vec![0f32; head_rows * hd];
    // Work per call ~ head rows × visible positions; small calls are not worth a hand-off.
    let work: usize = rows.iter().map(|r| r.pos + 1).sum::<usize>() * n_head * hd;
    let team = Team::global();
    let tasks = if work < 1 << 16 { 1 } else { (team.threads() * 4).min(head_rows) };
    let per_task = head_rows.div_ceil(tasks);
    let out_ptr = DisjointPtr(out.as_mut_ptr());
    team.for_each(head_rows.div_ceil(per_task), |t| {
        let range = t * per_task..((t + 1) * per_task).min(head_rows);
        // SAFETY: tasks write disjoint ranges of head rows.
        let out = unsafe { out_ptr.slice(range.start * hd..range.end * hd) };
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 was just detected.
            return unsafe { head_rows_avx2(q, rows, heads, range, out) };
        }
        head_rows_portable(q, rows, heads, range, out)
    });
    out
}

/// Head rows `range` (index `row * n_head + head`) of [`attend`] into `out`.
#[inline(always)]
fn head_rows(q: &[f32], rows: &[QueryRow<'_>], heads: Heads, range: std::ops::Range<usize>, out: &mut [f32]) {
    let Heads { n_head, n_kv, hd } = heads;
    let group = n_head / n_kv;
    let scale = 1.0 / (hd as f32).sqrt();
    let mut scores = Vec::new();
    for (index, out_row) in range.zip(out.chunks_exact_mut(hd)) {
        let h = index % n_head;
        let r = &rows[index / n_head];
        let q_row = &q[index * hd..][..hd];
        let base = (h / group) * r.cap * hd;
        let visible = r.pos + 1;
        scores.clear();
        let mut max = f32::NEG_INFINITY;
        for j in 0..visible {
            let score = dot(q_row, &r.keys[base + j * hd..][..hd]) * scale;
            max = max.max(score);
            scores.push(score);
        }
        let mut total = 0f32;
        for sc in scores.iter_mut() {
            *sc = (*sc - max).exp();
            total += *sc;
        }
        for (j, p) in scores.iter().enumerate() {
            let v_row = &r.values[base + j * hd..][..hd];
            for (o, v) in out_row.iter_mut().zip(v_row) {
                *o += p * v;
            }
        }
        let inv = 1.0 / total;
        for o in out_row.iter_mut() {
            *o *= inv;
        }
    }
}

fn head_rows_portable(
    q: &[f32],
    rows: &[QueryRow<'_>],
    heads: Heads,
    range: std::ops::Range<usize>,
    out: &mut [f32],
) {
    head_rows(q, rows, heads, range, out)
}

/// [`head_rows`] compiled for AVX2 (wider vectors, the same operations in the same order).
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn head_rows_avx2(
    q: &[f32],
    rows: &[QueryRow<'_>],
    heads: Heads,
    range: std::ops::Range<usize>,
    out: &mut [f32],
) {
    head_rows(q, rows, heads, range, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic pseudo-random fill.
    fn fill(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = crate::rng::SplitMix64::new(seed);
        (0..n).map(|_| rng.next_f64() as f32 * 2.0 - 1.0).collect()
    }

    /// The definition of attention in float64 loops, the reference for [`attend`].
    /// `q`: `[t, heads, hd]` at positions `start..start+t`, `k`/`v`: `[n_kv, cap, hd]`.
    fn reference(q: &[f32], k: &[f32], v: &[f32], heads: Heads, start: usize, cap: usize) -> Vec<f32> {
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
                        q_row.iter().zip(k_row).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = scores.iter().map(|x| (x - max).exp()).sum();
                for (j, x) in scores.iter().enumerate() {
                    let p = (x - max).exp() / z;
                    for d in 0..hd {
                        out[(i * n_head + h) * hd + d] += (p * v[(kv * cap + j) * hd + d] as f64) as f32;
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
        let k = fill(heads.n_kv * cap * heads.hd, 2);
        let v = fill(heads.n_kv * cap * heads.hd, 3);
        let rows: Vec<QueryRow<'_>> =
            (0..t).map(|i| QueryRow { keys: &k, values: &v, cap, pos: start + i }).collect();
        let got = attend(&q, &rows, heads);
        let want = reference(&q, &k, &v, heads, start, cap);
        let max_diff = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(max_diff < 1e-5, "max diff {max_diff}");
        // Row by row (as token-by-token decoding runs it) gives the very same bits, and so does
        // a row batched with rows of another sequence.
        let (k2, v2) = (fill(heads.n_kv * 5 * heads.hd, 4), fill(heads.n_kv * 5 * heads.hd, 5));
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
    fn cache_rows_land_at_their_positions() {
        let (n_kv, cap, hd) = (2, 5, 4);
        let size = n_kv * cap * hd;
        let mut cache = KvCache {
            layers: vec![LayerKv { keys: vec![0.0; size], values: vec![0.0; size] }],
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
        assert_eq!(cache.layers[0].keys[dst..dst + hd], key[hd..]);
        assert_eq!(cache.layers[0].values[dst..dst + hd], value[hd..]);
        assert!(cache.layers[0].keys[..3 * hd].iter().all(|&x| x == 0.0), "positions 0..3 untouched");
        assert_eq!(cache.bytes(), 2 * size * 4);
    }
}
