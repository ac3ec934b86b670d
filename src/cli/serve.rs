//! `repairbench serve`: flags resolved, then [`repairbench::serve::serve_model`].

use clap::Args;
use repairbench::model::DEFAULT_MODEL;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The model: a GGUF path, `hf:REPO/FILE` or `pip:PACKAGE/FILE` (default: the bundled
    /// SmolLM2-135M-Instruct Q4_1).
    #[arg(long)]
    model: Option<String>,
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// 0 picks a free port; the address is printed on the first line of stdout.
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Sequences decoded together: concurrent requests share one continuous batch.
    #[arg(long, default_value_t = repairbench::model::batch::DEFAULT_BATCH)]
    decode_batch: usize,
}

pub fn run(args: ServeArgs) -> anyhow::Result<u8> {
    let source = args.model.as_deref().unwrap_or(DEFAULT_MODEL);
    let addr = format!("{}:{}", args.host, args.port);
    repairbench::serve::serve_model(source, args.decode_batch, &addr, |local| {
        use std::io::Write;
        println!("listening on http://{local}/v1");
        let _ = std::io::stdout().flush();
    })?;
    Ok(super::EXIT_OK)
}
