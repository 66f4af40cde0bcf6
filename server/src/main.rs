//! `server [serve|worker|migrate|convert]`: see [`server::config::Cli`].

use anyhow::Context;
use clap::Parser;
use server::config::{Cli, Command, ServeArgs, UserAddArgs, UserCommand};
use tokio_util::sync::CancellationToken;

/// jemalloc, with its background threads: it gives memory back to the system a few seconds
/// after it is freed, where glibc's allocator kept it (ten thousand live streams left the server
/// at 267 MB after they closed, from 28 MB; `make bench ONLY=fanout`, docs/scaling.md).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Some(Command::Convert(args)) = &cli.command {
        // A child of a worker: no runtime, no database, no logs; stdout is the CSV.
        std::process::exit(server::jobs::convert::child(args));
    }
    // Before the runtime's threads start: they inherit it.
    let niced = match &cli.command {
        Some(Command::Worker(args)) => lower_priority(args.nice),
        _ => Ok(()),
    };
    tokio::runtime::Runtime::new()?.block_on(run(cli, niced))
}

/// Adds `by` to the niceness of each of this process's threads, up to 19. Linux keeps one per
/// thread and a new thread starts with its creator's, so the threads running now (this one,
/// and jemalloc's background thread, started by the first allocation) get it, and every
/// thread after them inherits it.
fn lower_priority(by: i32) -> std::io::Result<()> {
    use rustix::process::{Pid, getpriority_process, setpriority_process};
    if by == 0 {
        return Ok(());
    }
    for task in std::fs::read_dir("/proc/self/task")? {
        let name = task?.file_name();
        let Some(thread) = name
            .to_str()
            .and_then(|n| n.parse().ok())
            .and_then(Pid::from_raw)
        else {
            continue;
        };
        let now = getpriority_process(Some(thread))?;
        match setpriority_process(Some(thread), (now + by).min(19)) {
            // A thread that ended meanwhile.
            Ok(()) | Err(rustix::io::Errno::SRCH) => {}
            Err(err) => return Err(err.into()),
        }
    }
    Ok(())
}

async fn run(cli: Cli, niced: std::io::Result<()>) -> anyhow::Result<()> {
    server::logs::init(cli.log_format);
    if let Err(err) = niced {
        tracing::warn!("cannot lower this worker's CPU priority: {err}");
    }
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
        Command::Worker(args) => {
            if let Some(addr) = args.metrics.metrics_addr {
                server::serve_metrics(addr, pool.clone(), shutdown.clone()).await?;
            }
            server::work(pool, args.worker, shutdown).await?
        }
        Command::User(UserCommand::Add(args)) => add_user(&pool, args).await?,
        Command::Convert(_) => unreachable!("handled before the runtime starts"),
        Command::Serve(args) => {
            let addr = server::http::leptos_options()?.site_addr;
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr}"))?;
            server::serve(pool, args, listener, shutdown).await?;
        }
    }
    Ok(())
}

/// `server user add`: creates or resets an account; the password comes from stdin or is
/// generated and printed (once: only its hash is kept).
async fn add_user(pool: &sqlx::PgPool, args: UserAddArgs) -> anyhow::Result<()> {
    use server::auth::accounts::{self, Added};
    let (password, generated) = if args.password_stdin {
        let mut line = String::new();
        std::io::stdin()
            .read_line(&mut line)
            .context("reading the password from stdin")?;
        (line.trim_end_matches(['\r', '\n']).to_owned(), false)
    } else {
        (server::auth::secret::generate(), true)
    };
    let added = accounts::add_or_reset(pool, &args.email, args.role, &password)
        .await
        .map_err(|err| anyhow::anyhow!("{err}"))?;
    let email = args.email.trim().to_lowercase();
    let role = args.role.as_str();
    match added {
        Added::Created => println!("created {role} {email}"),
        Added::Reset => println!("reset {email} (now {role}); their sessions were ended"),
    }
    if generated {
        println!("password: {password}");
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
