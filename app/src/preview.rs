//! What the preview of an upload shows (`GET /api/uploads/{id}/preview`): the workbook's sheets,
//! how the file reads (header row, delimiter, encoding), its first rows, and, for a dataset,
//! which of its columns each file column would fill.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::model::{Column, ColumnType};

/// An upload as an import would read it, from its first rows only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct UploadPreview {
    pub upload_id: Uuid,
    pub filename: String,
    /// A workbook's sheets in order (empty for a CSV file).
    pub sheets: Vec<SheetInfo>,
    /// The sheet read: the one asked for, or the one an import picks by default.
    pub sheet: Option<String>,
    /// The CSV delimiter read with (asked for, or found): `,`, `;`, `|` or a tab.
    pub delimiter: Option<String>,
    /// The CSV text encoding read with: `utf-8` or `windows-1252`.
    pub encoding: Option<String>,
    /// The sheet row of the header: the one asked for, or [`Self::detected_header_row`].
    pub header_row: i64,
    /// The header row found by looking past title and blank rows.
    pub detected_header_row: i64,
    /// The column names the header gives (blank ones named `column_N`).
    pub columns: Vec<String>,
    /// The first rows below the header, as text (at most 20, blank rows left out).
    pub rows: Vec<PreviewRow>,
    /// The rows above the header, so a person can see what was skipped (at most 20).
    pub above: Vec<PreviewRow>,
    /// A type that fits every sampled value of each column, for a new dataset.
    pub suggested_types: Vec<ColumnType>,
    /// Why an import as read would fail from the start (a duplicate column name, no rows …).
    pub problem: Option<String>,
    /// How the columns meet the dataset asked about.
    pub dataset: Option<DatasetFit>,
}

/// A sheet of a workbook.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SheetInfo {
    pub name: String,
    /// Hidden from the tabs (it often holds drop-down lists).
    pub hidden: bool,
    /// The rows the sheet says it uses, when it says (XLSX may not; XLS and ODS do).
    pub rows: Option<i64>,
}

/// A row of the file: its number in the sheet (the header's row counts) and its cells.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct PreviewRow {
    pub row: i64,
    pub cells: Vec<String>,
}

/// How a file's columns meet a dataset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct DatasetFit {
    pub name: String,
    /// False: no dataset has this name yet; the import would create it.
    pub exists: bool,
    /// Its columns (empty for a dataset without any yet).
    pub columns: Vec<Column>,
    /// The dataset column suggested for each file column, in file order (`null`: none fits;
    /// ignored unless mapped by hand). Earlier mappings into the dataset come first, then
    /// names equal once case, spaces, punctuation and accents are set aside.
    pub mapping: Vec<Option<String>>,
    /// Required dataset columns no file column fills with the suggested mapping.
    pub missing_required: Vec<String>,
}
