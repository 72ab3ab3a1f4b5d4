//! `ddtree-server`: the OpenAI-compatible server (see `docs/server.md`).

use std::process::ExitCode;

use clap::Parser;
use ddtree_server::cli::Args;

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let result = match args.settings() {
        Ok(settings) => ddtree_server::run(settings).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
