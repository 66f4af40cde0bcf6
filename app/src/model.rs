//! The job types that cross from the server to the browser: the JSON of the API, the SSE events
//! and the SSR'd pages all speak these, so they live here, free of any server-only dependency.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// What a job does. On the server, also the `job_kind` type of PostgreSQL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
#[cfg_attr(
    feature = "ssr",
    derive(sqlx::Type),
    sqlx(type_name = "job_kind", rename_all = "lowercase")
)]
pub enum JobKind {
    Import,
    Export,
    /// A parent of imports and exports, complete when sealed and its children are.
    Batch,
    /// Removes a deleted dataset's rows (its progress counts them).
    Delete,
    /// A job of a registered type (`itemType`): items that external workers claim over HTTP.
    Items,
}

impl JobKind {
    pub const ALL: [Self; 5] = [
        Self::Import,
        Self::Export,
        Self::Batch,
        Self::Delete,
        Self::Items,
    ];

    /// The word in the API and the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Import => "import",
            Self::Export => "export",
            Self::Batch => "batch",
            Self::Delete => "delete",
            Self::Items => "items",
        }
    }
}

/// Where a job is in its life; on the server, also the `job_status` type of PostgreSQL. The
/// state diagram and every transition are in the server's `store::states`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
#[cfg_attr(
    feature = "ssr",
    derive(sqlx::Type),
    sqlx(type_name = "job_status", rename_all = "lowercase")
)]
pub enum JobStatus {
    Waiting,
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl JobStatus {
    pub const ALL: [Self; 5] = [
        Self::Waiting,
        Self::Running,
        Self::Completed,
        Self::Failed,
        Self::Cancelled,
    ];

    /// The word in the API, the database and the job list.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Waiting => "waiting",
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// Whether the job can still change.
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

/// The file an export writes. On the server, also the `export_format` type of PostgreSQL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
#[cfg_attr(
    feature = "ssr",
    derive(sqlx::Type),
    sqlx(type_name = "export_format", rename_all = "lowercase")
)]
pub enum ExportFormat {
    Csv,
    Xlsx,
}

impl ExportFormat {
    /// The word in the API and the file name's extension.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Csv => "csv",
            Self::Xlsx => "xlsx",
        }
    }

    /// Parses the API's word; `None` for anything else.
    pub fn parse(word: &str) -> Option<Self> {
        [Self::Csv, Self::Xlsx]
            .into_iter()
            .find(|format| format.as_str() == word)
    }
}

/// The types a column can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ColumnType {
    Text,
    Integer,
    Decimal,
    Boolean,
    Date,
    Timestamp,
    Email,
}

/// One declared column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct Column {
    pub name: String,
    #[serde(rename = "type", default = "text")]
    pub kind: ColumnType,
    #[serde(default)]
    pub required: bool,
}

fn text() -> ColumnType {
    ColumnType::Text
}

impl ColumnType {
    /// Every type: text, then the others from the narrowest (a whole number fits a decimal).
    pub const ALL: [ColumnType; 7] = [
        Self::Text,
        Self::Integer,
        Self::Decimal,
        Self::Boolean,
        Self::Date,
        Self::Timestamp,
        Self::Email,
    ];

    /// A type from the word the API and pages use.
    pub fn parse(word: &str) -> Option<ColumnType> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == word)
    }

    /// The word the API and pages use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Integer => "integer",
            Self::Decimal => "decimal",
            Self::Boolean => "boolean",
            Self::Date => "date",
            Self::Timestamp => "timestamp",
            Self::Email => "email",
        }
    }
}

impl Column {
    /// An untyped column, as a dataset without a schema gets from a file's header.
    pub fn text(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            kind: ColumnType::Text,
            required: false,
        }
    }
}

/// A dataset as the API returns it and the pages show it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct DatasetView {
    pub name: String,
    pub columns: Vec<Column>,
    /// The column whose value identifies a row.
    pub key: Option<String>,
    pub created_at: DateTime<Utc>,
    /// Whose it is: dataset names are per owner.
    pub owner: Uuid,
    /// The owner's email; `None` for a guest.
    #[serde(default)]
    pub owner_email: Option<String>,
    /// How many rows it holds.
    #[serde(default)]
    pub row_count: i64,
}

