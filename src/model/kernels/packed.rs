//! Block-format weights repacked eight output rows at a time, and the portable kernel on them.
//!
//! GGUF stores a weight row's 32-value blocks one after another. Our kernels instead read a
//! *group* of [`GROUP`] rows block by block: the group's blocks at index `b` are packed into one
//! block of the same total size in which 32-byte vector `k` holds values `4k..4k+4` of each of
//! the eight rows (row `j` in 32-bit lane `j`). One `vpdpbusd` of such a vector with four
//! activation bytes broadcast to every lane then advances eight rows' dot products at once, and
//! each lane ends the block with its row's exact integer sum; the float scaling is then one
//! multiply and one fused multiply-add per block for eight rows, where the GGUF order needs a
//! vector of partial sums per row. This is llama.cpp's "repack" idea (`block_q4_0x8`), with our
//! own layout.
//!
//! A packed block is `[quants][high bits][d: 8 × f16][m: 8 × f16]`:
//! - 4- and 5-bit quants: 4 × 32 bytes; byte `4j + t` of chunk `c` holds row `j`'s value
//!   `4c + t` in its low nibble and value `16 + 4c + t` in its high nibble, so vector `k` is
//!   chunk `k` masked (k < 4) or chunk `k − 4` shifted down by four;
//! - 5-bit formats add 32 bytes of fifth bits: bit `k` of byte `4j + t` is the fifth bit of row
//!   `j`'s value `4k + t`;
//! - Q8_0: 8 × 32 bytes, vector `k` stored as it is read;
//! - scales (and minimums) of the eight rows, as f16.
//!
//! The arithmetic, the same on every path: per block, the exact integer dot product `Σ q·a`
//! (signed quants), then `acc = fma(Σ, d·a.d, acc)` and, for formats with a minimum,
//! `acc = fma(m, a.s, acc)`. A group's rows past the matrix's last row are zero blocks.

use super::quant::{read_f16, ActBlock, WeightFormat, QK};

/// Weight rows per packed group.
pub const GROUP: usize = 8;

impl WeightFormat {
    /// Bytes of the quants of a packed block.
    pub const fn packed_quant_bytes(self) -> usize {
        match self {
            Self::Q8_0 => 8 * 32,
            _ => 4 * 32,
        }
    }

    /// Whether values have a fifth bit (stored after the quants).
    pub const fn has_high_bits(self) -> bool {
        matches!(self, Self::Q5_0 | Self::Q5_1)
    }

    /// value = d·q + m rather than d·q.
    pub const fn has_min(self) -> bool {
        matches!(self, Self::Q4_1 | Self::Q5_1)
    }

    /// Where the eight f16 scales start in a packed block.
    pub const fn packed_scales_at(self) -> usize {
        self.packed_quant_bytes() + if self.has_high_bits() { 32 } else { 0 }
    }

    /// Bytes of a packed block: the same as [`GROUP`] GGUF blocks.
    pub const fn packed_block_bytes(self) -> usize {
        GROUP * self.block_bytes()
    }

    /// What the stored (unsigned) 4- or 5-bit quant exceeds the signed value by; 0 for formats
    /// with a minimum and for Q8_0, whose quants are stored signed.
    pub const fn quant_offset(self) -> i32 {
        match self {
            Self::Q4_0 => 8,
            Self::Q5_0 => 16,
            _ => 0,
        }
    }
}

const _: () = {
    let formats =
        [WeightFormat::Q4_0, WeightFormat::Q4_1, WeightFormat::Q5_0, WeightFormat::Q5_1, WeightFormat::Q8_0];
    let mut i = 0;
    while i < formats.len() {
        let f = formats[i];
        let scales = if f.has_min() { 32 } else { 16 };
        assert!(f.packed_scales_at() + scales == f.packed_block_bytes());
        i += 1;
    }
};

