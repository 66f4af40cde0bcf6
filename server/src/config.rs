//! Settings, from the command line or the environment (every flag has a `CONVEYOR_…` variable).

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "server",
    version,
    about = "Conveyor: background spreadsheet jobs with live progress"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// How log lines are written: `text` for people, `json` (one object per line, with the
    /// request's or the task's span fields) for a log collector.
    #[arg(
        long,
        env = "CONVEYOR_LOG_FORMAT",
        value_enum,
        ignore_case = true,
        default_value_t = crate::logs::Format::Text,
        global = true
    )]
    pub log_format: crate::logs::Format,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Serve HTTP, pages and live progress, with workers unless `--no-workers` (the default command).
    Serve(ServeArgs),
    /// Run workers only, to add processing capacity on any machine.
    Worker(WorkerCommandArgs),
    /// Apply database migrations and exit.
    Migrate,
    /// Convert a workbook on stdin to CSV on stdout (workers run this in a memory-limited
    /// child process; see `jobs::convert`).
    Convert(ConvertArgs),
    /// Manage accounts (create the first admin, reset a password).
    #[command(subcommand)]
    User(UserCommand),
}

#[derive(Subcommand, Debug)]
pub enum UserCommand {
    /// Create an account, or reset the password (and role) of an existing one and end its
    /// sessions. Prints a generated password unless `--password-stdin` is given.
    Add(UserAddArgs),
}

#[derive(Args, Debug, Clone)]
pub struct UserAddArgs {
    #[arg(long)]
    pub email: String,
    /// `admin`, `viewer` or `member`.
    #[arg(long, default_value = "member", value_parser = parse_role)]
    pub role: app::auth::Role,
    /// Read the password from the first line of standard input instead of generating one.
    #[arg(long)]
    pub password_stdin: bool,
}

fn parse_role(word: &str) -> Result<app::auth::Role, String> {
    app::auth::Role::parse(word)
        .filter(|role| *role != app::auth::Role::Guest)
        .ok_or_else(|| "one of admin, viewer, member".to_owned())
}

#[derive(Args, Debug, Clone)]
pub struct ConvertArgs {
    /// The sheet to convert (default: the first shown sheet holding a table, passing over a cover sheet).
    #[arg(long)]
    pub sheet: Option<String>,
    /// The sheet row (1-based) of the header: rows above it are skipped (with `--head`: the
    /// first row sent).
    #[arg(long)]
    pub header_row: Option<i64>,
    /// Instead of the CSV, write the workbook's sheets and the sheet's first rows as JSON.
    #[arg(long)]
    pub head: bool,
}

#[derive(Args, Debug, Clone)]
pub struct DatabaseArgs {
    /// PostgreSQL connection URL.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub database_url: Option<String>,
    /// Connections in this process's pool.
    #[arg(long, env = "CONVEYOR_DB_POOL", default_value_t = 16, global = true)]
    pub db_pool: u32,
}

/// `server worker`: the workers' settings, where its metrics may be scraped, and its CPU
/// priority.
#[derive(Args, Debug, Clone)]
pub struct WorkerCommandArgs {
    #[command(flatten)]
    pub worker: WorkerArgs,
    #[command(flatten)]
    pub metrics: MetricsArgs,
    /// Added to the niceness (Linux `nice`, up to 19) of the process's threads as it starts:
    /// on a machine it shares with `serve` processes, their pages and event streams get the
    /// CPU before imports and exports do (docs/scaling.md). On a machine of its own, or an
    /// idle one, it changes nothing. 0 leaves the niceness as it was.
    #[arg(long, env = "CONVEYOR_WORKER_NICE", default_value_t = 10,
          value_parser = clap::value_parser!(i32).range(0..=19))]
    pub nice: i32,
}

/// Who may read `GET /metrics`: admins (signed in, or with an API token), a scraper with the
/// metrics token, and anyone who reaches the metrics address.
#[derive(Args, Debug, Clone, Default)]
pub struct MetricsArgs {
    /// A token that lets a scraper read `/metrics` as `Authorization: Bearer <token>`, without
    /// an account.
    #[arg(long, env = "CONVEYOR_METRICS_TOKEN", hide_env_values = true)]
    pub metrics_token: Option<String>,
    /// Also serve `GET /metrics`, and nothing else, on this address to anyone who reaches it
    /// (bind it to a private interface, e.g. `10.0.0.5:9464`). The way to scrape `server
    /// worker` processes, which serve nothing else.
    #[arg(long, env = "CONVEYOR_METRICS_ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
}

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// Do not run workers in this process.
    #[arg(long, env = "CONVEYOR_NO_WORKERS", value_parser = clap::builder::BoolishValueParser::new())]
    pub no_workers: bool,
    /// Largest accepted upload, in bytes.
    #[arg(long, env = "CONVEYOR_MAX_UPLOAD_BYTES", default_value_t = 1 << 30)]
    pub max_upload_bytes: usize,
    #[command(flatten)]
    pub auth: AuthArgs,
    #[command(flatten)]
    pub limits: LimitArgs,
    #[command(flatten)]
    pub worker: WorkerArgs,
    #[command(flatten)]
    pub metrics: MetricsArgs,
    /// Connections of the workers' own pool when this process runs workers too: HTTP uses
    /// `CONVEYOR_DB_POOL`, so a flood of requests never starves the workers' heartbeats.
    #[arg(long, env = "CONVEYOR_WORKER_DB_POOL", default_value_t = 10)]
    pub worker_db_pool: u32,
}

