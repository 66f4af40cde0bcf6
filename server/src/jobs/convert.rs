//! The first step of planning a workbook import: turn the chosen sheet into a CSV upload, which
//! the rest of the plan and every chunk then read like any CSV file.
//!
//! The conversion runs on a blocking thread and streams its output through a channel into a
//! new upload (one transaction), so a sheet of any length costs the same memory. A conversion
//! that fails tells the upload's writer, which rolls back: no half sheet is ever stored.

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use uuid::Uuid;

use super::{Engine, TaskError, export::CSV_TYPE, pipe::PartWriter};
use crate::{
    spreadsheet::{
        FileError,
        csv::ScanError,
        workbook::{self, MAX_WORKBOOK_BYTES},
    },
    store::{
        jobs::{self, ImportJob},
        uploads::{self, UploadError},
    },
};

/// What the plan reads next: the upload itself, or the CSV a workbook sheet became.
pub struct Source {
    pub upload_id: Uuid,
    /// The sheet row of the header (1 for a CSV file).
    pub header_row: i64,
}

/// The CSV this job's chunks will read, converting a workbook sheet when that has not been
/// done yet. `Ok(Err(..))` is the file's fault: the job fails with that message.
pub async fn source(
    engine: &Engine,
    job_id: Uuid,
    job: &ImportJob,
) -> Result<Result<Source, FileError>, TaskError> {
    if let Some(upload_id) = job.data_upload_id {
        return Ok(Ok(Source {
            upload_id,
            header_row: job.header_row.unwrap_or(1),
        }));
    }
    let pool = &engine.pool;
    let head = uploads::read_range(pool, job.upload_id, 0, 8).await?;
    if workbook::Kind::of(&head).is_none() {
        return Ok(Ok(Source {
            upload_id: job.upload_id,
            header_row: 1,
        }));
    }
    let upload = uploads::find(pool, job.upload_id)
        .await?
        .ok_or(sqlx::Error::RowNotFound)?;
    if upload.size as u64 > MAX_WORKBOOK_BYTES {
        return Ok(Err(FileError::NotCsv(format!(
            "The workbook is larger than {} MB, the most we open. Save the sheet as CSV (which \
             has no such limit) and upload that.",
            MAX_WORKBOOK_BYTES >> 20
        ))));
    }
    let bytes = uploads::read_range(pool, job.upload_id, 0, upload.size as u64).await?;

    let (parts_tx, parts_rx) = mpsc::channel(2);
    let sheet = job.sheet.clone();
    let convert = tokio::task::spawn_blocking(move || {
        let mut out = PartWriter::new(parts_tx);
        let converted = workbook::to_csv(bytes, sheet.as_deref(), &mut out);
        match &converted {
            Ok(_) => out.finish()?,
            Err(err) => out.abort(&err.to_string()),
        }
        converted
    });
    let filename = format!("{}.csv", upload.filename);
    let save = uploads::save(
        pool,
        &job.owner,
        &filename,
        Some(CSV_TYPE),
        usize::MAX,
        ReceiverStream::new(parts_rx),
    );
    let (saved, converted) = tokio::join!(save, convert);
    let converted = match converted {
        Ok(converted) => converted,
        // calamine panicked on this file: it would on every try.
        Err(err) if err.is_panic() => {
            return Ok(Err(FileError::NotCsv(
                "The workbook could not be read; it may be damaged.".into(),
            )));
        }
        Err(err) => return Err(err.into()),
    };
    let converted = match converted {
        Ok(converted) => converted,
        Err(ScanError::File(reason)) => return Ok(Err(reason)),
        Err(ScanError::Io(err)) => return Err(err.into()),
    };
    let saved = match saved {
        Ok(saved) => saved,
        Err(UploadError::Database(err)) => return Err(err.into()),
        Err(UploadError::Empty) => return Ok(Err(FileError::Empty)),
        Err(other) => return Err(std::io::Error::other(other.to_string()).into()),
    };

    let mut conn = pool.acquire().await?;
    let header_row = converted.header_row;
    if !jobs::set_converted(&mut conn, job_id, saved.id, &converted.sheet, header_row).await? {
        // Another run of this plan converted the sheet first; use that copy.
        uploads::delete(pool, saved.id).await?;
        let job = jobs::import_job(&mut conn, job_id)
            .await?
            .ok_or(sqlx::Error::RowNotFound)?;
        return Ok(Ok(Source {
            upload_id: job.csv_upload_id(),
            header_row: job.header_row.unwrap_or(1),
        }));
    }
    tracing::info!(%job_id, sheet = converted.sheet, bytes = saved.size, "sheet converted to CSV");
    Ok(Ok(Source {
        upload_id: saved.id,
        header_row,
    }))
}