/// The most data rows an Excel sheet holds (1,048,576 rows, one of them the header).
pub const MAX_XLSX_ROWS: i64 = 1_048_575;

/// "ada@example.com", or "guest" for someone without an account.
pub fn owner_label(email: Option<&str>) -> String {
    email.unwrap_or("guest").to_owned()
}

/// The page of a dataset: `/datasets/{name}`, with `?owner=` when it is not the reader's own.
pub fn dataset_href(name: &str, owner: Uuid, reader: Option<Uuid>) -> String {
    if reader == Some(owner) {
        format!("/datasets/{name}")
    } else {
        format!("/datasets/{name}?owner={owner}")
    }
}

/// A job as the API returns it and the pages show it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct JobView {
    pub id: Uuid,
    pub job_type: JobKind,
    pub status: JobStatus,
    /// Rows to process; unknown (`None`) until the job has been planned.
    pub item_count: Option<i64>,
    pub item_progress: i64,
    pub rows_ok: i64,
    pub rows_failed: i64,
    /// Of `rows_ok`, rows that replaced a row with the same key.
    pub rows_updated: i64,
    pub chunks_total: i32,
    pub chunks_done: i32,
    /// Bumped on every change; the SSE event id.
    pub version: i64,
    pub error: Option<String>,
    pub filename: Option<String>,
    /// A workbook import's sheet: the one asked for, or, once the import has begun, the one
    /// chosen when none was.
    #[serde(default)]
    pub sheet: Option<String>,
    /// An import's mapping, when it was given one: file column → the dataset column it fills
    /// (`null`: ignored). File columns it leaves out fill the column of their name.
    #[serde(default)]
    pub mapping: Option<std::collections::BTreeMap<String, Option<String>>>,
    /// A dry run (created as `jobType: "validate"`): an import that checks and counts every
    /// row and reports its errors, writing none.
    #[serde(default)]
    pub dry_run: bool,
    /// The import whose error report, fixed, this import reads.
    #[serde(default)]
    pub fixes: Option<Uuid>,
    pub dataset: Option<String>,
    /// Its dataset has been deleted since (an import or export of it is not retried).
    #[serde(default)]
    pub dataset_deleted: bool,
    /// A job of a registered type: the type's name.
    #[serde(default)]
    pub item_type: Option<String>,
    /// No more items (or chunks, or children) will be added.
    #[serde(default)]
    pub sealed: bool,
    /// An export's file format.
    pub format: Option<ExportFormat>,
    /// Where a finished export's file is downloaded.
    pub result_url: Option<String>,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// Seconds from start to finish, or to the moment this state was read while running.
    pub elapsed_seconds: Option<f64>,
    /// Parts that ran out of attempts (the first 100), with their last error.
    #[serde(default)]
    pub failed_parts: Vec<FailedPart>,
    /// The batch this job belongs to, or (for a follow-up job of a registered type's chain)
    /// the job whose results fill it.
    #[serde(default)]
    pub parent_id: Option<Uuid>,
    /// Who created it (and owns its dataset).
    pub owner: Uuid,
    /// The owner's email; `None` for a guest.
    #[serde(default)]
    pub owner_email: Option<String>,
    /// Where the job's final state is POSTed once it ends, and how that went.
    #[serde(default)]
    pub callback: Option<CallbackView>,
    /// For a failure that would fail the same way again: what fixes it (offered instead of
    /// Retry, which is refused).
    #[serde(default)]
    pub remedy: Option<Remedy>,
}

/// What fixes a failure that another attempt would repeat.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Remedy {
    /// The workbook has no sheet of the name asked for: import one of its sheets (the same
    /// upload, `file_guid`) instead.
    #[serde(rename_all = "camelCase")]
    OtherSheet {
        sheets: Vec<String>,
        file_guid: Uuid,
    },
    /// The dataset has more rows than an Excel sheet holds: export it as CSV.
    ExportCsv,
}

impl Remedy {
    /// The action that fixes it, as its button says.
    pub fn action(&self) -> &'static str {
        match self {
            Self::OtherSheet { .. } => "Choose another sheet",
            Self::ExportCsv => "Export as CSV",
        }
    }
}

