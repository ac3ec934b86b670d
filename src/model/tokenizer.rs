//! The model's tokenizer, built from GGUF metadata (or a `tokenizer.json` beside the model).
//!
//! Two vocabulary kinds are supported, as llama.cpp names them in `tokenizer.ggml.model`:
//! - `gpt2`: byte-level BPE from `tokens` + `merges`, with the pre-tokenizer chosen from
//!   `tokenizer.ggml.pre` (the split rules differ per model family and decide round trips);
//! - `llama`: SentencePiece-style BPE from `tokens` + `scores`, with `▁` for spaces and
//!   `<0xNN>` byte-fallback tokens. Merges are derived from the scores: a merge producing a
//!   higher-scored piece applies first, which is how SentencePiece's BPE picks pairs.
//!
//! Control and user-defined tokens (types 3 and 4) are registered as special tokens, so text
//! such as `<|im_start|>` encodes to its single id, as llama.cpp does with special parsing on.

use std::path::Path;

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence, NFC};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence as PreSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{
    AddedToken, DecoderWrapper, NormalizerWrapper, PreTokenizerWrapper, SplitDelimiterBehavior, Tokenizer,
};

use super::error::{ModelError, Result};
use super::gguf::GgufFile;

/// Qwen2's split rule: contractions, letters with one leading non-letter, single digits,
/// punctuation runs, newlines, spaces.
const SPLIT_QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Llama 3's split rule: like Qwen2's but digits in groups of up to three.
const SPLIT_LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

const TOKEN_TYPE_CONTROL: i32 = 3;
const TOKEN_TYPE_USER_DEFINED: i32 = 4;
const TOKEN_TYPE_NORMAL: i32 = 1;

/// Encodes and decodes text; knows the model's BOS/EOS tokens and whether BOS is prepended.
pub struct TextTokenizer {
    inner: Tokenizer,
    pub bos_id: Option<u32>,
    pub eos_id: Option<u32>,
    /// Token ids that end generation (EOS and, when present, end-of-turn).
    pub stop_ids: Vec<u32>,
    pub add_bos: bool,
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    vocab_size: usize,
}

fn tok_err(path: &Path, what: impl Into<String>) -> ModelError {
    ModelError::Tokenizer { path: path.to_path_buf(), what: what.into() }
}