/// One GGUF block's 32 quants as stored (unsigned for 4- and 5-bit formats, the byte itself for
/// Q8_0), its scale's and its minimum's f16 bits.
pub(super) fn gguf_block(format: WeightFormat, blk: &[u8]) -> ([u8; QK], [u8; 2], [u8; 2]) {
    let d = [blk[0], blk[1]];
    let (m, qh, qs) = match format {
        WeightFormat::Q4_0 => ([0; 2], None, &blk[2..18]),
        WeightFormat::Q4_1 => ([blk[2], blk[3]], None, &blk[4..20]),
        WeightFormat::Q5_0 => ([0; 2], Some(&blk[2..6]), &blk[6..22]),
        WeightFormat::Q5_1 => ([blk[2], blk[3]], Some(&blk[4..8]), &blk[8..24]),
        WeightFormat::Q8_0 => return (blk[2..34].try_into().expect("32 bytes"), d, [0; 2]),
    };
    let high = qh.map_or(0, |h| u32::from_le_bytes([h[0], h[1], h[2], h[3]]));
    let mut q = [0u8; QK];
    for i in 0..QK / 2 {
        q[i] = (qs[i] & 0x0F) | ((((high >> i) & 1) as u8) << 4);
        q[i + QK / 2] = (qs[i] >> 4) | ((((high >> (i + QK / 2)) & 1) as u8) << 4);
    }
    (q, d, m)
}

/// Repacks `n` GGUF rows of `nb` blocks (`data`) into `ceil(n / 8)` groups of `nb` packed
/// blocks each, group after group.
pub fn pack(format: WeightFormat, data: &[u8], n: usize, nb: usize) -> Vec<u8> {
    let bb = format.block_bytes();
    let pb = format.packed_block_bytes();
    assert!(data.len() >= n * nb * bb, "weight data shorter than {n} rows of {nb} blocks");
    let groups = n.div_ceil(GROUP);
    let mut out = vec![0u8; groups * nb * pb];
    let scales = format.packed_scales_at();
    for (g, group) in out.chunks_exact_mut(nb * pb).enumerate() {
        for (b, packed) in group.chunks_exact_mut(pb).enumerate() {
            for j in 0..GROUP.min(n - g * GROUP) {
                let row = g * GROUP + j;
                let (q, d, m) = gguf_block(format, &data[(row * nb + b) * bb..][..bb]);
                for (v, &q) in q.iter().enumerate() {
                    let (k, t) = (v / 4, v % 4);
                    let lane = 4 * j + t;
                    if format == WeightFormat::Q8_0 {
                        packed[32 * k + lane] = q;
                        continue;
                    }
                    let shift = if k < 4 { 0 } else { 4 };
                    packed[32 * (k % 4) + lane] |= (q & 0x0F) << shift;
                    if format.has_high_bits() {
                        packed[format.packed_quant_bytes() + lane] |= (q >> 4) << k;
                    }
                }
                packed[scales + 2 * j..][..2].copy_from_slice(&d);
                if format.has_min() {
                    packed[scales + 16 + 2 * j..][..2].copy_from_slice(&m);
                }
            }
        }
    }
    out
}

/// The GGUF rows back from [`pack`]'s groups: `n` rows of `nb` blocks.
pub fn unpack(format: WeightFormat, packed: &[u8], n: usize, nb: usize) -> Vec<u8> {
    let (bb, pb) = (format.block_bytes(), format.packed_block_bytes());
    let mut out = vec![0u8; n * nb * bb];
    for (row, blocks) in out.chunks_exact_mut(nb * bb).enumerate() {
        let (g, j) = (row / GROUP, row % GROUP);
        for (b, blk) in blocks.chunks_exact_mut(bb).enumerate() {
            let p = &packed[(g * nb + b) * pb..][..pb];
            let q = row_quants(format, p, j);
            let scales = format.packed_scales_at() + 2 * j;
            blk[..2].copy_from_slice(&p[scales..scales + 2]);
            let stored = |v: usize| (q[v] + format.quant_offset()) as u8;
            let (qh, qs) = match format {
                WeightFormat::Q8_0 => {
                    for (v, byte) in blk[2..].iter_mut().enumerate() {
                        *byte = q[v] as i8 as u8;
                    }
                    continue;
                }
                WeightFormat::Q4_0 => (None, 2),
                WeightFormat::Q5_0 => (Some(2), 6),
                WeightFormat::Q4_1 | WeightFormat::Q5_1 => {
                    blk[2..4].copy_from_slice(&p[scales + 16..scales + 18]);
                    (format.has_high_bits().then_some(4), if format.has_high_bits() { 8 } else { 4 })
                }
            };
            for i in 0..QK / 2 {
                blk[qs + i] = (stored(i) & 0x0F) | (stored(i + QK / 2) << 4);
            }
            if let Some(at) = qh {
                let high = (0..QK).fold(0u32, |h, v| h | (((stored(v) >> 4) as u32 & 1) << v));
                blk[at..at + 4].copy_from_slice(&high.to_le_bytes());
            }
        }
    }
    out
}