/// A job's completion callback.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct CallbackView {
    pub url: String,
    pub state: CallbackState,
    /// When the next try is due, while it is being sent.
    #[serde(default)]
    pub next_at: Option<DateTime<Utc>>,
    /// The latest tries, oldest first.
    #[serde(default)]
    pub tries: Vec<CallbackTry>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub enum CallbackState {
    /// The job has not ended yet.
    Waiting,
    /// Being tried until a 2xx answer.
    Sending,
    /// A 2xx answer came.
    Delivered,
    /// No 2xx answer came before the retry horizon passed.
    GaveUp,
}

impl CallbackView {
    /// Whether more tries may come.
    pub fn is_pending(&self) -> bool {
        matches!(self.state, CallbackState::Waiting | CallbackState::Sending)
    }

    /// One sentence on how sending the job's final state to its callback goes.
    pub fn summary(&self) -> String {
        let url = &self.url;
        // The tries shown are the latest: the last one's number is how many there were.
        let attempts = self.tries.last().map_or(0, |last| last.attempt);
        let tries = count_of(i64::from(attempts), "attempt");
        match self.state {
            CallbackState::Waiting => {
                format!("When the job ends, its final state is sent to {url}.")
            }
            CallbackState::Sending => match self.next_at.filter(|_| attempts > 0) {
                Some(at) => format!(
                    "Sending the final state to {url}: not delivered yet ({tries}); next try at \
                     {} UTC.",
                    at.format("%H:%M:%S")
                ),
                None => format!("Sending the final state to {url}."),
            },
            CallbackState::Delivered => {
                format!("The final state was delivered to {url} ({tries}).")
            }
            CallbackState::GaveUp => format!(
                "The final state could not be delivered to {url} ({tries}); it is no longer tried."
            ),
        }
    }
}

impl CallbackTry {
    /// `Try 2 at 2026-11-22 12:00:03 UTC: answered 503 Service Unavailable`.
    pub fn line(&self) -> String {
        let outcome = match (&self.error, self.status) {
            (Some(error), _) => error.clone(),
            (None, Some(status)) => format!("delivered (answered {status})"),
            (None, None) => "delivered".to_owned(),
        };
        format!(
            "Try {} at {} UTC: {outcome}",
            self.attempt,
            self.at.format("%Y-%m-%d %H:%M:%S")
        )
    }
}

/// One try of a callback.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct CallbackTry {
    pub attempt: i32,
    pub at: DateTime<Utc>,
    /// The HTTP status answered; `None` when no answer came.
    pub status: Option<u16>,
    pub error: Option<String>,
}

/// A chunk of a job that failed every attempt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct FailedPart {
    /// 1-based, as people count.
    pub part: i32,
    /// The data rows it holds (1 = the first row after the header).
    pub first_row: i64,
    pub row_count: i32,
    pub attempts: i32,
    pub error: Option<String>,
}

impl JobView {
    /// Whether a page should keep following the job: it has not ended, or it has and its
    /// callback's first try is still to come (later tries may be hours apart: a reload shows
    /// them).
    pub fn may_change(&self) -> bool {
        !self.status.is_finished()
            || self
                .callback
                .as_ref()
                .is_some_and(|callback| callback.is_pending() && callback.tries.is_empty())
    }

    /// "Import of people.csv", "Export of people as XLSX".
    pub fn title(&self) -> String {
        match self.job_type {
            JobKind::Import => format!(
                "{} of {}",
                if self.dry_run { "Dry run" } else { "Import" },
                self.filename.as_deref().unwrap_or("a file")
            ),
            JobKind::Batch => "Batch of jobs".to_owned(),
            JobKind::Delete => format!(
                "Deletion of {}",
                self.dataset.as_deref().unwrap_or("a dataset")
            ),
            JobKind::Items => format!("{} job", self.item_type.as_deref().unwrap_or("A")),
            JobKind::Export => format!(
                "Export of {} as {}",
                self.dataset.as_deref().unwrap_or("a dataset"),
                self.format
                    .unwrap_or(ExportFormat::Csv)
                    .as_str()
                    .to_uppercase()
            ),
        }
    }

    /// The browser tab's title: "Import of x.csv — 42%" while running, else its state.
    pub fn page_title(&self) -> String {
        let state = match self.status {
            JobStatus::Running => format!("{}%", self.percent()),
            JobStatus::Completed if self.rows_failed > 0 => "completed with errors".to_owned(),
            status => status.as_str().to_owned(),
        };
        title_text(&format!("{} — {state} — Conveyor", self.title()))
    }

