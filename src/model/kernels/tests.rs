use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

use super::quant::{self, ActBlock, WeightFormat, QK};
use super::*;

/// Deterministic values in roughly [-1, 1] with some outliers, like activations.
fn pseudo_random(len: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..len)
        .map(|i| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let u = (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
            if i % 97 == 0 {
                u * 8.0
            } else {
                u
            }
        })
        .collect()
}

fn layer(dtype: GgmlDType, n: usize, k: usize, seed: u64) -> QLinear {
    let w = Tensor::from_vec(pseudo_random(n * k, seed), (n, k), &Device::Cpu).unwrap();
    QLinear::new(Arc::new(QTensor::quantize(&w, dtype).unwrap())).unwrap()
}

fn input(m: usize, k: usize, seed: u64) -> Tensor {
    Tensor::from_vec(pseudo_random(m * k, seed), (m, k), &Device::Cpu).unwrap()
}

const FORMATS: [GgmlDType; 3] = [GgmlDType::Q4_0, GgmlDType::Q4_1, GgmlDType::Q8_0];
/// Every format with our own kernels.
const ALL_FORMATS: [GgmlDType; 9] = [
    GgmlDType::Q4_0,
    GgmlDType::Q4_1,
    GgmlDType::Q5_0,
    GgmlDType::Q5_1,
    GgmlDType::Q8_0,
    GgmlDType::Q4K,
    GgmlDType::Q5K,
    GgmlDType::Q6K,
    GgmlDType::F16,
];
/// (out, in) pairs: single block, odd row counts, this model's 576 and 1536.
const SHAPES: [(usize, usize); 5] = [(1, 32), (7, 96), (37, 576), (130, 1536), (576, 576)];
/// Shapes for every format (rows a multiple of 256 values).
const K_SHAPES: [(usize, usize); 4] = [(1, 256), (9, 512), (37, 1536), (70, 768)];
/// Activation rows: every tile size (8, 4, 1) and their mixtures.
const ROWS: [usize; 7] = [1, 3, 4, 5, 9, 17, 21];

fn rows(t: &Tensor) -> Vec<Vec<f32>> {
    t.to_vec2::<f32>().unwrap()
}

#[test]
fn own_kernels_handle_their_formats_only() {
    for dtype in ALL_FORMATS {
        assert!(layer(dtype, 4, 256, 1).uses_own_kernels(), "{dtype:?}");
    }
    assert!(!layer(GgmlDType::Q3K, 4, 256, 1).uses_own_kernels());
    assert!(!layer(GgmlDType::F32, 4, 64, 1).uses_own_kernels());
}

/// The vector paths this CPU runs; our machines all have AVX2, so a CPU without it fails here
/// rather than leaving the vector code untested.
fn vector_paths() -> Vec<KernelPath> {
    let paths = KernelPath::available();
    assert!(paths.contains(&KernelPath::Avx2), "this test needs a CPU with AVX2/FMA/F16C");
    eprintln!("kernel paths on this CPU: {paths:?}");
    paths.into_iter().filter(|p| *p != KernelPath::Scalar).collect()
}

