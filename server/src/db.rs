//! The connection pool and the schema. Our migrations (`migrations/`) and apalis's bundled ones
//! each keep their own history table (`public._sqlx_migrations`, `apalis._sqlx_migrations`), so
//! the two never disagree about what has been applied. Both take an advisory lock, so any number
//! of processes may start at once. apalis's run first, so that ours may adapt its tables
//! (migration 32: `store::queue` says what and why).

use std::time::Duration;

use anyhow::Context;
use sqlx::{PgPool, Postgres, Transaction, postgres::PgPoolOptions};

fn options(max_connections: u32) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(max_connections.max(2))
        .acquire_timeout(Duration::from_secs(10))
}

pub async fn connect(url: &str, max_connections: u32) -> anyhow::Result<PgPool> {
    options(max_connections)
        .connect(url)
        .await
        .context("cannot connect to PostgreSQL (is DATABASE_URL right?)")
}

/// A second pool to the same database (the workers' own, in a process that also serves HTTP).
pub async fn connect_like(pool: &PgPool, max_connections: u32) -> anyhow::Result<PgPool> {
    options(max_connections)
        .connect_with(pool.connect_options().as_ref().clone())
        .await
        .context("cannot connect to PostgreSQL for the workers")
}

/// Begins a transaction whose statements run on their generic plans: planned once per
/// connection, not again at every run. For the hot paths of small jobs (a group of creates, a
/// batch of imports), whose statements find rows by their ids (arrays of them), where a
/// custom plan is the generic one. PostgreSQL re-planned some of them at every run, judging a
/// generic plan's guess of an array's length dearer than the custom plan's count: planning
/// was 2.3 of the 14 s of statement time in `make bench ONLY=small` (10,000 jobs; the batch's
/// update of its jobs planned at every one of its runs, 0.44 ms a time). Not for every
/// statement: some plans (a search, an owner's jobs by status) do depend on their values, and
/// forcing generic plans on every connection made some of them a hundred times slower. The
/// setting (PostgreSQL 12 and later) is sent with `begin`, in the same round trip, and ends
/// with the transaction.
pub async fn begin_planned_once(pool: &PgPool) -> sqlx::Result<Transaction<'static, Postgres>> {
    pool.begin_with("begin; set local plan_cache_mode = force_generic_plan")
        .await
}

/// Our migrations, as this build knows them.
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

pub async fn migrate(pool: &PgPool) -> anyhow::Result<()> {
    apalis_postgres::PostgresStorage::setup(pool)
        .await
        .context("applying apalis's migrations")?;
    MIGRATOR
        .run(pool)
        .await
        .context("applying Conveyor's migrations")?;
    Ok(())
}

/// How many of the migrations this build knows the database has not applied (a process
/// migrates when it starts, so only a restored or replaced database lacks some).
pub async fn missing_migrations(pool: &PgPool) -> sqlx::Result<usize> {
    let applied = sqlx::query_scalar!("select version from _sqlx_migrations where success")
        .fetch_all(pool)
        .await?;
    Ok(MIGRATOR
        .iter()
        .filter(|m| m.migration_type.is_up_migration() && !applied.contains(&m.version))
        .count())
}
