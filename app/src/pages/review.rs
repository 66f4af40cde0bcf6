//! `/uploads/{id}`: the review between upload and import. It shows what the server read from the
//! start of the file (`GET /api/uploads/{id}/preview`): a workbook's sheets, the header row
//! (found past title rows), a CSV's delimiter and encoding, the first rows. The person picks the
//! dataset (one of theirs, or a new one, with a type for each column), sees which dataset column
//! each file column fills (suggested; changeable; required columns left empty are named before
//! anything runs), and starts a dry run or the import. `?fixes=<job>` carries a fixed error
//! report's link to the import it fixes; `?dataset=<name>` picks the dataset.

use std::collections::BTreeMap;

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_navigate, use_params_map, use_query_map};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::{
    api,
    data::list_datasets,
    model::{Column, ColumnType, DatasetView, title_text},
    preview::UploadPreview,
    session::use_session,
};

/// How the person asks the file to be read (each `None`: as found).
#[derive(Clone, Debug, Default, PartialEq)]
struct Reading {
    sheet: Option<String>,
    header_row: Option<i64>,
    delimiter: Option<String>,
    encoding: Option<String>,
}

impl Reading {
    /// The preview's query string, asking about `dataset`.
    fn query(&self, dataset: Option<&str>) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        if let Some(sheet) = &self.sheet {
            query.append_pair("sheet", sheet);
        }
        if let Some(row) = self.header_row {
            query.append_pair("headerRow", &row.to_string());
        }
        if let Some(delimiter) = &self.delimiter {
            query.append_pair("delimiter", delimiter);
        }
        if let Some(encoding) = &self.encoding {
            query.append_pair("encoding", encoding);
        }
        if let Some(dataset) = dataset {
            query.append_pair("dataset", dataset);
        }
        query.finish()
    }
}

/// The dataset the rows go to.
#[derive(Clone, Debug, PartialEq)]
enum Target {
    /// Not chosen yet.
    Unchosen,
    /// One of the person's datasets.
    Existing(DatasetView),
    /// A new one, made with the columns chosen here when the import starts.
    New(String),
}

/// A column of a new dataset, from a file column.
#[derive(Clone, Debug, PartialEq)]
struct NewColumn {
    include: bool,
    name: String,
    kind: ColumnType,
}

/// What the page sends: a dry run or the import.
#[derive(Clone, Copy, PartialEq)]
enum Run {
    DryRun,
    Import,
}