    /// What a job did with rows, so far: "1,170 added, 30 replaced" (a dry run: "35 rows ok,
    /// 3 would replace existing rows"; a deletion: "1,200 rows deleted"); `None` for other jobs and
    /// before any row. Rows in error are counted apart.
    pub fn written_line(&self) -> Option<String> {
        if self.rows_ok == 0 {
            return None;
        }
        let (added, replaced) = match self.job_type {
            JobKind::Delete => return Some(format!("{} deleted", count_of(self.rows_ok, "row"))),
            JobKind::Import if self.dry_run => (
                format!("{} ok", count_of(self.rows_ok, "row")),
                self.would_replace(),
            ),
            JobKind::Import => (
                format!("{} added", thousands(self.rows_ok - self.rows_updated)),
                format!("{} replaced", thousands(self.rows_updated)),
            ),
            JobKind::Export | JobKind::Batch | JobKind::Items => return None,
        };
        Some(if self.rows_updated > 0 {
            format!("{added}, {replaced}")
        } else {
            added
        })
    }

    /// "12 would replace existing rows": a dry run's rows whose key the dataset holds.
    fn would_replace(&self) -> String {
        match self.rows_updated {
            1 => "1 would replace an existing row".to_owned(),
            n => format!("{} would replace existing rows", thousands(n)),
        }
    }

    /// Rows processed per second so far; `None` before any row is done.
    pub fn rows_per_second(&self) -> Option<f64> {
        let elapsed = self.elapsed_seconds.filter(|s| *s > 0.0)?;
        (self.item_progress > 0).then(|| self.item_progress as f64 / elapsed)
    }

    /// Seconds left at the speed so far, while running.
    pub fn eta_seconds(&self) -> Option<f64> {
        let rate = self.rows_per_second()?;
        let left = self.item_count? - self.item_progress;
        (self.status == JobStatus::Running && left >= 0).then(|| left as f64 / rate)
    }

    /// "12,345 rows/s, about 8 s left" while running; "Took 8.1 s (12,345 rows/s)" when done.
    pub fn speed_line(&self) -> Option<String> {
        let rate = thousands(self.rows_per_second()?.round() as i64);
        match self.status {
            JobStatus::Running => Some(match self.eta_seconds() {
                Some(eta) => format!("{rate} rows/s, about {} left", duration(eta)),
                None => format!("{rate} rows/s"),
            }),
            JobStatus::Completed => Some(format!(
                "Took {} ({rate} rows/s)",
                duration(self.elapsed_seconds?)
            )),
            _ => None,
        }
    }
    /// Whole percent done, 0–100; at most 99 while running (a streamed sheet's count is what
    /// the sheet declares until it has been read, and may be short).
    pub fn percent(&self) -> i64 {
        let most = if self.status == JobStatus::Running {
            99
        } else {
            100
        };
        match self.item_count {
            Some(count) if count > 0 => (self.item_progress * 100 / count).clamp(0, most),
            Some(_) if self.status == JobStatus::Completed => 100,
            _ => 0,
        }
    }

    /// The one-line message the job page shows: the seed's texts, except that a job that
    /// completed with row errors says how many (and when no row went in).
    pub fn message(&self) -> String {
        match self.status {
            JobStatus::Waiting => "Waiting for job to start...".to_owned(),
            JobStatus::Running => format!("Job running, {}% complete...", self.percent()),
            JobStatus::Completed if self.dry_run => format!(
                "Dry run complete: {} ok{}, {} with errors; nothing was written",
                count_of(self.rows_ok, "row"),
                if self.rows_updated > 0 {
                    format!(" ({})", self.would_replace())
                } else {
                    String::new()
                },
                thousands(self.rows_failed)
            ),
            JobStatus::Completed if self.rows_failed > 0 && self.rows_ok == 0 => format!(
                "Completed with {}: no rows were imported",
                count_of(self.rows_failed, "error")
            ),
            JobStatus::Completed if self.rows_failed > 0 => {
                format!("Completed with {}", count_of(self.rows_failed, "error"))
            }
            JobStatus::Completed => "Job complete".to_owned(),
            JobStatus::Failed => match &self.error {
                Some(reason) => format!("Job failed: {reason}"),
                None => "Job failed".to_owned(),
            },
            JobStatus::Cancelled => "Job cancelled".to_owned(),
        }
    }

