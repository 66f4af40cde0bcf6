//! The connection pool and the schema. Our migrations (`migrations/`) and apalis's bundled ones
//! each keep their own history table (`public._sqlx_migrations`, `apalis._sqlx_migrations`), so
//! the two never disagree about what has been applied. Both take an advisory lock, so any number
//! of processes may start at once.

use std::time::Duration;

use anyhow::Context;
use sqlx::{PgPool, postgres::PgPoolOptions};

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

pub async fn migrate(pool: &PgPool) -> anyhow::Result<()> {
    sqlx::migrate!("../migrations")
        .run(pool)
        .await
        .context("applying Conveyor's migrations")?;
    apalis_postgres::PostgresStorage::setup(pool)
        .await
        .context("applying apalis's migrations")?;
    Ok(())
}