#[component]
pub fn ReviewPage() -> impl IntoView {
    let params = use_params_map();
    let query = use_query_map();
    let Some(upload) =
        params.with_untracked(|p| p.get("id").and_then(|id| id.parse::<Uuid>().ok()))
    else {
        return view! { <crate::pages::NotFound /> }.into_any();
    };
    let fixes = query.with_untracked(|q| q.get("fixes").and_then(|id| id.parse::<Uuid>().ok()));
    let asked_dataset = query.with_untracked(|q| q.get("dataset"));
    let session = use_session();

    let reading = RwSignal::new(Reading::default());
    let target = RwSignal::new(Target::Unchosen);
    let mapping = RwSignal::new(Vec::<Option<String>>::new());
    let new_columns = RwSignal::new(Vec::<NewColumn>::new());
    let busy = RwSignal::new(false);
    let error = RwSignal::new(None::<String>);

    let datasets = Resource::new(|| (), |_| list_datasets());
    // The caller's own datasets, to pick from.
    let own = move || {
        let me = session.me().map(|me| me.id);
        datasets
            .get()
            .and_then(Result::ok)
            .unwrap_or_default()
            .into_iter()
            .filter(|d| Some(d.owner) == me)
            .collect::<Vec<_>>()
    };
    // The dataset named in the address, once the list is known.
    Effect::new(move |_| {
        if let Some(name) = &asked_dataset
            && target.with_untracked(|t| *t == Target::Unchosen)
            && let Some(found) = own().into_iter().find(|d| &d.name == name)
        {
            target.set(Target::Existing(found));
        }
    });

    // The preview is read again only when the reading or the existing dataset changes (not
    // as a new dataset's name is typed).
    let asked = Memo::new(move |_| match target.get() {
        Target::Existing(dataset) => Some(dataset.name),
        _ => None,
    });
    let preview = LocalResource::new(move || {
        let path = format!(
            "/api/uploads/{upload}/preview?{}",
            reading.get().query(asked.get().as_deref())
        );
        async move {
            let answer = api::call("GET", &path, None).await?;
            serde_json::from_value::<UploadPreview>(answer).map_err(|e| e.to_string())
        }
    });
    // Each new reading starts from its suggestions.
    Effect::new(move |_| {
        if let Some(Ok(seen)) = preview.get() {
            mapping.set(match &seen.dataset {
                Some(fit) => fit.mapping.clone(),
                None => seen.columns.iter().cloned().map(Some).collect(),
            });
            new_columns.set(
                seen.columns
                    .iter()
                    .zip(&seen.suggested_types)
                    .map(|(name, kind)| NewColumn {
                        include: true,
                        name: name.clone(),
                        kind: *kind,
                    })
                    .collect(),
            );
        }
    });

    let navigate = use_navigate();
    let start = move |run: Run| {
        let Some(Ok(seen)) = preview.get_untracked() else {
            return;
        };
        let target = target.get_untracked();
        let reading = reading.get_untracked();
        let chosen = mapping.get_untracked();
        let columns = new_columns.get_untracked();
        let navigate = navigate.clone();
        busy.set(true);
        error.set(None);
        leptos::task::spawn_local(async move {
            let started = start_job(
                run, upload, fixes, &seen, &target, &reading, &chosen, &columns,
            )
            .await;
            match started {
                Ok(job) => navigate(&format!("/jobs/{job}"), Default::default()),
                Err(message) => {
                    error.set(Some(message));
                    busy.set(false);
                }
            }
        });
    };
    let start_dry = start.clone();

    view! {
        // The title outlives the page by a moment when it is left: read what is still there.
        <Title text=move || match preview.try_get().flatten() {
            Some(Ok(seen)) => title_text(&format!("Review the import of {} — Conveyor", seen.filename)),
            _ => "Review the import — Conveyor".to_owned(),
        } />
        <section class="card review">
            <h1>"Review the import"</h1>
            {fixes.map(|job| view! {
                <p class="muted" data-testid="fixes-notice">
                    "This file fixes the errors of "
                    <a href=format!("/jobs/{job}")>"an earlier import"</a>
                    ": its _row and _error columns are ignored."
                </p>
            })}
            <Transition fallback=|| view! { <p class="muted" role="status">"Reading the file..."</p> }>
                {move || Suspend::new(async move {
                    match preview.await {
                        Ok(seen) => view! {
                            <ReadingControls seen=seen.clone() reading />
                            <SampleTable seen=seen.clone() />
                        }.into_any(),
                        Err(message) => view! {
                            <p class="error" role="alert">"The file cannot be read: " {message}</p>
                        }.into_any(),
                    }
                })}
            </Transition>
            // The list is the server's: read inside a transition, as SSR sent it.
            <Transition fallback=|| ()>
                <DatasetPicker own=Signal::derive(own) target />
            </Transition>
            <Transition fallback=|| ()>
                {move || Suspend::new(async move {
                    let seen = preview.await.ok()?;
                    Some(view! { <MappingTable seen target mapping new_columns /> })
                })}
            </Transition>
            <div class="actions">
                <button
                    data-testid="dry-run-button"
                    class="secondary"
                    disabled=move || busy.get() || !ready(&preview, &target, &mapping, &new_columns)
                    on:click=move |_| start_dry(Run::DryRun)
                >
                    "Dry run"
                </button>
                <button
                    data-testid="import-button"
                    disabled=move || busy.get() || !ready(&preview, &target, &mapping, &new_columns)
                    on:click=move |_| start(Run::Import)
                >
                    {move || if busy.get() { "Starting..." } else { "Import" }}
                </button>
            </div>
            <p class="muted">"A dry run checks every row against the dataset's columns and reports the errors, writing nothing."</p>
            {move || error.get().map(|message| view! { <p class="error" role="alert">{message}</p> })}
        </section>
    }
    .into_any()
}

