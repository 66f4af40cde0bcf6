//! The connection pool and the schema. Our migrations (`migrations/`) and apalis's bundled ones
//! each keep their own history table (`public._sqlx_migrations`, `apalis._sqlx_migrations`), so
//! the two never disagree about what has been applied. Both take an advisory lock, so any number
//! of processes may start at once.

use std::time::Duration;

use anyhow::Context;
use sqlx::{PgPool, postgres::PgPoolOptions};

pub async fn connect(url: &str, max_connections: u32) -> anyhow::Result<PgPool> {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(10))
        .connect(url)
        .await
        .context("cannot connect to PostgreSQL (is DATABASE_URL right?)")
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