    /// "x of y rows", with thousands separators; "x rows so far" while the row count is
    /// unknown (a workbook's sheet is imported as it is read); `None` before any row.
    /// A job of a registered type: "x of y items", "… so far" until it is sealed.
    pub fn rows_line(&self) -> Option<String> {
        if self.job_type == JobKind::Items {
            return Some(format!(
                "{} of {} items{}",
                thousands(self.item_progress),
                thousands(self.item_count.unwrap_or(0)),
                if self.sealed { "" } else { " so far" }
            ));
        }
        match self.item_count {
            Some(count) => Some(format!(
                "{} of {} rows",
                thousands(self.item_progress),
                thousands(count)
            )),
            None if self.item_progress > 0 => {
                Some(format!("{} rows so far", thousands(self.item_progress)))
            }
            None => None,
        }
    }
}

/// "0.4 s", "42 s", "3 min 20 s", "2 h 5 min".
pub fn duration(seconds: f64) -> String {
    let whole = seconds.round() as i64;
    match whole {
        _ if seconds < 10.0 => format!("{seconds:.1} s"),
        0..60 => format!("{whole} s"),
        60..3600 => format!("{} min {} s", whole / 60, whole % 60),
        _ => format!("{} h {} min", whole / 3600, whole % 3600 / 60),
    }
}

/// "1 row", "2,500 rows".
pub fn count_of(n: i64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{} {noun}s", thousands(n))
    }
}

/// Text for a page's `<title>`: leptos_meta writes it into the server's HTML unescaped. A file
/// name cannot hold the `/` of a `</title>` (uploads keep the last path component), but a
/// title must not depend on that: `<` is shown as `‹`.
pub fn title_text(text: &str) -> String {
    text.replace('<', "‹")
}