/// Whether the import can start: the file reads, a dataset is chosen, no required column is
/// left empty, and something is imported.
fn ready(
    preview: &LocalResource<Result<UploadPreview, String>>,
    target: &RwSignal<Target>,
    mapping: &RwSignal<Vec<Option<String>>>,
    new_columns: &RwSignal<Vec<NewColumn>>,
) -> bool {
    let Some(Ok(seen)) = preview.get() else {
        return false;
    };
    if seen.problem.is_some() {
        return false;
    }
    match target.get() {
        Target::Unchosen => false,
        Target::New(name) => {
            valid_name(&name)
                && new_columns.with(|c| c.iter().any(|c| c.include && !c.name.trim().is_empty()))
        }
        // The mapping shown must be the one read for this dataset (not the last one's).
        Target::Existing(dataset) => {
            seen.dataset
                .as_ref()
                .is_some_and(|fit| fit.name == dataset.name)
                && mapping.with(|m| {
                    missing_required(&dataset.columns, m).is_empty()
                        && m.iter().any(Option::is_some)
                })
        }
    }
}

/// A dataset name the server takes: 1–64 letters, digits, `-` or `_`.
fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The required columns no file column fills.
fn missing_required(columns: &[Column], mapping: &[Option<String>]) -> Vec<String> {
    columns
        .iter()
        .filter(|c| c.required && !mapping.contains(&Some(c.name.clone())))
        .map(|c| c.name.clone())
        .collect()
}

/// The sheet, header row, delimiter and encoding, as read; each can be changed.
#[component]
fn ReadingControls(seen: UploadPreview, reading: RwSignal<Reading>) -> impl IntoView {
    let sheets = seen.sheets.clone();
    let chosen_sheet = seen.sheet.clone().unwrap_or_default();
    let is_csv = seen.delimiter.is_some();
    let delimiter = seen.delimiter.clone().unwrap_or_default();
    let encoding = seen.encoding.clone().unwrap_or_default();
    view! {
        <div class="reading" data-testid="reading">
            <p>
                <strong>{seen.filename.clone()}</strong>
                {seen.problem.clone().map(|problem| view! {
                    <span class="error" role="alert" data-testid="preview-problem">" " {problem}</span>
                })}
            </p>
            {(!sheets.is_empty()).then(|| view! {
                <label class="field">
                    "Sheet"
                    <select
                        data-testid="sheet-select"
                        on:change=move |ev| {
                            let name = event_target_value(&ev);
                            reading.update(|r| {
                                r.sheet = Some(name);
                                r.header_row = None;
                            });
                        }
                    >
                        {sheets.into_iter().map(|sheet| {
                            let selected = sheet.name == chosen_sheet;
                            let size = sheet.rows.map(|rows| format!(" ({rows} rows)")).unwrap_or_default();
                            let hidden = if sheet.hidden { " (hidden)" } else { "" };
                            let label = format!("{}{size}{hidden}", sheet.name);
                            view! { <option value=sheet.name selected=selected>{label}</option> }
                        }).collect_view()}
                    </select>
                </label>
            })}
            <label class="field">
                "Header row"
                <input
                    type="number"
                    min="1"
                    max="1000"
                    data-testid="header-row-input"
                    prop:value=seen.header_row.to_string()
                    on:change=move |ev| {
                        let row = event_target_value(&ev).parse::<i64>().ok().filter(|r| (1..=1000).contains(r));
                        reading.update(|r| r.header_row = row);
                    }
                />
            </label>
            {(seen.header_row != seen.detected_header_row).then(|| view! {
                <p class="muted">{format!("The header was found on row {}.", seen.detected_header_row)}</p>
            })}
            {is_csv.then(|| view! {
                <label class="field">
                    "Delimiter"
                    <select
                        data-testid="delimiter-select"
                        on:change=move |ev| {
                            let chosen = event_target_value(&ev);
                            reading.update(|r| r.delimiter = Some(chosen));
                        }
                    >
                        {[(",", "Comma ,"), (";", "Semicolon ;"), ("\t", "Tab"), ("|", "Bar |")]
                            .into_iter()
                            .map(|(value, label)| view! {
                                <option value=value selected=value == delimiter>{label}</option>
                            })
                            .collect_view()}
                    </select>
                </label>
                <label class="field">
                    "Encoding"
                    <select
                        data-testid="encoding-select"
                        on:change=move |ev| {
                            let chosen = event_target_value(&ev);
                            reading.update(|r| r.encoding = Some(chosen));
                        }
                    >
                        {[("utf-8", "UTF-8"), ("windows-1252", "Windows-1252 (Latin-1)")]
                            .into_iter()
                            .map(|(value, label)| view! {
                                <option value=value selected=value == encoding>{label}</option>
                            })
                            .collect_view()}
                    </select>
                </label>
            })}
        </div>
    }
}