impl Default for ServeArgs {
    fn default() -> Self {
        ServeArgs {
            no_workers: false,
            max_upload_bytes: 1 << 30,
            auth: AuthArgs::default(),
            limits: LimitArgs::default(),
            worker: WorkerArgs::default(),
            metrics: MetricsArgs::default(),
            worker_db_pool: 10,
        }
    }
}

/// What one owner may hold at once, and how long a request body may stall: generous for a
/// person, a wall for a script gone wrong (or a hostile one). Over a limit, the answer is
/// `429` with `Retry-After` and a sentence saying which limit.
#[derive(Args, Debug, Clone)]
pub struct LimitArgs {
    /// Uploads one owner may be sending at once.
    #[arg(
        long = "max-uploads-at-once",
        env = "CONVEYOR_MAX_UPLOADS_AT_ONCE",
        default_value_t = 4
    )]
    pub uploads_at_once: i64,
    /// Bytes of uploaded files one owner may keep (files go when no job needs them and
    /// retention removes them); and, counted apart, bytes of item payloads their jobs of
    /// registered types may keep (until deleted, or retention removes them).
    #[arg(long = "max-stored-bytes", env = "CONVEYOR_MAX_STORED_BYTES", default_value_t = 20 << 30)]
    pub stored_bytes: i64,
    /// Jobs one owner may have waiting or running.
    #[arg(
        long = "max-active-jobs",
        env = "CONVEYOR_MAX_ACTIVE_JOBS",
        default_value_t = 200
    )]
    pub active_jobs: i64,
    /// Live event streams one owner may hold open to one server process.
    #[arg(
        long = "max-streams",
        env = "CONVEYOR_MAX_STREAMS",
        default_value_t = 32
    )]
    pub streams: usize,
    /// Seconds a request body may go without sending a byte before it is cut off.
    #[arg(long, env = "CONVEYOR_BODY_TIMEOUT_SECS", default_value_t = 30.0, value_parser = finite)]
    pub body_timeout_secs: f64,
    /// Seconds a client has to send a request's head, and a kept-alive connection may wait
    /// idle for its next one, before the connection is closed.
    #[arg(long, env = "CONVEYOR_HEADER_TIMEOUT_SECS", default_value_t = 30.0, value_parser = finite)]
    pub header_timeout_secs: f64,
}

impl Default for LimitArgs {
    fn default() -> Self {
        LimitArgs {
            uploads_at_once: 4,
            stored_bytes: 20 << 30,
            active_jobs: 200,
            streams: 32,
            body_timeout_secs: 30.0,
            header_timeout_secs: 30.0,
        }
    }
}

/// A length of time (in seconds, hours or days), as a setting takes it: a finite number (`nan`
/// would pass a clamp and panic on becoming a `Duration`).
fn finite(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(value) if value.is_finite() => Ok(value),
        _ => Err(format!("\"{text}\" is not a number")),
    }
}

impl LimitArgs {
    pub fn body_timeout(&self) -> Duration {
        // At most 5 minutes: an upload that waits longer for bytes would stop counting as being
        // sent (`store::uploads` counts those that showed life in the last 10).
        Duration::from_secs_f64(self.body_timeout_secs.clamp(1.0, 300.0))
    }

    pub fn header_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.header_timeout_secs.clamp(1.0, 300.0))
    }
}

/// Whether visitors who are not signed in may use the app.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuthMode {
    /// A visitor who is not signed in is a guest: they own what they make, isolated like a
    /// member.
    #[default]
    Guest,
    /// Everything but signing in (and up) needs an account.
    Required,
}

