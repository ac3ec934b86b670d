//! Reading a GGUF file: its metadata, the model configuration it describes, and its tensors.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Device;

use super::error::{candle_reason, ModelError, Result};

/// The model families the forward pass implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    /// Llama 2/3, CodeLlama, Mistral, SmolLM2: no attention biases, interleaved RoPE
    /// (the GGUF converter permutes Q/K rows for it).
    Llama,
    /// Qwen2 / Qwen2.5 (-Coder): Q/K/V biases, NEOX-style RoPE (rotate halves).
    Qwen2,
}

/// How RoPE pairs the dimensions of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Pairs (2i, 2i+1): llama.cpp's "normal" mode.
    Interleaved,
    /// Pairs (i, i + d/2): llama.cpp's NEOX mode.
    Neox,
}

/// Hyper-parameters read from the GGUF metadata.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    pub architecture: Architecture,
    pub architecture_name: String,
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub n_ff: usize,
    pub rms_eps: f64,
    pub rope_base: f64,
    pub rope_style: RopeStyle,
    /// Linear RoPE scaling: positions are divided by this factor.
    pub rope_linear_scale: f64,
    pub context_length: usize,
    pub vocab_size: usize,
}

/// An opened GGUF file: its parsed header and a reader positioned anywhere.
pub struct GgufFile {
    pub path: PathBuf,
    pub content: Content,
    reader: BufReader<File>,
    pub file_size: u64,
}

/// The tensor types the forward pass runs.
pub const SUPPORTED_DTYPES: [GgmlDType; 10] = [
    GgmlDType::Q4_0,
    GgmlDType::Q4_1,
    GgmlDType::Q5_0,
    GgmlDType::Q5_1,
    GgmlDType::Q8_0,
    GgmlDType::Q4K,
    GgmlDType::Q5K,
    GgmlDType::Q6K,
    GgmlDType::F16,
    GgmlDType::F32,
];

/// The name llama.cpp uses for a tensor type.
pub fn dtype_name(dtype: GgmlDType) -> &'static str {
    match dtype {
        GgmlDType::F32 => "F32",
        GgmlDType::F16 => "F16",
        GgmlDType::BF16 => "BF16",
        GgmlDType::Q4_0 => "Q4_0",
        GgmlDType::Q4_1 => "Q4_1",
        GgmlDType::Q5_0 => "Q5_0",
        GgmlDType::Q5_1 => "Q5_1",
        GgmlDType::Q8_0 => "Q8_0",
        GgmlDType::Q8_1 => "Q8_1",
        GgmlDType::Q2K => "Q2_K",
        GgmlDType::Q3K => "Q3_K",
        GgmlDType::Q4K => "Q4_K",
        GgmlDType::Q5K => "Q5_K",
        GgmlDType::Q6K => "Q6_K",
        GgmlDType::Q8K => "Q8_K",
    }
}

impl GgufFile {
    /// Opens and validates the header: every tensor's bytes must lie inside the file and have a
    /// supported type.
    pub fn open(path: &Path) -> Result<Self> {
        let open_err = |source| ModelError::Open { path: path.to_path_buf(), source };
        let file = File::open(path).map_err(open_err)?;
        let file_size = file.metadata().map_err(open_err)?.len();
        let mut reader = BufReader::new(file);
        let content = Content::read(&mut reader)
            .map_err(|e| ModelError::NotGguf { path: path.to_path_buf(), reason: candle_reason(&e) })?;
        let mut names: Vec<&String> = content.tensor_infos.keys().collect();
        names.sort();
        for name in names {
            let info = &content.tensor_infos[name];
            if !SUPPORTED_DTYPES.contains(&info.ggml_dtype) {
                return Err(ModelError::UnsupportedQuantization {
                    path: path.to_path_buf(),
                    tensor: name.clone(),
                    dtype: dtype_name(info.ggml_dtype).to_string(),
                });
            }
            let bytes =
                (info.shape.elem_count() / info.ggml_dtype.block_size() * info.ggml_dtype.type_size()) as u64;
            let end = content.tensor_data_offset + info.offset + bytes;
            if end > file_size {
                return Err(ModelError::Truncated {
                    path: path.to_path_buf(),
                    tensor: name.clone(),
                    needed: end,
                    actual: file_size,
                });
            }
        }
        Ok(Self { path: path.to_path_buf(), content, reader, file_size })
    }