/// Every vector path against the scalar one, bit for bit.
fn assert_paths_identical(formats: &[GgmlDType], shapes: &[(usize, usize)], seed: u64) {
    for path in vector_paths() {
        for &dtype in formats {
            for &(n, k) in shapes {
                let l = layer(dtype, n, k, seed);
                for m in ROWS {
                    let x = input(m, k, seed + 2 + m as u64);
                    let simd = rows(&l.forward_on(&x, path).unwrap());
                    let scalar = rows(&l.forward_on(&x, KernelPath::Scalar).unwrap());
                    for (a, b) in simd.iter().flatten().zip(scalar.iter().flatten()) {
                        assert_eq!(
                            a.to_bits(),
                            b.to_bits(),
                            "{path:?} {dtype:?} n={n} k={k} m={m}: {a} vs {b}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn every_format_gives_identical_bits_on_every_path() {
    assert_paths_identical(&ALL_FORMATS, &K_SHAPES, 17);
}

/// The activations each format's kernel reads, dequantized: 8-bit per 32 or per 256 values, or
/// f16-rounded.
fn activations_as_read(dtype: GgmlDType, x: &[f32]) -> Vec<f64> {
    match dtype {
        GgmlDType::Q4K | GgmlDType::Q5K | GgmlDType::Q6K => {
            let mut acts = vec![kquant::ActBlockK::ZERO; x.len() / kquant::QK_K];
            kquant::quantize_row_k(x, &mut acts);
            acts.iter().flat_map(|a| a.qs.map(|q| a.d as f64 * q as f64)).collect()
        }
        GgmlDType::F16 => x.iter().map(|&v| half::f16::from_f32(v).to_f64()).collect(),
        _ => {
            let mut acts = vec![ActBlock::ZERO; x.len() / QK];
            quant::quantize_row(x, &mut acts);
            acts.iter().flat_map(|a| a.qs.map(|q| a.d as f64 * q as f64)).collect()
        }
    }
}

/// Every format against the plain sum of candle's dequantized weights times the activations as
/// the kernel reads them, in f64: only f32 rounding separates them, so a wrong bit or scale
/// anywhere in a block would show.
#[test]
fn every_format_equals_its_dequantized_reference() {
    for dtype in ALL_FORMATS {
        for (n, k) in K_SHAPES {
            let l = layer(dtype, n, k, 23);
            let w = rows(&l.weight().unwrap().dequantize(&Device::Cpu).unwrap());
            for m in [1, 9] {
                let xs = pseudo_random(m * k, 29);
                let ours =
                    rows(&l.forward(&Tensor::from_vec(xs.clone(), (m, k), &Device::Cpu).unwrap()).unwrap());
                for (i, x) in xs.chunks(k).enumerate() {
                    let a = activations_as_read(dtype, x);
                    for j in 0..n {
                        let mut want: f64 = w[j].iter().zip(&a).map(|(&w, &a)| w as f64 * a).sum();
                        // Q4_1/Q5_1 read their minimum's share through the activation block's
                        // f16-rounded sum `s`, as llama.cpp does: swap the exact share for it.
                        if let Some(bb) = match dtype {
                            GgmlDType::Q4_1 => Some(20),
                            GgmlDType::Q5_1 => Some(24),
                            _ => None,
                        } {
                            let weight = l.weight().unwrap();
                            let data = weight.data().unwrap();
                            let mut acts = vec![ActBlock::ZERO; k / QK];
                            quant::quantize_row(x, &mut acts);
                            for (b, act) in acts.iter().enumerate() {
                                let min = quant::read_f16(&data[(j * k / QK + b) * bb..], 2) as f64;
                                let exact: f64 = a[b * QK..][..QK].iter().sum();
                                want += min * (act.s as f64 - exact);
                            }
                        }
                        let magnitude: f64 = w[j].iter().zip(&a).map(|(&w, &a)| (w as f64 * a).abs()).sum();
                        let got = ours[i][j] as f64;
                        assert!(
                            (got - want).abs() <= 2e-6 * magnitude + 1e-6,
                            "{dtype:?} n={n} k={k} [{i},{j}]: {got} vs {want} (magnitude {magnitude})"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn block_formats_give_identical_bits_on_every_path_and_shape() {
    assert_paths_identical(&FORMATS, &SHAPES, 7);
}

/// The integer block sums of our kernels, recomputed the plain way in f64: differs from the
/// kernels' f32 arithmetic only by f32 rounding.
/// Returns the dot product and the sum of its terms' magnitudes (what f32 rounding scales with).
fn reference_dot(format: WeightFormat, w: &[u8], y: &[ActBlock]) -> (f64, f64) {
    let bb = format.block_bytes();
    let deq = quant::dequantize_row(format, w);
    let mut total = 0f64;
    let mut magnitude = 0f64;
    for (b, (blk, a)) in w.chunks_exact(bb).zip(y).enumerate() {
        let d = quant::read_f16(blk, 0) as f64;
        let min = match format {
            WeightFormat::Q4_1 | WeightFormat::Q5_1 => quant::read_f16(blk, 2) as f64,
            WeightFormat::Q4_0 | WeightFormat::Q5_0 | WeightFormat::Q8_0 => 0.0,
        };
        // Recover the (signed) integer quants from the dequantized values.
        let isum: f64 = (0..QK)
            .map(|j| {
                let q = if d == 0.0 { 0.0 } else { ((deq[b * QK + j] as f64 - min) / d).round() };
                q * a.qs[j] as f64
            })
            .sum();
        total += d * a.d as f64 * isum + min * a.s as f64;
        magnitude += (d * a.d as f64 * isum).abs() + (min * a.s as f64).abs();
    }
    (total, magnitude)
}

#[test]
fn kernels_equal_a_plain_integer_reference() {
    for dtype in FORMATS {
        let format = match dtype {
            GgmlDType::Q4_0 => WeightFormat::Q4_0,
            GgmlDType::Q4_1 => WeightFormat::Q4_1,
            _ => WeightFormat::Q8_0,
        };
        for (n, k) in SHAPES {
            let l = layer(dtype, n, k, 3);
            let weight = l.weight().unwrap();
            let data = weight.data().unwrap();
            let row_bytes = k / QK * format.block_bytes();
            for m in [1, 5] {
                let xs = pseudo_random(m * k, 5);
                let x = Tensor::from_vec(xs.clone(), (m, k), &Device::Cpu).unwrap();
                let ours = rows(&l.forward(&x).unwrap());
                for (i, row) in xs.chunks(k).enumerate() {
                    let mut acts = vec![ActBlock::ZERO; k / QK];
                    quant::quantize_row(row, &mut acts);
                    for j in 0..n {
                        let (want, magnitude) =
                            reference_dot(format, &data[j * row_bytes..][..row_bytes], &acts);
                        let got = ours[i][j] as f64;
                        assert!(
                            (got - want).abs() <= 1e-6 * magnitude,
                            "{dtype:?} n={n} k={k} [{i},{j}]: {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn kernels_agree_with_dequantized_f32_matmul() {
    for dtype in FORMATS {
        for (n, k) in SHAPES {
            let l = layer(dtype, n, k, 9);
            let wf = l.weight().unwrap().dequantize(&Device::Cpu).unwrap();
            let w_rows = rows(&wf);
            for m in ROWS {
                let x = input(m, k, 13);
                let ours = rows(&l.forward(&x).unwrap());
                let exact = rows(&x.matmul(&wf.t().unwrap()).unwrap());
                // candle's Q4_1 kernel asserts an even block count; ours has no such limit.
                let candle = (k / QK).is_multiple_of(2).then(|| rows(&l.forward_candle(&x).unwrap()));
                for (i, x_row) in rows(&x).iter().enumerate() {
                    // Only the activations' 8-bit quantization separates us from the exact
                    // product: each value is off by at most half a step d (plus d's own f16
                    // rounding, 2^-11 relative, times up to 127 steps).
                    let mut acts = vec![ActBlock::ZERO; k / QK];
                    quant::quantize_row(x_row, &mut acts);
                    for j in 0..n {
                        let bound: f32 = acts
                            .iter()
                            .zip(w_rows[j].chunks(QK))
                            .map(|(a, w)| a.d * 0.57 * w.iter().map(|v| v.abs()).sum::<f32>())
                            .sum::<f32>()
                            + 1e-4;
                        let (o, e) = (ours[i][j], exact[i][j]);
                        let at = format!("{dtype:?} n={n} k={k} m={m} [{i},{j}]");
                        assert!((o - e).abs() <= bound, "{at}: {o} vs exact {e} (bound {bound})");
                        if let Some(candle) = &candle {
                            let c = candle[i][j];
                            assert!((o - c).abs() <= 2.0 * bound, "{at}: {o} vs candle {c}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn batched_inputs_keep_their_leading_dimensions() {
    let l = layer(GgmlDType::Q4_1, 40, 64, 2);
    let x = Tensor::from_vec(pseudo_random(2 * 3 * 64, 4), (2, 3, 64), &Device::Cpu).unwrap();
    let y = l.forward(&x).unwrap();
    assert_eq!(y.dims(), &[2, 3, 40]);
    let flat = l.forward(&x.reshape((6, 64)).unwrap()).unwrap();
    assert_eq!(
        y.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        flat.flatten_all().unwrap().to_vec1::<f32>().unwrap()
    );
}

#[test]
fn a_mismatched_input_width_is_an_error() {
    let l = layer(GgmlDType::Q4_1, 8, 64, 2);
    let err = l.forward(&input(2, 32, 1)).unwrap_err().to_string();
    assert!(err.contains("64"), "{err}");
}

#[test]
fn other_formats_fall_back_to_candle() {
    let l = layer(GgmlDType::Q3K, 8, 256, 2);
    let x = input(3, 256, 1);
    assert_eq!(rows(&l.forward(&x).unwrap()), rows(&l.forward_candle(&x).unwrap()));
}

#[test]
fn activation_quantization_is_the_same_on_both_paths() {
    vector_paths();
    let mut xs = pseudo_random(32 * 40, 21);
    // Ties (x·id exactly n + 0.5), zeros, a whole zero block, negative extremes.
    xs[0] = 127.0;
    xs[1] = 0.5;
    xs[2] = 1.5;
    xs[3] = -2.5;
    xs[64..96].iter_mut().for_each(|v| *v = 0.0);
    xs[100] = -1e6;
    let mut scalar = vec![ActBlock::ZERO; 40];
    let mut simd = vec![ActBlock::ZERO; 40];
    quant::quantize_row(&xs, &mut scalar);
    unsafe { x86::quantize_row(&xs, &mut simd) };
    assert_eq!(scalar, simd);
    assert_eq!(&scalar[0].qs[..4], &[127, 0, 2, -2]);
    // The K-quants' activations: per 256 values, the first value of largest magnitude sets the
    // scale's sign (a later equal magnitude of the other sign must not).
    xs[300] = 50.0;
    xs[301] = -50.0;
    xs[600] = -70.0;
    xs[700] = 70.0;
    let mut scalar = vec![kquant::ActBlockK::ZERO; 5];
    let mut simd = vec![kquant::ActBlockK::ZERO; 5];
    kquant::quantize_row_k(&xs, &mut scalar);
    unsafe { x86_k::quantize_row_k(&xs, &mut simd) };
    assert_eq!(scalar, simd);
    assert_eq!((scalar[1].qs[300 - 256], scalar[2].qs[600 - 512]), (-127, -127));
}
