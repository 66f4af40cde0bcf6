//! What the code assumes of the database it cannot check at compile time: the labels of our
//! PostgreSQL enums match the Rust enums, and apalis's table has the columns and status words
//! `store::queue` relies on (apalis-postgres is pinned exactly; this catches a bump that moves
//! them), as our migration 32 adapts it.

use app::model::{ExportFormat, JobKind, JobStatus};
use server::store::{
    queue::{self, Priority, TaskMsg},
    states::{ChunkState, DatasetState},
};
use sqlx::PgPool;

use crate::support::{TestDb, TestServer, WorkerProcess, csv, until};

async fn labels(pool: &PgPool, type_name: &str) -> Vec<String> {
    sqlx::query_scalar(
        "select e.enumlabel::text from pg_enum e join pg_type t on t.oid = e.enumtypid
         where t.typname = $1 order by e.enumsortorder",
    )
    .bind(type_name)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Every variant round-trips through PostgreSQL, and the type has no label Rust lacks.
async fn round_trips<T>(pool: &PgPool, type_name: &str, variants: &[T])
where
    T: for<'r> sqlx::Decode<'r, sqlx::Postgres>
        + sqlx::Encode<'static, sqlx::Postgres>
        + sqlx::Type<sqlx::Postgres>
        + PartialEq
        + std::fmt::Debug
        + Copy
        + Send
        + Unpin
        + 'static,
{
    assert_eq!(
        labels(pool, type_name).await.len(),
        variants.len(),
        "{type_name}"
    );
    for &variant in variants {
        // A statement per type: sqlx keeps one prepared statement per SQL text.
        let back: T = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("select $1::{type_name}")))
            .bind(variant)
            .fetch_one(pool)
            .await
            .unwrap_or_else(|err| panic!("{type_name} {variant:?}: {err}"));
        assert_eq!(back, variant);
    }
}

#[tokio::test]
async fn state_enums_match_their_postgres_types() {
    let db = TestDb::new().await;
    use JobStatus::*;
    round_trips(
        &db.pool,
        "job_status",
        &[Waiting, Running, Completed, Failed, Cancelled],
    )
    .await;
    round_trips(&db.pool, "job_kind", &JobKind::ALL).await;
    round_trips(
        &db.pool,
        "export_format",
        &[ExportFormat::Csv, ExportFormat::Xlsx],
    )
    .await;
    let chunk = [ChunkState::Pending, ChunkState::Done, ChunkState::Failed];
    round_trips(&db.pool, "chunk_state", &chunk).await;
    let dataset = [
        DatasetState::Provisional,
        DatasetState::Ready,
        DatasetState::Deleted,
    ];
    round_trips(&db.pool, "dataset_state", &dataset).await;
}

#[tokio::test]
async fn apalis_tables_have_the_layout_the_queue_relies_on() {
    let db = TestDb::new().await;
    let columns: Vec<(String, String)> = sqlx::query_as(
        "select column_name::text, data_type::text from information_schema.columns
         where table_schema = 'apalis' and table_name = 'jobs' order by column_name",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    for (name, data_type) in [
        ("id", "text"),
        ("job_type", "text"),
        ("idempotency_key", "text"),
        ("status", "text"),
        ("lock_at", "timestamp with time zone"),
        ("done_at", "timestamp with time zone"),
        ("run_at", "timestamp with time zone"),
        ("attempts", "integer"),
        ("max_attempts", "integer"),
        ("priority", "integer"),
    ] {
        assert!(
            columns.iter().any(|(n, t)| n == name && t == data_type),
            "apalis.jobs.{name} ({data_type}) is gone or changed: {columns:?}"
        );
    }
    // A pushed message waits as `Pending`, the word `store::queue::message_is_live` looks for.
    let ticket = uuid::Uuid::new_v4();
    let task = TaskMsg::Plan {
        job_id: uuid::Uuid::new_v4(),
    };
    let mut conn = db.pool.acquire().await.unwrap();
    queue::push(&mut conn, &[(task, ticket)], Priority::Turn { ahead: 0 })
        .await
        .unwrap();
    let status: String =
        sqlx::query_scalar("select status from apalis.jobs where idempotency_key = $1")
            .bind(ticket.to_string())
            .fetch_one(&mut *conn)
            .await
            .unwrap();
    assert_eq!(status, "Pending");
}

/// apalis's queue as migration 32 adapts it: its fetch is PL/pgSQL, which keeps its plan, and
/// a message apalis has acknowledged lets go of its worker, so that acknowledgements,
/// heartbeats and the search for a dead worker's messages read only live messages.
#[tokio::test]
async fn apalis_fetch_keeps_its_plan_and_done_messages_let_go_of_their_workers() {
    let db = TestDb::new().await;
    let language: String = sqlx::query_scalar(
        "select l.lanname::text from pg_proc p join pg_language l on l.oid = p.prolang
         where p.oid = 'apalis.get_jobs(text, text, integer)'::regprocedure",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(language, "plpgsql");

    // A server without workers queues a message for every job (its own workers would take a
    // small import without one: `jobs::lane`), which a worker process runs.
    let server = TestServer::start(&db, None).await;
    let _worker = WorkerProcess::start(&db, 100);
    let job = server.import("small.csv", csv(3), "small").await;
    assert_eq!(server.finished(job.id).await.status, JobStatus::Completed);
    // apalis acknowledges a message after its task returned: after the job completed.
    let messages = "select bool_and(status = 'Done'), count(*) filter (where lock_by is not null)
                    from apalis.jobs
                    where convert_from(job, 'UTF8')::jsonb ->> 'job_id' = $1::text";
    let read = || async {
        sqlx::query_as::<_, (Option<bool>, i64)>(messages)
            .bind(job.id)
            .fetch_one(&db.pool)
            .await
            .unwrap()
    };
    until("apalis acknowledged the job's messages", || async {
        read().await.0 == Some(true)
    })
    .await;
    assert_eq!(read().await.1, 0, "a done message keeps no worker");
    server.stop().await;
}