/// The header and the first rows below it.
#[component]
fn SampleTable(seen: UploadPreview) -> impl IntoView {
    let shown = seen.rows.len();
    view! {
        // It scrolls: a keyboard must reach it.
        <div class="sample" tabindex="0" role="region" aria-label="The file's first rows">
            <table class="jobs" data-testid="sample-table">
                <caption class="muted">{format!("The first {shown} rows below the header (row {})", seen.header_row)}</caption>
                <thead>
                    <tr>
                        <th>"Row"</th>
                        {seen.columns.iter().map(|name| view! { <th>{name.clone()}</th> }).collect_view()}
                    </tr>
                </thead>
                <tbody>
                    {seen.rows.into_iter().map(|row| view! {
                        <tr>
                            <td class="muted">{row.row}</td>
                            {row.cells.into_iter().map(|cell| view! { <td>{cell}</td> }).collect_view()}
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        </div>
    }
}

/// Choose one of the person's datasets, or name a new one.
#[component]
fn DatasetPicker(own: Signal<Vec<DatasetView>>, target: RwSignal<Target>) -> impl IntoView {
    // Not a dataset name (those are letters, digits, `-` and `_`).
    const NEW: &str = "+new";
    let choice = move || match target.get() {
        Target::Unchosen => String::new(),
        Target::Existing(dataset) => dataset.name,
        Target::New(_) => NEW.to_owned(),
    };
    view! {
        <label class="field">
            "Dataset"
            <select
                data-testid="dataset-select"
                prop:value=choice
                on:change=move |ev| {
                    let picked = event_target_value(&ev);
                    target.set(match picked.as_str() {
                        "" => Target::Unchosen,
                        NEW => Target::New(String::new()),
                        name => own.get_untracked().into_iter().find(|d| d.name == name).map_or(Target::Unchosen, Target::Existing),
                    });
                }
            >
                <option value="">"Choose a dataset..."</option>
                {move || own.get().into_iter().map(|dataset| {
                    let label = format!("{} ({} columns)", dataset.name, dataset.columns.len());
                    view! { <option value=dataset.name.clone()>{label}</option> }
                }).collect_view()}
                <option value=NEW>"New dataset..."</option>
            </select>
        </label>
        {move || matches!(target.get(), Target::New(_)).then(|| view! {
            <label class="field">
                "New dataset's name"
                <input
                    type="text"
                    data-testid="new-dataset-input"
                    placeholder="e.g. contacts"
                    on:input=move |ev| target.set(Target::New(event_target_value(&ev)))
                />
            </label>
        })}
    }
}

/// For each file column: the dataset column it fills (or ignored); for a new dataset, its name
/// and type.
#[component]
fn MappingTable(
    seen: UploadPreview,
    target: RwSignal<Target>,
    mapping: RwSignal<Vec<Option<String>>>,
    new_columns: RwSignal<Vec<NewColumn>>,
) -> impl IntoView {
    let columns = seen.columns.clone();
    let samples = move |i: usize| -> String {
        seen.rows
            .iter()
            .filter_map(|row| row.cells.get(i))
            .filter(|cell| !cell.is_empty())
            .take(3)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    };
    let samples: Vec<String> = (0..columns.len()).map(samples).collect();
    move || {
        match target.get() {
        Target::Unchosen => view! {
            <p class="muted">"Choose the dataset to see where each column goes."</p>
        }
        .into_any(),
        Target::Existing(dataset) => {
            let missing = {
                let dataset = dataset.clone();
                move || mapping.with(|m| missing_required(&dataset.columns, m))
            };
            view! {
                <table class="jobs mapping" data-testid="mapping-table">
                    <caption class="muted">"Where each column of the file goes"</caption>
                    <thead><tr><th>"File column"</th><th>"Values"</th><th>"Dataset column"</th></tr></thead>
                    <tbody>
                        {columns.iter().enumerate().map(|(i, name)| {
                            let options = dataset.columns.clone();
                            let label = format!("Dataset column for {name}");
                            view! {
                                <tr data-testid="mapping-row">
                                    <td>{name.clone()}</td>
                                    <td class="muted">{samples[i].clone()}</td>
                                    <td>
                                        <select
                                            aria-label=label
                                            data-testid=format!("map-{name}")
                                            prop:value=move || mapping.with(|m| m.get(i).cloned().flatten().unwrap_or_default())
                                            on:change=move |ev| {
                                                let picked = event_target_value(&ev);
                                                mapping.update(|m| if let Some(slot) = m.get_mut(i) {
                                                    *slot = (!picked.is_empty()).then_some(picked);
                                                });
                                            }
                                        >
                                            <option value="">"(ignore)"</option>
                                            {options.into_iter().map(|column| {
                                                let required = if column.required { ", required" } else { "" };
                                                let label = format!("{} ({}{required})", column.name, column.kind.as_str());
                                                view! { <option value=column.name.clone()>{label}</option> }
                                            }).collect_view()}
                                        </select>
                                    </td>
                                </tr>
                            }
                        }).collect_view()}
                    </tbody>
                </table>
                {move || {
                    let missing = missing();
                    (!missing.is_empty()).then(|| view! {
                        <p class="error" role="alert" data-testid="missing-required">
                            "Required columns no file column fills: " {missing.join(", ")}
                        </p>
                    })
                }}
            }
            .into_any()
        }
        Target::New(_) => view! {
            <table class="jobs mapping" data-testid="mapping-table">
                <caption class="muted">"The new dataset's columns, from the file's"</caption>
                <thead><tr><th>"Import"</th><th>"File column"</th><th>"Values"</th><th>"Name"</th><th>"Type"</th></tr></thead>
                <tbody>
                    {columns.iter().enumerate().map(|(i, name)| {
                        let current = move || new_columns.with(|c| c.get(i).cloned());
                        view! {
                            <tr data-testid="mapping-row">
                                <td>
                                    <input
                                        type="checkbox"
                                        aria-label=format!("Import {name}")
                                        prop:checked=move || current().is_some_and(|c| c.include)
                                        on:change=move |ev| {
                                            let on = event_target_checked(&ev);
                                            new_columns.update(|c| if let Some(col) = c.get_mut(i) { col.include = on });
                                        }
                                    />
                                </td>
                                <td>{name.clone()}</td>
                                <td class="muted">{samples[i].clone()}</td>
                                <td>
                                    <input
                                        type="text"
                                        aria-label=format!("Name for {name}")
                                        prop:value=move || current().map(|c| c.name).unwrap_or_default()
                                        on:input=move |ev| {
                                            let typed = event_target_value(&ev);
                                            new_columns.update(|c| if let Some(col) = c.get_mut(i) { col.name = typed });
                                        }
                                    />
                                </td>
                                <td>
                                    <select
                                        aria-label=format!("Type of {name}")
                                        data-testid=format!("type-{name}")
                                        prop:value=move || current().map(|c| c.kind.as_str().to_owned()).unwrap_or_default()
                                        on:change=move |ev| {
                                            let picked = event_target_value(&ev);
                                            if let Some(kind) = ColumnType::parse(&picked) {
                                                new_columns.update(|c| if let Some(col) = c.get_mut(i) { col.kind = kind });
                                            }
                                        }
                                    >
                                        {ColumnType::ALL.iter().map(|kind| view! {
                                            <option value=kind.as_str()>{kind.as_str()}</option>
                                        }).collect_view()}
                                    </select>
                                </td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
        }
        .into_any(),
    }
    }
}

/// Starts the dry run or import (into a new dataset: declared with it, the dataset comes into
/// being when an import into it completes, so an abandoned review leaves nothing); the job's
/// id. Only what the person chose is sent of the delimiter and encoding (the import finds the
/// rest over the whole file, the preview only saw its start).
#[allow(clippy::too_many_arguments)]
async fn start_job(
    run: Run,
    upload: Uuid,
    fixes: Option<Uuid>,
    seen: &UploadPreview,
    target: &Target,
    reading: &Reading,
    chosen: &[Option<String>],
    new_columns: &[NewColumn],
) -> Result<String, String> {
    let (dataset, targets, new_dataset) = match target {
        Target::Unchosen => return Err("Choose a dataset first.".into()),
        Target::Existing(dataset) => (dataset.name.clone(), chosen.to_vec(), None),
        Target::New(name) => {
            let columns: Vec<Value> = new_columns
                .iter()
                .filter(|c| c.include)
                .map(|c| json!({ "name": c.name.trim(), "type": c.kind.as_str() }))
                .collect();
            let targets = new_columns
                .iter()
                .map(|c| c.include.then(|| c.name.trim().to_owned()))
                .collect();
            (name.clone(), targets, Some(json!({ "columns": columns })))
        }
    };
    let mapping: BTreeMap<&str, Option<String>> = seen
        .columns
        .iter()
        .map(String::as_str)
        .zip(targets)
        .collect();
    api::create_job(json!({
        "jobType": if run == Run::DryRun { "validate" } else { "import" },
        "fileGuid": upload,
        "dataset": dataset,
        "sheet": seen.sheet,
        "headerRow": seen.header_row,
        "delimiter": reading.delimiter,
        "encoding": reading.encoding,
        "mapping": mapping,
        "fixes": fixes,
        "newDataset": new_dataset,
    }))
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_preview_query_carries_what_was_chosen() {
        let reading = Reading {
            sheet: Some("Q1 & Q2".into()),
            header_row: Some(4),
            delimiter: Some(";".into()),
            encoding: None,
        };
        assert_eq!(
            reading.query(Some("contacts")),
            "sheet=Q1+%26+Q2&headerRow=4&delimiter=%3B&dataset=contacts"
        );
        assert_eq!(Reading::default().query(None), "");
    }

    #[test]
    fn required_columns_left_empty_are_named() {
        let columns = vec![
            Column {
                required: true,
                ..Column::text("name")
            },
            Column::text("email"),
        ];
        assert_eq!(
            missing_required(&columns, &[Some("email".into())]),
            ["name"]
        );
        assert!(missing_required(&columns, &[Some("name".into()), None]).is_empty());
    }
}