    pub fn metadata(&self) -> &HashMap<String, Value> {
        &self.content.metadata
    }

    fn meta_err(&self, key: &str, expected: &'static str) -> ModelError {
        ModelError::Metadata { path: self.path.clone(), key: key.to_string(), expected }
    }

    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.metadata().get(key).and_then(|v| v.to_string().ok()).map(|s| s.as_str())
    }

    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.metadata().get(key).and_then(|v| match v {
            Value::U8(x) => Some(*x as u64),
            Value::U16(x) => Some(*x as u64),
            Value::U32(x) => Some(*x as u64),
            Value::U64(x) => Some(*x),
            Value::I8(x) => u64::try_from(*x).ok(),
            Value::I16(x) => u64::try_from(*x).ok(),
            Value::I32(x) => u64::try_from(*x).ok(),
            Value::I64(x) => u64::try_from(*x).ok(),
            _ => None,
        })
    }

    pub fn get_f64(&self, key: &str) -> Option<f64> {
        self.metadata().get(key).and_then(|v| match v {
            Value::F32(x) => Some(*x as f64),
            Value::F64(x) => Some(*x),
            _ => None,
        })
    }

    pub fn get_bool(&self, key: &str) -> Option<bool> {
        self.metadata().get(key).and_then(|v| v.to_bool().ok())
    }

    pub fn require_u64(&self, key: &str) -> Result<u64> {
        self.get_u64(key).ok_or_else(|| self.meta_err(key, "an unsigned integer"))
    }

    /// A string array from the metadata.
    pub fn get_str_array(&self, key: &str) -> Result<Vec<String>> {
        let values = self
            .metadata()
            .get(key)
            .and_then(|v| v.to_vec().ok())
            .ok_or_else(|| self.meta_err(key, "an array"))?;
        values
            .iter()
            .map(|v| v.to_string().cloned().map_err(|_| self.meta_err(key, "an array of strings")))
            .collect()
    }

    pub fn get_f32_array(&self, key: &str) -> Result<Vec<f32>> {
        let values = self
            .metadata()
            .get(key)
            .and_then(|v| v.to_vec().ok())
            .ok_or_else(|| self.meta_err(key, "an array"))?;
        values.iter().map(|v| v.to_f32().map_err(|_| self.meta_err(key, "an array of f32"))).collect()
    }

    pub fn get_i32_array(&self, key: &str) -> Result<Vec<i32>> {
        let values = self
            .metadata()
            .get(key)
            .and_then(|v| v.to_vec().ok())
            .ok_or_else(|| self.meta_err(key, "an array"))?;
        values.iter().map(|v| v.to_i32().map_err(|_| self.meta_err(key, "an array of i32"))).collect()
    }

    pub fn architecture_name(&self) -> Result<String> {
        self.get_str("general.architecture")
            .map(str::to_string)
            .ok_or_else(|| self.meta_err("general.architecture", "a string"))
    }

    /// The model configuration, or an error naming the unsupported architecture or missing key.
    pub fn config(&self) -> Result<ModelConfig> {
        let name = self.architecture_name()?;
        let (architecture, rope_style) = match name.as_str() {
            "llama" | "mistral" => (Architecture::Llama, RopeStyle::Interleaved),
            "qwen2" => (Architecture::Qwen2, RopeStyle::Neox),
            _ => {
                return Err(ModelError::UnsupportedArchitecture {
                    path: self.path.clone(),
                    architecture: name,
                });
            }
        };
        let key = |k: &str| format!("{name}.{k}");
        let n_embd = self.require_u64(&key("embedding_length"))? as usize;
        let n_head = self.require_u64(&key("attention.head_count"))? as usize;
        let n_head_kv = self.get_u64(&key("attention.head_count_kv")).map_or(n_head, |v| v as usize);
        let n_layer = self.require_u64(&key("block_count"))? as usize;
        let n_ff = self.require_u64(&key("feed_forward_length"))? as usize;
        if n_head == 0 || n_head_kv == 0 || !n_head.is_multiple_of(n_head_kv) {
            return Err(ModelError::Unsupported {
                path: self.path.clone(),
                what: format!("{n_head} attention heads cannot be grouped over {n_head_kv} key/value heads"),
            });
        }
        let head_dim = self.get_u64(&key("attention.key_length")).map_or(n_embd / n_head, |v| v as usize);
        let rope_dims = self.get_u64(&key("rope.dimension_count")).map_or(head_dim, |v| v as usize);
        if rope_dims != head_dim || !head_dim.is_multiple_of(2) {
            return Err(ModelError::Unsupported {
                path: self.path.clone(),
                what: format!("partial RoPE ({rope_dims} of {head_dim} head dimensions) is not supported"),
            });
        }
        let rms_eps = self
            .get_f64(&key("attention.layer_norm_rms_epsilon"))
            .ok_or_else(|| self.meta_err(&key("attention.layer_norm_rms_epsilon"), "a float"))?;
        let rope_base = self.get_f64(&key("rope.freq_base")).unwrap_or(10_000.0);
        let rope_linear_scale = match self.get_str(&key("rope.scaling.type")) {
            None | Some("none") => 1.0,
            Some("linear") => self.get_f64(&key("rope.scaling.factor")).unwrap_or(1.0),
            Some(other) => {
                return Err(ModelError::Unsupported {
                    path: self.path.clone(),
                    what: format!("RoPE scaling `{other}` ({}) is not supported", key("rope.scaling.type")),
                })
            }
        };
        let context_length = self.require_u64(&key("context_length"))? as usize;
        // A sliding attention window (Mistral's) narrower than the context changes every
        // position past it; our attention always sees the whole context, so such a model is
        // refused rather than scored wrongly.
        if let Some(window) = self.get_u64(&key("attention.sliding_window")) {
            if (window as usize) < context_length {
                return Err(ModelError::Unsupported {
                    path: self.path.clone(),
                    what: format!(
                        "a sliding attention window of {window} positions ({}) is not supported",
                        key("attention.sliding_window")
                    ),
                });
            }
        }
        let vocab_size = match self.content.tensor_infos.get("token_embd.weight") {
            Some(info) => info.shape.dims()[0],
            None => {
                return Err(ModelError::MissingTensor {
                    path: self.path.clone(),
                    tensor: "token_embd.weight".into(),
                })
            }
        };
        Ok(ModelConfig {
            architecture,
            architecture_name: name,
            n_layer,
            n_embd,
            n_head,
            n_head_kv,
            head_dim,
            n_ff,
            rms_eps,
            rope_base,
            rope_style,
            rope_linear_scale,
            context_length,
            vocab_size,
        })
    }

    pub fn has_tensor(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }

    /// Reads one tensor and checks its (GGUF-order, i.e. `[rows, cols]`) shape.
    pub fn tensor(&mut self, name: &str, expected: &[usize]) -> Result<Arc<QTensor>> {
        let Some(info) = self.content.tensor_infos.get(name) else {
            return Err(ModelError::MissingTensor { path: self.path.clone(), tensor: name.to_string() });
        };
        if info.shape.dims() != expected {
            return Err(ModelError::TensorShape {
                path: self.path.clone(),
                tensor: name.to_string(),
                actual: info.shape.dims().to_vec(),
                expected: expected.to_vec(),
            });
        }
        let tensor = self
            .content
            .tensor(&mut self.reader, name, &Device::Cpu)
            .map_err(|e| ModelError::NotGguf { path: self.path.clone(), reason: candle_reason(&e) })?;
        Ok(Arc::new(tensor))
    }

    /// Total parameters, counted from tensor shapes.
    pub fn parameter_count(&self) -> u64 {
        self.content.tensor_infos.values().map(|t| t.shape.elem_count() as u64).sum()
    }

    /// The type holding the most weight elements among 2-D tensors.
    pub fn dominant_quantization(&self) -> String {
        let mut counts: HashMap<&'static str, u64> = HashMap::new();
        for info in self.content.tensor_infos.values() {
            if info.shape.rank() >= 2 {
                *counts.entry(dtype_name(info.ggml_dtype)).or_default() += info.shape.elem_count() as u64;
            }
        }
        let mut counts: Vec<_> = counts.into_iter().collect();
        counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        counts.first().map_or_else(|| "none".to_string(), |(name, _)| name.to_string())
    }
}
