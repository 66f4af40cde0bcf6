//! `server [serve|worker|migrate|convert]`: see [`server::config::Cli`].

use anyhow::Context;
use clap::Parser;
use server::config::{Cli, Command, ServeArgs};
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Some(Command::Convert(args)) = &cli.command {
        // A child of a worker: no runtime, no database, no logs; stdout is the CSV.
        std::process::exit(server::jobs::convert::child(args));
    }
    tokio::runtime::Runtime::new()?.block_on(run(cli))
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,apalis=warn")),
        )
        .init();
    let url = cli
        .database
        .database_url
        .context("DATABASE_URL is not set (`make run` starts a local PostgreSQL and sets it)")?;
    let pool = server::db::connect(&url, cli.database.db_pool).await?;
    server::db::migrate(&pool).await?;
    let shutdown = CancellationToken::new();
    tokio::spawn(stop_on_signal(shutdown.clone()));
    let command = match cli.command {
        Some(command) => command,
        None => Command::Serve(ServeArgs::from_env()?),
    };
    match command {
        Command::Migrate => {
            tracing::info!("migrations applied");
        }
        Command::Worker(args) => server::work(pool, args, shutdown).await?,
        Command::Convert(_) => unreachable!("handled before the runtime starts"),
        Command::Serve(args) => {
            let addr = server::http::leptos_options().site_addr;
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr}"))?;
            server::serve(pool, args, listener, shutdown).await?;
        }
    }
    Ok(())
}

/// Cancels `shutdown` on SIGTERM or Ctrl-C.
async fn stop_on_signal(shutdown: CancellationToken) {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
    tracing::info!("shutting down");
    shutdown.cancel();
}
