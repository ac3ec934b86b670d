//! Matrix multiplication against quantized weights.
//!
//! [`QLinear`] is the one entry point the model forward uses for weight matmuls; how it computes
//! (candle's kernels or our own SIMD ones, chosen at run time from the CPU's features) is this
//! module's business. AMX is never used: it traps in the virtual machines we run on.

use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{Module, Result, Tensor};

/// A linear layer `y = x · Wᵀ` whose weight `W` (`[out, in]`) stays quantized.
#[derive(Debug, Clone)]
pub struct QLinear {
    inner: QMatMul,
    out_features: usize,
    in_features: usize,
}

impl QLinear {
    pub fn new(weight: std::sync::Arc<QTensor>) -> Result<Self> {
        let (out_features, in_features) = weight.shape().dims2()?;
        Ok(Self { inner: QMatMul::from_arc(weight)?, out_features, in_features })
    }

    pub fn out_features(&self) -> usize {
        self.out_features
    }

    pub fn in_features(&self) -> usize {
        self.in_features
    }

    /// `x`: `[..., in]` f32; returns `[..., out]` f32.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.inner.forward(x)
    }
}
