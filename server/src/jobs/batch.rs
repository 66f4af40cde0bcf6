//! Batches of small imports: the jobs a process's creates hand on at the same moment
//! ([`super::lane`]) are imported by one run in one transaction. Their rows are locked by one
//! statement and their files read by one; their rows, chunks, jobs' counters, datasets'
//! columns and counts are written as the plan writes a file of one chunk, with one statement
//! for each of those for all of them ([`plan::write_at_once`]); their notifications and their
//! runs' ends take one statement each, and all of it one commit, where each job alone paid for
//! all of those (a job with rows in error, or into a dataset with a key, still writes those
//! alone).
//!
//! A batch only takes what is sure to be imported at once: a live, unsealed import of a CSV
//! file of one chunk. Any other job of the batch (a workbook, a larger file, a file that cannot
//! be read, a job cancelled meanwhile, a second import into the same dataset) is left to a run
//! of its own, which does what a plan does with it. A batch that fails (a refusal, a database
//! error, a stop) is rolled back whole, and every one of its jobs runs alone (or, once the
//! process is past its shutdown grace, is given back): nothing of a batch stays unless all of
//! it does.

use app::history::RunOutcome;
use sqlx::{Postgres, Transaction};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{Engine, TaskError, plan};
use crate::{
    spreadsheet::{Plan, csv},
    store::{
        history,
        jobs::{self, ImportJob},
        leases::Lease,
        notify, uploads,
    },
    telemetry,
};

/// The most jobs one batch imports: their run slot is held as long as all of them take. With
/// eight places in the lane per slot, `make bench ONLY=small` (10,000 jobs) ran at 426–516
/// jobs/s with batches of up to eight (three runs), 378 with four and 292–385 with none (one
/// job a run, three runs), alternated.
pub const MOST: usize = 8;

/// Imports at once, in one transaction, the jobs of these leases (of their plans, handed on)
/// that can be; says of each lease whether its job was imported (its run is then ended). Those
/// that were not still hold their lease, to run alone; on an error none was imported.
pub async fn import(
    engine: Engine,
    leases: Vec<Lease>,
    stop: CancellationToken,
) -> Result<Vec<bool>, TaskError> {
    let ids: Vec<Uuid> = leases.iter().map(|lease| lease.item.job_id()).collect();
    let mut tx = crate::db::begin_planned_once(&engine.pool).await?;
    let mut ready = readable(&mut tx, &ids, engine.chunk_rows).await?;
    if ready.is_empty() {
        tx.rollback().await?;
        return Ok(vec![false; leases.len()]);
    }
    // Each ready job's place among the leases.
    let places: Vec<usize> = ready
        .iter()
        .map(|(job, ..)| ids.iter().position(|&id| id == job.id))
        .collect::<Option<_>>()
        .expect("locked from these ids");
    let at_once: Vec<plan::AtOnce> = ready
        .iter_mut()
        .zip(&places)
        .map(|((job, plan, file), &i)| plan::AtOnce {
            job,
            plan,
            span: plan.chunks[0],
            file: std::mem::take(file),
            lease_owner: &leases[i].owner,
        })
        .collect();
    let Some(written) = plan::write_at_once(&mut tx, at_once).await? else {
        // Locked, live and unsealed: nothing can have moved them.
        let found = "a job of a batch was not live and unsealed under its lock";
        return Err(std::io::Error::other(found).into());
    };
    let imported: Vec<(usize, i64, csv::ChunkRows)> = places
        .into_iter()
        .zip(written)
        .map(|(i, (version, rows))| (i, version, rows))
        .collect();
    let changed: Vec<(Uuid, i64)> = imported.iter().map(|&(i, v, _)| (ids[i], v)).collect();
    notify::jobs_changed(&mut tx, &changed).await?;
    let runs: Vec<&str> = imported.iter().map(|&(i, ..)| &*leases[i].owner).collect();
    history::end_runs(&mut *tx, &runs, RunOutcome::Ok).await?;
    if stop.is_cancelled() {
        tx.rollback().await?;
        return Err(TaskError::Stopped);
    }
    tx.commit().await?;
    let mut done = vec![false; leases.len()];
    for (i, _, rows) in imported {
        done[i] = true;
        telemetry::rows_imported(rows.rows.len() as i64, rows.errors.len() as i64);
        tracing::info!(job_id = %ids[i], rows = rows.rows.len(), "job imported at once, in a batch");
    }
    Ok(done)
}

/// Locks the jobs of `ids` and reads their files: those to import at once, with their plan and
/// file, one per dataset. Their datasets are then locked as one import of each would lock
/// them, each when it is first written: two batches can wait for each other in a circle only
/// if both import into the same two datasets at once, which takes imports that name serialize
/// keys of their own; PostgreSQL then stops one, and its jobs run alone.
async fn readable(
    tx: &mut Transaction<'_, Postgres>,
    ids: &[Uuid],
    chunk_rows: usize,
) -> Result<Vec<(ImportJob, Plan, Vec<u8>)>, TaskError> {
    let jobs: Vec<ImportJob> = jobs::lock_import_jobs(&mut *tx, ids)
        .await?
        .into_iter()
        .filter(|job| job.is_live() && !job.sealed)
        .collect();
    let upload_ids: Vec<Uuid> = jobs.iter().map(|job| job.upload_id).collect();
    let files = uploads::first_parts(&mut **tx, &upload_ids).await?;
    let read: Vec<(ImportJob, Vec<u8>)> = jobs
        .into_iter()
        .map(|job| {
            let file = files.get(&job.upload_id).cloned().unwrap_or_default();
            (job, file)
        })
        .filter(|(_, file)| plan::is_small_csv(file))
        .collect();
    let mut ready = tokio::task::spawn_blocking(move || {
        read.into_iter()
            .filter_map(|(job, file)| {
                let plan = csv::scan(&file[..], &job.reading(), chunk_rows).ok()?;
                (plan.chunks.len() == 1).then_some((job, plan, file))
            })
            .collect::<Vec<_>>()
    })
    .await?;
    // One import per dataset (any other runs alone): a batch's keyed rows are written by one
    // upsert for each import, which each lock their keys in order, not all of them in one.
    ready.sort_by_key(|(job, ..)| job.dataset_id);
    ready.dedup_by_key(|(job, ..)| job.dataset_id);
    Ok(ready)
}
