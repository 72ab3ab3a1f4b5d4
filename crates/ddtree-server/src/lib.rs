//! The OpenAI-compatible HTTP server and command line of the DDTree workspace.
//!
//! `POST /v1/chat/completions` (streamed or not) and `POST /v1/completions` run requests through
//! one engine worker thread behind a bounded queue; `GET /v1/models`, `GET /health` and
//! `GET /metrics` describe the server. Responses carry the OpenAI shape plus a `ddtree` object
//! of per-request speculative-decoding statistics. Flags, endpoints, errors and metrics are
//! documented in `docs/server.md`.
//!
//! The layers: [`validate`] turns a JSON body into a typed request (a `400` naming the field for
//! everything else), [`template`] renders chat templates, the worker ([`worker`]) owns the
//! engine and turns tokens into text ([`pipeline`]: [`detok`], [`stop`], [`reasoning`]), and
//! [`routes`] answers over HTTP ([`sse`] framing, [`error`] bodies, [`auth`], [`metrics`]).
//!
//! ```no_run
//! use clap::Parser;
//! # async fn demo() -> Result<(), String> {
//! let args = ddtree_server::cli::Args::parse_from(["ddtree-server", "--port", "0"]);
//! ddtree_server::run(args.settings()?).await
//! # }
//! ```

pub mod auth;
pub mod cli;
pub mod detok;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod metrics;
pub mod model;
pub mod openai;
pub mod pipeline;
pub mod reasoning;
pub mod routes;
pub mod sse;
pub mod stop;
pub mod template;
pub mod validate;
pub mod worker;

use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::cli::Settings;
use crate::metrics::Metrics;
use crate::model::Loaded;
use crate::routes::AppState;

/// Builds the state and starts the engine worker, which runs `load` and then serves the queue;
/// `on_load_error` hears about a failed load.
pub fn start(
    settings: Settings,
    load: Box<dyn FnOnce() -> Result<Loaded, String> + Send>,
    on_load_error: Box<dyn FnOnce(String) + Send>,
) -> AppState {
    let metrics = Arc::new(Metrics::new());
    let model = Arc::new(OnceLock::new());
    let queue = worker::spawn(
        load,
        settings.max_queue,
        metrics.clone(),
        model.clone(),
        on_load_error,
    );
    AppState {
        settings: Arc::new(settings),
        model,
        queue,
        metrics,
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    }
}

/// Serves until Ctrl-C / SIGTERM; fails if the address cannot be bound or the model cannot be
/// loaded (`/health` answers 503 while it loads).
pub async fn run(settings: Settings) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(settings.addr)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", settings.addr))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let (failed_tx, failed_rx) = tokio::sync::oneshot::channel::<String>();
    let source = settings.source.clone();
    let device = settings.device;
    tracing::info!(
        "loading target {} and drafter {}",
        source.target.display(),
        source.draft.display()
    );
    let state = start(
        settings,
        Box::new(move || model::load(&source, device)),
        Box::new(move |e| {
            let _ = failed_tx.send(e);
        }),
    );
    tracing::info!(
        "serving {:?} on http://{addr} (GET /health is 200 once the model is loaded)",
        state.settings.served_model_name
    );
    let app = routes::router(state);
    let server = axum::serve(listener, app).with_graceful_shutdown(shutdown_signal());
    tokio::select! {
        r = server => r.map_err(|e| format!("server error: {e}")),
        Ok(e) = failed_rx => Err(format!("cannot load the model: {e}")),
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down");
}