/// Row `j`'s signed quants (value = d·q + m) in a packed block.
pub fn row_quants(format: WeightFormat, packed: &[u8], j: usize) -> [i32; QK] {
    std::array::from_fn(|v| {
        let (k, t) = (v / 4, v % 4);
        let lane = 4 * j + t;
        if format == WeightFormat::Q8_0 {
            return packed[32 * k + lane] as i8 as i32;
        }
        let byte = packed[32 * (k % 4) + lane];
        let mut q = if k < 4 { byte & 0x0F } else { byte >> 4 } as i32;
        if format.has_high_bits() {
            q |= (((packed[format.packed_quant_bytes() + lane] >> k) & 1) as i32) << 4;
        }
        q - format.quant_offset()
    })
}

/// Row `j`'s scale and minimum in a packed block.
pub fn row_scales(format: WeightFormat, packed: &[u8], j: usize) -> (f32, f32) {
    let at = format.packed_scales_at();
    let m = if format.has_min() { read_f16(packed, at + 16 + 2 * j) } else { 0.0 };
    (read_f16(packed, at + 2 * j), m)
}

/// Row `j` of a packed group (`nb` blocks) as f32 values.
pub fn dequantize_row(format: WeightFormat, group: &[u8], j: usize, out: &mut [f32]) {
    for (packed, values) in group.chunks_exact(format.packed_block_bytes()).zip(out.chunks_exact_mut(QK)) {
        let (d, m) = row_scales(format, packed, j);
        for (v, q) in values.iter_mut().zip(row_quants(format, packed, j)) {
            *v = d * q as f32 + m;
        }
    }
}

/// The dot products of one packed group (`nb` blocks) with one activation row: lane `j` is row
/// `j`'s. The portable kernel and the reference the vector paths match bit for bit.
pub fn dot_group(format: WeightFormat, group: &[u8], y: &[ActBlock]) -> [f32; GROUP] {
    let pb = format.packed_block_bytes();
    let mut acc = [0f32; GROUP];
    for (packed, a) in group.chunks_exact(pb).zip(y) {
        for (j, acc) in acc.iter_mut().enumerate() {
            let q = row_quants(format, packed, j);
            let isum: i32 = q.iter().zip(&a.qs).map(|(&q, &y)| q * y as i32).sum();
            let (d, m) = row_scales(format, packed, j);
            *acc = (isum as f32).mul_add(d * a.d, *acc);
            if format.has_min() {
                *acc = m.mul_add(a.s, *acc);
            }
        }
    }
    acc
}

#[cfg(test)]
mod tests {
    use half::f16;

    use super::*;

    /// Every byte pattern of a block comes back as the same quants and scales.
    #[test]
    fn packing_keeps_every_rows_quants_and_scales() {
        let formats = [
            WeightFormat::Q4_0,
            WeightFormat::Q4_1,
            WeightFormat::Q5_0,
            WeightFormat::Q5_1,
            WeightFormat::Q8_0,
        ];
        for format in formats {
            let (n, nb, bb) = (11, 3, format.block_bytes());
            let data: Vec<u8> = (0..n * nb * bb).map(|i| (i * 97 + i / 7) as u8).collect();
            let packed = pack(format, &data, n, nb);
            let pb = format.packed_block_bytes();
            assert_eq!(packed.len(), 2 * nb * pb);
            for row in 0..n {
                for b in 0..nb {
                    let blk = &data[(row * nb + b) * bb..][..bb];
                    let (q, d, m) = gguf_block(format, blk);
                    let p = &packed[((row / GROUP) * nb + b) * pb..][..pb];
                    let want: [i32; QK] = std::array::from_fn(|v| match format {
                        WeightFormat::Q8_0 => q[v] as i8 as i32,
                        _ => q[v] as i32 - format.quant_offset(),
                    });
                    assert_eq!(row_quants(format, p, row % GROUP), want, "{format:?} row {row} block {b}");
                    let (pd, pm) = row_scales(format, p, row % GROUP);
                    assert_eq!(pd.to_bits(), f16::from_bits(u16::from_le_bytes(d)).to_f32().to_bits());
                    if format.has_min() {
                        assert_eq!(pm.to_bits(), f16::from_bits(u16::from_le_bytes(m)).to_f32().to_bits());
                    }
                }
            }
            assert_eq!(unpack(format, &packed, n, nb), data, "{format:?}");
            // The group's missing rows are zero blocks.
            let last = &packed[nb * pb..][..pb];
            assert_eq!(row_scales(format, last, 5), (0.0, 0.0), "{format:?}");
        }
    }
}