impl TextTokenizer {
    /// Builds the tokenizer for the GGUF at `file.path`: from `tokenizer.json` in the same folder
    /// when there is one, else from the GGUF metadata.
    pub fn load(file: &GgufFile) -> Result<Self> {
        let path = &file.path;
        let tokens = file.get_str_array("tokenizer.ggml.tokens")?;
        let types = file
            .get_i32_array("tokenizer.ggml.token_type")
            .unwrap_or_else(|_| vec![TOKEN_TYPE_NORMAL; tokens.len()]);
        if types.len() != tokens.len() {
            return Err(tok_err(path, format!("{} token types for {} tokens", types.len(), tokens.len())));
        }
        let beside = path.parent().map(|p| p.join("tokenizer.json"));
        let inner = match beside.filter(|p| p.is_file()) {
            Some(json) => {
                tracing::info!(path = %json.display(), "using tokenizer.json beside the model");
                Tokenizer::from_file(&json).map_err(|e| tok_err(&json, e.to_string()))?
            }
            None => {
                let model = file.get_str("tokenizer.ggml.model").unwrap_or("");
                let mut tokenizer = match model {
                    "gpt2" => gpt2_tokenizer(file, &tokens)?,
                    "llama" => sentencepiece_tokenizer(file, &tokens, &types)?,
                    other => {
                        return Err(tok_err(
                            path,
                            format!("tokenizer.ggml.model `{other}` is not supported (expected gpt2 or llama); put a tokenizer.json beside the model"),
                        ))
                    }
                };
                let specials: Vec<AddedToken> = tokens
                    .iter()
                    .zip(&types)
                    .filter(|(_, &ty)| ty == TOKEN_TYPE_CONTROL || ty == TOKEN_TYPE_USER_DEFINED)
                    .map(|(tok, _)| AddedToken::from(tok.clone(), true))
                    .collect();
                tokenizer.add_special_tokens(specials).map_err(|e| tok_err(path, e.to_string()))?;
                tokenizer
            }
        };
        let id = |key: &str| file.get_u64(key).map(|v| v as u32).filter(|&v| (v as usize) < tokens.len());
        let bos_id = id("tokenizer.ggml.bos_token_id");
        let eos_id = id("tokenizer.ggml.eos_token_id");
        let mut stop_ids: Vec<u32> = eos_id.into_iter().collect();
        if let Some(eot) = id("tokenizer.ggml.eot_token_id") {
            if !stop_ids.contains(&eot) {
                stop_ids.push(eot);
            }
        }
        let default_add_bos = file.get_str("tokenizer.ggml.model") == Some("llama");
        let add_bos =
            file.get_bool("tokenizer.ggml.add_bos_token").unwrap_or(default_add_bos) && bos_id.is_some();
        Ok(Self {
            inner,
            bos_id,
            eos_id,
            stop_ids,
            add_bos,
            bos_token: bos_id.map(|i| tokens[i as usize].clone()),
            eos_token: eos_id.map(|i| tokens[i as usize].clone()),
            vocab_size: tokens.len(),
        })
    }

    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Writes this tokenizer as Hugging Face's three files in `dir`: `tokenizer.json` (the same
    /// model, normalizer, pre-tokenizer and special tokens, with BOS prepended by its post
    /// processor when the model asks for it), `tokenizer_config.json` (special tokens, chat
    /// template, `max_length`) and `special_tokens_map.json`. Tools that need a Hugging Face
    /// tokenizer (lm-evaluation-harness) then encode as this one does, offline.
    pub fn export(&self, dir: &Path, chat_template: Option<&str>, max_length: usize) -> Result<()> {
        let err = |path: &Path, what: String| tok_err(path, what);
        std::fs::create_dir_all(dir).map_err(|e| err(dir, e.to_string()))?;
        let mut inner = self.inner.clone();
        if let (true, Some(bos), Some(id)) = (self.add_bos, &self.bos_token, self.bos_id) {
            let template = TemplateProcessing::builder()
                .try_single(format!("{bos} $A"))
                .and_then(|b| b.try_pair(format!("{bos} $A {bos} $B:1")))
                .map_err(|e| err(dir, e.to_string()))?
                .special_tokens(vec![(bos.clone(), id)])
                .build()
                .map_err(|e| err(dir, e.to_string()))?;
            inner.with_post_processor(Some(template));
        }
        let json = dir.join("tokenizer.json");
        inner.save(&json, true).map_err(|e| err(&json, e.to_string()))?;
        let specials = serde_json::json!({"bos_token": self.bos_token, "eos_token": self.eos_token});
        let mut config = serde_json::json!({
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            "add_bos_token": self.add_bos,
            "add_eos_token": false,
            "clean_up_tokenization_spaces": false,
            "model_max_length": max_length,
        });
        if let Some(template) = chat_template {
            config["chat_template"] = serde_json::json!(template);
        }
        for (name, value) in [("tokenizer_config.json", config), ("special_tokens_map.json", specials)] {
            let path = dir.join(name);
            let text = serde_json::to_string_pretty(&value).map_err(|e| err(&path, e.to_string()))?;
            std::fs::write(&path, text + "\n").map_err(|e| err(&path, e.to_string()))?;
        }
        Ok(())
    }

    /// Token ids of `text`, special tokens in the text recognised, no BOS.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let encoding = self.inner.encode_fast(text, false).map_err(|e| ModelError::Encode(e.to_string()))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// Token ids of a prompt: BOS first when the model asks for it (and the text does not already
    /// start with it), then the text's tokens.
    pub fn encode_prompt(&self, text: &str) -> Result<Vec<u32>> {
        let mut ids = Vec::new();
        if self.add_bos {
            let starts_with_bos =
                self.bos_token.as_deref().is_some_and(|b| !b.is_empty() && text.starts_with(b));
            if !starts_with_bos {
                ids.extend(self.bos_id);
            }
        }
        ids.extend(self.encode(text)?);
        Ok(ids)
    }

    /// Text of `ids`, special tokens written out.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner.decode(ids, false).map_err(|e| ModelError::Encode(e.to_string()))
    }

    /// The vocabulary entry of one id (e.g. `Ġthe`), as stored in the model.
    pub fn token_piece(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    pub fn token_id(&self, piece: &str) -> Option<u32> {
        self.inner.token_to_id(piece)
    }
}

