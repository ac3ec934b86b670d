//! Sampling as a value: how the next token is chosen from logits.

use serde::{Deserialize, Serialize};

/// How tokens are chosen. `temperature == 0` is greedy (argmax, ties to the lowest id).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    pub temperature: f64,
    pub top_k: Option<usize>,
    pub top_p: Option<f64>,
    pub seed: u64,
}

impl Sampling {
    pub const GREEDY: Sampling = Sampling { temperature: 0.0, top_k: None, top_p: None, seed: 0 };

    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0
    }
}

impl Default for Sampling {
    fn default() -> Self {
        Self::GREEDY
    }
}