/// Accounts, sessions and the browser's defences.
#[derive(Args, Debug, Clone)]
pub struct AuthArgs {
    /// `guest` (visitors may use the app without an account) or `required`.
    #[arg(long = "auth", env = "CONVEYOR_AUTH", value_enum, default_value_t = AuthMode::Guest)]
    pub mode: AuthMode,
    /// Whether visitors may create accounts on the sign-up page.
    #[arg(long, env = "CONVEYOR_SIGN_UP", default_value_t = true, action = clap::ArgAction::Set,
          value_parser = clap::builder::BoolishValueParser::new())]
    pub sign_up: bool,
    /// Served over TLS (by us or a proxy in front): cookies are `Secure` and HSTS is sent.
    #[arg(long, env = "CONVEYOR_HTTPS", value_parser = clap::builder::BoolishValueParser::new())]
    pub https: bool,
    /// Host names (with or without a port) requests may be addressed to; others are refused,
    /// against DNS rebinding. `*` allows any. Default: loopback names only.
    #[arg(
        long,
        env = "CONVEYOR_ALLOWED_HOSTS",
        value_delimiter = ',',
        default_value = "localhost,127.0.0.1,[::1]"
    )]
    pub allowed_hosts: Vec<String>,
    /// Days a session lasts from sign-in, however active.
    #[arg(long, env = "CONVEYOR_SESSION_DAYS", default_value_t = 30.0, value_parser = finite)]
    pub session_days: f64,
    /// Hours without a request after which a session ends.
    #[arg(long, env = "CONVEYOR_SESSION_IDLE_HOURS", default_value_t = 168.0, value_parser = finite)]
    pub session_idle_hours: f64,
}

impl Default for AuthArgs {
    fn default() -> Self {
        Self {
            mode: AuthMode::Guest,
            sign_up: true,
            https: false,
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "[::1]".into()],
            session_days: 30.0,
            session_idle_hours: 168.0,
        }
    }
}

impl AuthArgs {
    pub fn session_lifetime(&self) -> crate::store::sessions::Lifetime {
        let secs = |s: f64| Duration::from_secs_f64(s.clamp(60.0, 3650.0 * 86_400.0));
        crate::store::sessions::Lifetime {
            absolute: secs(self.session_days * 86_400.0),
            idle: secs(self.session_idle_hours * 3600.0),
        }
    }
}

/// Rows per chunk by default. Each chunk is one task and one transaction; `make bench` (1M rows)
/// finds 5,000 about as fast as 10,000 or more, at half the peak memory, and much faster than
/// 2,000 (per-task costs).
pub const DEFAULT_CHUNK_ROWS: usize = 5000;

/// Rows per export chunk by default: a chunk reads its rows with one `COPY` and writes them a
/// part at a time, so its cost is per row, not per chunk, and fewer chunks save the tasks and
/// transactions around them (`make bench ONLY=export`, 1M rows: 50,000 took about 20% less
/// time and CPU than 5,000).
pub const DEFAULT_EXPORT_CHUNK_ROWS: usize = 50_000;

/// Tasks a process runs at once by default: twice the cores of a small machine, because a task
/// spends much of its time waiting on PostgreSQL (`make bench`: 4 imports ~10% faster than 2).
pub const DEFAULT_CONCURRENCY: usize = 4;

#[derive(Args, Debug, Clone)]
pub struct WorkerArgs {
    /// Tasks this process runs at once.
    #[arg(long, env = "CONVEYOR_WORKER_CONCURRENCY", default_value_t = DEFAULT_CONCURRENCY)]
    pub concurrency: usize,
    /// Rows per chunk when a job is planned.
    #[arg(long, env = "CONVEYOR_CHUNK_ROWS", default_value_t = DEFAULT_CHUNK_ROWS)]
    pub chunk_rows: usize,
    /// Rows (by position) per chunk when an export is planned.
    #[arg(long, env = "CONVEYOR_EXPORT_CHUNK_ROWS", default_value_t = DEFAULT_EXPORT_CHUNK_ROWS)]
    pub export_chunk_rows: usize,
    /// Seconds between heartbeats: a running chunk renews its lease (and notices a cancel),
    /// and the maintenance duties look for expired leases, items without a queue message and
    /// batches to settle.
    #[arg(long, env = "CONVEYOR_HEARTBEAT_SECS", default_value_t = 1.0, value_parser = finite)]
    pub heartbeat_secs: f64,
    /// Seconds a lease lasts without renewal: a chunk whose worker died is run again by
    /// another after about this long.
    #[arg(long, env = "CONVEYOR_LEASE_SECS", default_value_t = 5.0, value_parser = finite)]
    pub lease_secs: f64,
    /// Seconds a stopping worker (SIGTERM) lets its running chunks finish before it gives them
    /// back to the queue.
    #[arg(long, env = "CONVEYOR_SHUTDOWN_SECS", default_value_t = 30.0, value_parser = finite)]
    pub shutdown_secs: f64,
    /// Days a finished job's items (chunks, row errors, its files) are kept.
    #[arg(long, env = "CONVEYOR_RETAIN_ITEMS_DAYS", default_value_t = 7.0, value_parser = finite)]
    pub retain_items_days: f64,
    /// Days a finished job's summary is kept.
    #[arg(long, env = "CONVEYOR_RETAIN_JOBS_DAYS", default_value_t = 90.0, value_parser = finite)]
    pub retain_jobs_days: f64,
    /// The program whose `convert` command turns workbooks into CSV (default: this one).
    #[arg(long, env = "CONVEYOR_CONVERTER")]
    pub converter: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub callbacks: CallbackArgs,
}