/// Formats 1234567 as "1,234,567".
pub fn thousands(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if n < 0 {
        out.push('-');
    }
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(status: JobStatus, count: Option<i64>, progress: i64) -> JobView {
        JobView {
            id: Uuid::nil(),
            job_type: JobKind::Import,
            status,
            item_count: count,
            item_progress: progress,
            rows_ok: progress,
            rows_failed: 0,
            rows_updated: 0,
            chunks_total: 0,
            chunks_done: 0,
            dataset_deleted: false,
            item_type: None,
            sealed: false,
            version: 1,
            error: None,
            filename: None,
            sheet: None,
            mapping: None,
            dry_run: false,
            fixes: None,
            dataset: None,
            format: None,
            result_url: None,
            created_at: DateTime::<Utc>::MIN_UTC,
            started_at: None,
            finished_at: None,
            elapsed_seconds: None,
            failed_parts: Vec::new(),
            parent_id: None,
            owner: Uuid::nil(),
            owner_email: None,
            callback: None,
            remedy: None,
        }
    }

    #[test]
    fn an_import_says_what_it_did_with_its_rows() {
        assert_eq!(job(JobStatus::Waiting, None, 0).written_line(), None);
        let mut done = job(JobStatus::Completed, Some(40), 40);
        assert_eq!(done.written_line().as_deref(), Some("40 added"));
        (done.rows_ok, done.rows_updated, done.rows_failed) = (1200, 30, 5);
        assert_eq!(
            done.written_line().as_deref(),
            Some("1,170 added, 30 replaced")
        );
        done.dry_run = true;
        assert_eq!(
            done.written_line().as_deref(),
            Some("1,200 rows ok, 30 would replace existing rows")
        );
        done.rows_updated = 0;
        assert_eq!(done.written_line().as_deref(), Some("1,200 rows ok"));
        done.job_type = JobKind::Delete;
        assert_eq!(done.written_line().as_deref(), Some("1,200 rows deleted"));
        done.job_type = JobKind::Import;
        assert_eq!(
            done.page_title(),
            "Dry run of a file — completed with errors — Conveyor"
        );
    }

    #[test]
    fn messages_are_the_seed_texts() {
        assert_eq!(
            job(JobStatus::Waiting, None, 0).message(),
            "Waiting for job to start..."
        );
        assert_eq!(
            job(JobStatus::Running, Some(200), 50).message(),
            "Job running, 25% complete..."
        );
        assert_eq!(
            job(JobStatus::Completed, Some(200), 200).message(),
            "Job complete"
        );
        let mut with_errors = job(JobStatus::Completed, Some(3_000), 3_000);
        with_errors.rows_ok = 2_963;
        with_errors.rows_failed = 37;
        assert_eq!(with_errors.message(), "Completed with 37 errors");
        with_errors.rows_ok = 0;
        with_errors.rows_failed = 3_000;
        assert_eq!(
            with_errors.message(),
            "Completed with 3,000 errors: no rows were imported"
        );
    }

    #[test]
    fn percent_handles_unknown_and_empty_counts() {
        assert_eq!(job(JobStatus::Running, None, 0).percent(), 0);
        assert_eq!(job(JobStatus::Running, Some(3), 2).percent(), 66);
        assert_eq!(job(JobStatus::Completed, Some(0), 0).percent(), 100);
        // A declared count that was short: never 100% before the end.
        assert_eq!(job(JobStatus::Running, Some(100), 120).percent(), 99);
        assert_eq!(job(JobStatus::Completed, Some(120), 120).percent(), 100);
    }

    #[test]
    fn rows_so_far_while_the_count_is_unknown() {
        assert_eq!(job(JobStatus::Running, None, 0).rows_line(), None);
        assert_eq!(
            job(JobStatus::Running, None, 12345).rows_line().as_deref(),
            Some("12,345 rows so far")
        );
        assert_eq!(
            job(JobStatus::Running, Some(20000), 12345)
                .rows_line()
                .as_deref(),
            Some("12,345 of 20,000 rows")
        );
    }

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(thousands(-4500), "-4,500");
        assert_eq!(count_of(1, "row"), "1 row");
        assert_eq!(count_of(2500, "row"), "2,500 rows");
        assert_eq!(
            job(JobStatus::Running, Some(30000), 1500)
                .rows_line()
                .unwrap(),
            "1,500 of 30,000 rows"
        );
    }

    #[test]
    fn speed_and_eta_come_from_progress_over_time() {
        let mut running = job(JobStatus::Running, Some(10_000), 2_500);
        assert_eq!(running.speed_line(), None);
        running.elapsed_seconds = Some(2.0);
        assert_eq!(running.rows_per_second(), Some(1250.0));
        assert_eq!(running.eta_seconds(), Some(6.0));
        assert_eq!(
            running.speed_line().unwrap(),
            "1,250 rows/s, about 6.0 s left"
        );
        let mut done = job(JobStatus::Completed, Some(10_000), 10_000);
        done.elapsed_seconds = Some(125.0);
        assert_eq!(done.speed_line().unwrap(), "Took 2 min 5 s (80 rows/s)");
        assert_eq!(duration(0.42), "0.4 s");
        assert_eq!(duration(7300.0), "2 h 1 min");
    }

    #[test]
    fn a_callback_says_where_it_goes_and_how_each_try_went() {
        let at = "2026-11-22T12:00:03Z".parse().unwrap();
        let try_ = |attempt, status, error: Option<&str>| CallbackTry {
            attempt,
            at,
            status,
            error: error.map(str::to_owned),
        };
        let mut callback = CallbackView {
            url: "https://hooks.example.com/done".into(),
            state: CallbackState::Sending,
            next_at: Some(at),
            tries: vec![try_(1, Some(503), Some("answered 503 Service Unavailable"))],
        };
        assert_eq!(
            callback.summary(),
            "Sending the final state to https://hooks.example.com/done: not delivered yet \
             (1 attempt); next try at 12:00:03 UTC."
        );
        assert_eq!(
            callback.tries[0].line(),
            "Try 1 at 2026-11-22 12:00:03 UTC: answered 503 Service Unavailable"
        );
        callback.tries.push(try_(2, Some(200), None));
        callback.state = CallbackState::Delivered;
        assert_eq!(
            callback.summary(),
            "The final state was delivered to https://hooks.example.com/done (2 attempts)."
        );
        assert_eq!(
            callback.tries[1].line(),
            "Try 2 at 2026-11-22 12:00:03 UTC: delivered (answered 200)"
        );
        assert!(!callback.is_pending());
    }
}
