//! Bad model files and chat-template failures: each a clear error naming the file and what is
//! wrong, never a panic.

use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use repairbench::model::chat::ChatTemplate;
use repairbench::model::{source, ChatMessage, Engine, LanguageModel, ModelError, DEFAULT_MODEL};

fn default_model_path() -> PathBuf {
    source::resolve(DEFAULT_MODEL).expect("default model resolves").path
}

fn load_err(path: &Path) -> ModelError {
    match Engine::from_path(path, "test") {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e) => e,
    }
}

fn write_gguf(path: &Path, metadata: &[(&str, Value)], tensors: &[(&str, QTensor)]) {
    let mut file = std::fs::File::create(path).unwrap();
    let meta: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let tens: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (*k, v)).collect();
    gguf_file::write(&mut file, &meta, &tens).unwrap();
}

#[test]
fn missing_file_names_the_path() {
    let err = Engine::load("/nonexistent/dir/model.gguf").err().expect("missing file fails");
    let chain =
        format!("{err} / {}", std::error::Error::source(&err).map(|s| s.to_string()).unwrap_or_default());
    assert!(chain.contains("/nonexistent/dir/model.gguf"), "{chain}");
}

#[test]
fn non_gguf_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.gguf");
    std::fs::write(&path, "just some text, not a model").unwrap();
    let err = load_err(&path);
    assert!(matches!(err, ModelError::NotGguf { .. }), "{err}");
    assert!(err.to_string().contains("notes.gguf"), "{err}");
}

#[test]
fn truncated_files_are_named_with_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(default_model_path()).unwrap();
    let cut_data = dir.path().join("cut-data.gguf");
    std::fs::write(&cut_data, &bytes[..bytes.len() - 4096]).unwrap();
    let err = load_err(&cut_data);
    assert!(matches!(err, ModelError::Truncated { .. }), "{err}");
    assert!(err.to_string().contains("cut-data.gguf") && err.to_string().contains("truncated"), "{err}");

    let cut_header = dir.path().join("cut-header.gguf");
    std::fs::write(&cut_header, &bytes[..100_000]).unwrap();
    let err = load_err(&cut_header);
    assert!(err.to_string().contains("cut-header.gguf") && err.to_string().contains("truncated"), "{err}");
}

#[test]
fn unknown_architecture_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gptx.gguf");
    let weight = QTensor::quantize(
        &Tensor::zeros((4, 32), candle_core::DType::F32, &Device::Cpu).unwrap(),
        GgmlDType::F32,
    )
    .unwrap();
    write_gguf(
        &path,
        &[("general.architecture", Value::String("gptx".into()))],
        &[("token_embd.weight", weight)],
    );
    let err = load_err(&path);
    assert!(matches!(err, ModelError::UnsupportedArchitecture { .. }), "{err}");
    assert!(err.to_string().contains("`gptx`") && err.to_string().contains("gptx.gguf"), "{err}");
}

#[test]
fn unsupported_quantization_names_the_tensor_and_type() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q2k.gguf");
    let values = Tensor::randn(0f32, 1.0, (2, 256), &Device::Cpu).unwrap();
    let weight = QTensor::quantize(&values, GgmlDType::Q2K).unwrap();
    write_gguf(
        &path,
        &[("general.architecture", Value::String("llama".into()))],
        &[("blk.0.ffn_up.weight", weight)],
    );
    let err = load_err(&path);
    assert!(matches!(err, ModelError::UnsupportedQuantization { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("blk.0.ffn_up.weight") && msg.contains("Q2_K"), "{msg}");
}

#[test]
fn chat_without_template_is_a_clear_error() {
    // The real model rewritten without its `tokenizer.chat_template`.
    let source_path = default_model_path();
    let mut reader = std::fs::File::open(&source_path).unwrap();
    let content = gguf_file::Content::read(&mut reader).unwrap();
    let metadata: Vec<(&str, Value)> = content
        .metadata
        .iter()
        .filter(|(k, _)| k.as_str() != "tokenizer.chat_template")
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let tensors: Vec<(&str, QTensor)> =
        names.iter().map(|n| (n.as_str(), content.tensor(&mut reader, n, &Device::Cpu).unwrap())).collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-template.gguf");
    write_gguf(&path, &metadata, &tensors);

    let engine = Engine::from_path(&path, "test").unwrap();
    assert!(engine.info().chat_template.is_none());
    let request = repairbench::model::GenerateRequest {
        prompt: repairbench::model::Prompt::Chat(vec![ChatMessage::new("user", "hi")]),
        max_tokens: 1,
        sampling: repairbench::model::Sampling::GREEDY,
        stop: vec![],
        n: 1,
    };
    let err = engine.generate_text(&request).unwrap_err();
    assert!(matches!(err, ModelError::NoChatTemplate { .. }), "{err}");
    assert!(
        err.to_string().contains("no-template.gguf") && err.to_string().contains("chat template"),
        "{err}"
    );
}

#[test]
fn chat_templates_render_with_special_tokens_and_raise_exception() {
    let template = "{{ bos_token }}{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('tool role unsupported') }}{% endif %}[{{ m.role | upper }}] {{ m.content.strip() }}\n{% endfor %}{% if add_generation_prompt %}[ASSISTANT]{% endif %}";
    let chat = ChatTemplate::new(template, "m.gguf".into(), Some("<s>"), Some("</s>")).unwrap();
    let text =
        chat.render(&[ChatMessage::new("system", " be brief "), ChatMessage::new("user", "hi")]).unwrap();
    assert_eq!(text, "<s>[SYSTEM] be brief\n[USER] hi\n[ASSISTANT]");
    let err = chat.render(&[ChatMessage::new("tool", "x")]).unwrap_err();
    let chain = format!("{err}: {}", std::error::Error::source(&err).unwrap());
    assert!(chain.contains("tool role unsupported") && chain.contains("m.gguf"), "{chain}");
}