/// Completion callbacks (`jobs::callbacks`): where they may go, and for how long they are
/// tried.
#[derive(Args, Debug, Clone)]
pub struct CallbackArgs {
    /// Networks callbacks may reach although they are internal (loopback, private, link-local
    /// …), comma-separated, like `10.1.0.0/16,127.0.0.1/32`. Empty: only public addresses.
    #[arg(
        long = "callback-allow",
        env = "CONVEYOR_CALLBACK_ALLOW",
        value_delimiter = ',',
        num_args = 0..
    )]
    pub allow: Vec<ipnet::IpNet>,
    /// Hours after a job ends during which its callback is tried again until it gets a 2xx.
    #[arg(
        long = "callback-horizon-hours",
        env = "CONVEYOR_CALLBACK_HORIZON_HOURS",
        default_value_t = 24.0,
        value_parser = finite
    )]
    pub horizon_hours: f64,
    /// Callbacks this process sends at once.
    #[arg(
        id = "callback_concurrency",
        long = "callback-concurrency",
        env = "CONVEYOR_CALLBACK_CONCURRENCY",
        default_value_t = 8
    )]
    pub concurrency: usize,
}

impl Default for CallbackArgs {
    fn default() -> Self {
        CallbackArgs {
            allow: Vec::new(),
            horizon_hours: 24.0,
            concurrency: 8,
        }
    }
}

impl CallbackArgs {
    pub fn horizon(&self) -> Duration {
        Duration::from_secs_f64(self.horizon_hours.clamp(0.0, 24.0 * 365.0) * 3600.0)
    }
}

impl Default for WorkerArgs {
    fn default() -> Self {
        Self {
            concurrency: DEFAULT_CONCURRENCY,
            chunk_rows: DEFAULT_CHUNK_ROWS,
            export_chunk_rows: DEFAULT_EXPORT_CHUNK_ROWS,
            heartbeat_secs: 1.0,
            lease_secs: 5.0,
            shutdown_secs: 30.0,
            retain_items_days: 7.0,
            retain_jobs_days: 90.0,
            converter: None,
            callbacks: CallbackArgs::default(),
        }
    }
}

impl WorkerArgs {
    /// The program run as `<converter> convert`: the one named, or this one.
    pub fn converter_path(&self) -> std::io::Result<std::path::PathBuf> {
        match &self.converter {
            Some(path) => Ok(path.clone()),
            None => std::env::current_exe(),
        }
    }

    pub fn heartbeat(&self) -> Duration {
        Duration::from_secs_f64(self.heartbeat_secs.clamp(0.05, 60.0))
    }

    /// At least three heartbeats, so one slow renewal does not lose a lease.
    pub fn lease(&self) -> Duration {
        Duration::from_secs_f64(self.lease_secs.clamp(0.1, 3600.0)).max(3 * self.heartbeat())
    }

    /// How long finished jobs' items, and then their summaries, are kept.
    pub fn retention(&self) -> (Duration, Duration) {
        let days = |d: f64| Duration::from_secs_f64(d.clamp(0.0, 36_500.0) * 86_400.0);
        (days(self.retain_items_days), days(self.retain_jobs_days))
    }

    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_secs_f64(self.shutdown_secs.clamp(0.0, 3600.0))
    }
}

impl ServeArgs {
    /// The settings of `serve` when no subcommand is given: defaults and `CONVEYOR_…` variables.
    pub fn from_env() -> Result<Self, clap::Error> {
        use clap::FromArgMatches;
        let command = Self::augment_args(clap::Command::new("serve"));
        Self::from_arg_matches(&command.try_get_matches_from(["serve"])?)
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// Every setting has its own name, and every command parses (clap checks this only when a
    /// command is first used).
    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// A length of time that is not a number is refused when read, not a panic later.
    #[test]
    fn lengths_of_time_must_be_numbers() {
        use clap::Parser;
        for flag in [
            "--header-timeout-secs",
            "--body-timeout-secs",
            "--session-days",
            "--lease-secs",
            "--retain-jobs-days",
            "--callback-horizon-hours",
        ] {
            let parsed =
                |value: &str| Cli::try_parse_from(["server", "serve", flag, value]).is_ok();
            assert!(parsed("2.5"), "{flag}");
            for refused in ["nan", "inf", "-inf", "soon"] {
                assert!(!parsed(refused), "{flag} {refused}");
            }
        }
    }
}
