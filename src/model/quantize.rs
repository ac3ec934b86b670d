//! Re-quantizing a GGUF model into another block type, so that two quantizations of one model
//! can be evaluated on the same items and compared (`repairbench compare`). Every quantized
//! matrix is dequantized and quantized again into the target type; vectors (norms) and tensors
//! whose rows do not fit the target's blocks are kept as they are. Starting from an already
//! quantized file, the result carries both roundings: it measures the target type's loss on
//! top of the source's, which is what a team deciding between the two files gets.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::Path;

use candle_core::quantized::gguf_file::{self, Content, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Device;

use super::error::{candle_reason, ModelError, Result};
use super::gguf::{dtype_name, SUPPORTED_DTYPES};

/// What [`requantize`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requantized {
    pub converted: usize,
    pub kept: usize,
}

/// The target type named `text` (`q8_0`, `q4_k`, `f16`...), one our forward pass supports.
pub fn parse_dtype(text: &str) -> std::result::Result<GgmlDType, String> {
    let wanted =
        text.trim().to_ascii_uppercase().replace("Q4K", "Q4_K").replace("Q5K", "Q5_K").replace("Q6K", "Q6_K");
    SUPPORTED_DTYPES.iter().copied().find(|d| dtype_name(*d) == wanted && *d != GgmlDType::F32).ok_or_else(
        || {
            let names: Vec<String> = SUPPORTED_DTYPES
                .iter()
                .filter(|d| **d != GgmlDType::F32)
                .map(|d| dtype_name(*d).to_lowercase())
                .collect();
            format!("`{text}` is not a quantization repairbench runs; one of {}", names.join(", "))
        },
    )
}

/// llama.cpp's `general.file_type` for a model mostly of `dtype`.
fn file_type(dtype: GgmlDType) -> Option<u32> {
    Some(match dtype {
        GgmlDType::F16 => 1,
        GgmlDType::Q4_0 => 2,
        GgmlDType::Q4_1 => 3,
        GgmlDType::Q8_0 => 7,
        GgmlDType::Q5_0 => 8,
        GgmlDType::Q5_1 => 9,
        GgmlDType::Q4K => 15,
        GgmlDType::Q5K => 17,
        GgmlDType::Q6K => 18,
        _ => return None,
    })
}

/// Writes `input` re-quantized to `to` into `output`.
pub fn requantize(input: &Path, output: &Path, to: GgmlDType) -> Result<Requantized> {
    let open =
        |path: &Path| File::open(path).map_err(|source| ModelError::Open { path: path.to_owned(), source });
    let mut reader = BufReader::new(open(input)?);
    let not_gguf =
        |e: candle_core::Error| ModelError::NotGguf { path: input.to_owned(), reason: candle_reason(&e) };
    let content = Content::read(&mut reader).map_err(not_gguf)?;
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let mut tensors: Vec<(String, QTensor)> = Vec::with_capacity(names.len());
    let mut summary = Requantized { converted: 0, kept: 0 };
    for name in names {
        let tensor = content.tensor(&mut reader, name, &Device::Cpu).map_err(not_gguf)?;
        let dims = tensor.shape().dims().to_vec();
        let is_matrix = dims.len() == 2;
        let fits = dims.last().is_some_and(|row| row % to.block_size() == 0);
        let quantized = !matches!(tensor.dtype(), GgmlDType::F32 | GgmlDType::F16);
        let tensor = if is_matrix && fits && quantized && tensor.dtype() != to {
            let values = tensor.dequantize(&Device::Cpu).map_err(not_gguf)?;
            summary.converted += 1;
            QTensor::quantize(&values, to).map_err(not_gguf)?
        } else {
            summary.kept += 1;
            tensor
        };
        tensors.push((name.clone(), tensor));
    }
    let mut metadata: Vec<(String, Value)> = content
        .metadata
        .iter()
        .filter(|(k, _)| k.as_str() != "general.file_type")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some(kind) = file_type(to) {
        metadata.push(("general.file_type".into(), Value::U32(kind)));
    }
    metadata.sort_by(|a, b| a.0.cmp(&b.0));
    let write_err = |source: std::io::Error| ModelError::Open { path: output.to_owned(), source };
    let mut writer = BufWriter::new(File::create(output).map_err(write_err)?);
    let metadata_refs: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, t)| (k.as_str(), t)).collect();
    gguf_file::write(&mut writer, &metadata_refs, &tensor_refs)
        .map_err(|e| ModelError::NotGguf { path: output.to_owned(), reason: candle_reason(&e) })?;
    writer.into_inner().map_err(|e| write_err(e.into_error()))?.sync_all().map_err(write_err)?;
    Ok(summary)
}