fn gpt2_tokenizer(file: &GgufFile, tokens: &[String]) -> Result<Tokenizer> {
    let path = &file.path;
    let merges: Vec<(String, String)> = file
        .get_str_array("tokenizer.ggml.merges")?
        .into_iter()
        .map(|m| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .ok_or_else(|| tok_err(path, format!("merge `{m}` in tokenizer.ggml.merges has no space")))
        })
        .collect::<Result<_>>()?;
    let vocab: tokenizers::models::bpe::Vocab =
        tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| tok_err(path, format!("byte-level BPE: {e}")))?;
    let mut tokenizer = Tokenizer::new(bpe);
    let pre = file.get_str("tokenizer.ggml.pre").unwrap_or("default");
    let split = |regex: &str| -> Result<PreTokenizerWrapper> {
        Ok(Split::new(SplitPattern::Regex(regex.to_string()), SplitDelimiterBehavior::Isolated, false)
            .map_err(|e| tok_err(path, format!("split rule: {e}")))?
            .into())
    };
    let pre_tokenizer: PreTokenizerWrapper = match pre {
        // SmolLM2 / StarCoder: every digit alone, then GPT-2's split rule.
        "smollm" | "starcoder" => {
            PreSequence::new(vec![Digits::new(true).into(), ByteLevel::new(false, true, true).into()]).into()
        }
        "qwen2" => {
            tokenizer.with_normalizer(Some(NormalizerWrapper::from(NFC))).map_err(|e| tok_err(path, e.to_string()))?;
            PreSequence::new(vec![split(SPLIT_QWEN2)?, ByteLevel::new(false, false, false).into()]).into()
        }
        "llama-bpe" | "llama3" | "smaug-bpe" => {
            PreSequence::new(vec![split(SPLIT_LLAMA3)?, ByteLevel::new(false, true, false).into()]).into()
        }
        "default" | "gpt2" | "gpt-2" => ByteLevel::new(false, true, true).into(),
        other => {
            return Err(tok_err(
                path,
                format!("tokenizer.ggml.pre `{other}` is not supported (smollm, starcoder, qwen2, llama-bpe, default); put a tokenizer.json beside the model"),
            ))
        }
    };
    tokenizer.with_pre_tokenizer(Some(pre_tokenizer));
    tokenizer.with_decoder(Some(DecoderWrapper::from(ByteLevel::new(false, true, true))));
    Ok(tokenizer)
}

fn sentencepiece_tokenizer(file: &GgufFile, tokens: &[String], types: &[i32]) -> Result<Tokenizer> {
    let path = &file.path;
    let scores = file.get_f32_array("tokenizer.ggml.scores")?;
    if scores.len() != tokens.len() {
        return Err(tok_err(path, format!("{} scores for {} tokens", scores.len(), tokens.len())));
    }
    let vocab: tokenizers::models::bpe::Vocab =
        tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
    let normal =
        |id: u32| types[id as usize] == TOKEN_TYPE_NORMAL || types[id as usize] == TOKEN_TYPE_USER_DEFINED;
    // Every way a normal piece splits into two normal pieces is a merge ranked by the piece's
    // score (higher first); ties keep the vocabulary order of the parts.
    let mut ranked: Vec<(f32, u32, u32, u32)> = Vec::new();
    for (id, piece) in tokens.iter().enumerate() {
        let id = id as u32;
        if !normal(id) {
            continue;
        }
        for (split, _) in piece.char_indices().skip(1) {
            let (left, right) = piece.split_at(split);
            if let (Some(&l), Some(&r)) = (vocab.get(left), vocab.get(right)) {
                if normal(l) && normal(r) {
                    ranked.push((scores[id as usize], l, r, id));
                }
            }
        }
    }
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.3.cmp(&b.3)).then(a.1.cmp(&b.1)));
    let merges: Vec<(String, String)> =
        ranked.iter().map(|&(_, l, r, _)| (tokens[l as usize].clone(), tokens[r as usize].clone())).collect();
    let unk = file.get_u64("tokenizer.ggml.unknown_token_id").and_then(|i| tokens.get(i as usize).cloned());
    let mut builder = BPE::builder().vocab_and_merges(vocab, merges).byte_fallback(true).fuse_unk(true);
    if let Some(unk) = unk {
        builder = builder.unk_token(unk);
    }
    let bpe = builder.build().map_err(|e| tok_err(path, format!("SentencePiece BPE: {e}")))?;
    let mut tokenizer = Tokenizer::new(bpe);
    let add_space_prefix = file.get_bool("tokenizer.ggml.add_space_prefix").unwrap_or(true);
    let mut normalizers: Vec<NormalizerWrapper> = Vec::new();
    if add_space_prefix {
        normalizers.push(Prepend::new("▁".into()).into());
    }
    normalizers.push(Replace::new(" ", "▁").map_err(|e| tok_err(path, e.to_string()))?.into());
    tokenizer
        .with_normalizer(Some(NormalizerWrapper::from(NormalizerSequence::new(normalizers))))
        .map_err(|e| tok_err(path, e.to_string()))?;
    let mut decoders: Vec<DecoderWrapper> = vec![
        Replace::new("▁", " ").map_err(|e| tok_err(path, e.to_string()))?.into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ];
    if add_space_prefix {
        decoders.push(Strip::new(' ', 1, 0).into());
    }
    tokenizer.with_decoder(Some(DecoderWrapper::from(DecoderSequence::new(decoders))));
    Ok(tokenizer)
}
