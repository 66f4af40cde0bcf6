//! `/`: choose or drop a spreadsheet, name the dataset, press Import. The browser uploads the
//! bytes (`POST /api/uploads`), creates the import job (`POST /api/jobs`) and goes to the job's
//! page, where the progress is followed live.

use leptos::prelude::*;
use leptos_router::hooks::use_navigate;
use send_wrapper::SendWrapper;
use web_sys::File;

use crate::session::use_session;

#[component]
pub fn UploadPage() -> impl IntoView {
    let file = RwSignal::new(None::<SendWrapper<File>>);
    let dataset = RwSignal::new(String::new());
    let sheet = RwSignal::new(String::new());
    let busy = RwSignal::new(false);
    let error = RwSignal::new(None::<String>);
    let dragging = RwSignal::new(false);
    let session = use_session();
    let file_name = move || file.read().as_ref().map(|file| file.name());
    let workbook_chosen = move || file_name().is_some_and(|name| is_workbook_name(&name));

    let choose = move |chosen: Option<File>| {
        if let Some(chosen) = chosen {
            if dataset.read_untracked().is_empty() {
                dataset.set(dataset_name_for(&chosen.name()));
            }
            error.set(None);
            file.set(Some(SendWrapper::new(chosen)));
        }
    };
    let navigate = use_navigate();
    let import = move |_| {
        let Some(chosen) = file.get_untracked() else {
            return;
        };
        let name = dataset.get_untracked().trim().to_owned();
        let sheet = Some(sheet.get_untracked().trim().to_owned()).filter(|s| !s.is_empty());
        let navigate = navigate.clone();
        busy.set(true);
        error.set(None);
        leptos::task::spawn_local(async move {
            let started = client::start_import(chosen.take(), name, sheet).await;
            // A visitor's upload made them a guest, whether or not the job could be made.
            if untrack(|| session.me().is_none()) {
                session.reload();
            }
            match started {
                Ok(job_id) => navigate(&format!("/jobs/{job_id}"), Default::default()),
                Err(message) => {
                    error.set(Some(message));
                    busy.set(false);
                }
            }
        });
    };

    view! {
        <section class="card">
            <h1>"Import a spreadsheet"</h1>
            <Transition>
                <Show when=move || !session.may_create()>
                    <p class="warning" data-testid="viewer-notice">
                        "You are a viewer: you can see every job and dataset, but not import."
                    </p>
                </Show>
            </Transition>
            <p class="muted">"CSV, TSV, Excel (XLSX, XLS) or OpenDocument (ODS) files whose first row is a header. The import runs in the background; you can watch it live."</p>
            <label
                class="dropzone"
                class:dragging=move || dragging.get()
                data-testid="drop-zone"
                on:dragover=move |ev| {
                    ev.prevent_default();
                    dragging.set(true);
                }
                on:dragleave=move |_| dragging.set(false)
                on:drop=move |ev| {
                    ev.prevent_default();
                    dragging.set(false);
                    choose(ev.data_transfer().and_then(|dt| dt.files()).and_then(|files| files.get(0)));
                }
            >
                <input
                    type="file"
                    name="file"
                    accept=".csv,.tsv,.txt,.xlsx,.xlsm,.xls,.ods"
                    data-testid="file-input"
                    on:change=move |ev| {
                        let input: web_sys::HtmlInputElement = event_target(&ev);
                        choose(input.files().and_then(|files| files.get(0)));
                    }
                />
                <span class="dropzone-text">
                    {move || match file_name() {
                        Some(name) => format!("Selected: {name}"),
                        None => "Drop a file here or click to choose one".to_owned(),
                    }}
                </span>
            </label>
            <TextField label="Dataset" test_id="dataset-input" placeholder="e.g. customers" value=dataset />
            <Show when=workbook_chosen>
                <TextField
                    label="Sheet"
                    test_id="sheet-input"
                    placeholder="the first sheet with data"
                    value=sheet
                />
            </Show>
            <button
                data-testid="import-button"
                disabled=move || busy.get() || file.read().is_none() || dataset.read().trim().is_empty()
                on:click=import
            >
                {move || if busy.get() { "Uploading..." } else { "Import" }}
            </button>
            {move || error.get().map(|message| view! { <p class="error" role="alert">{message}</p> })}
        </section>
    }
}

/// A labelled text input bound to `value`.
#[component]
fn TextField(
    label: &'static str,
    test_id: &'static str,
    placeholder: &'static str,
    value: RwSignal<String>,
) -> impl IntoView {
    view! {
        <label class="field">
            {label}
            <input
                type="text"
                data-testid=test_id
                placeholder=placeholder
                prop:value=move || value.get()
                on:input=move |ev| value.set(event_target_value(&ev))
            />
        </label>
    }
}

/// A dataset name from a file name: its stem, lower case, with anything but letters, digits,
/// `-` and `_` turned into `_`.
fn dataset_name_for(file_name: &str) -> String {
    let stem = file_name
        .rsplit_once('.')
        .map_or(file_name, |(stem, _)| stem);
    stem.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .take(64)
        .collect()
}

/// Whether a file name looks like a workbook, to offer the sheet field (the server decides the
/// type from the bytes).
fn is_workbook_name(file_name: &str) -> bool {
    let lower = file_name.to_ascii_lowercase();
    [".xlsx", ".xlsm", ".xls", ".ods"]
        .iter()
        .any(|ext| lower.ends_with(ext))
}

/// The two API calls behind the Import button; they only ever run in the browser.
mod client {
    use serde_json::json;
    use web_sys::File;

    use crate::api;

    pub async fn start_import(
        file: File,
        dataset: String,
        sheet: Option<String>,
    ) -> Result<String, String> {
        let upload = upload(file).await?;
        api::create_job(json!({
            "jobType": "import",
            "fileGuid": upload["id"],
            "dataset": dataset,
            "sheet": sheet,
        }))
        .await
    }

    #[cfg(feature = "hydrate")]
    async fn upload(file: File) -> Result<serde_json::Value, String> {
        let form = web_sys::FormData::new().map_err(|_| "FormData is not available".to_owned())?;
        form.append_with_blob_and_filename("file", &file, &file.name())
            .map_err(|_| "Cannot read the file".to_owned())?;
        api::send(gloo_net::http::Request::post("/api/uploads").body(form)).await
    }

    #[cfg(not(feature = "hydrate"))]
    async fn upload(_file: File) -> Result<serde_json::Value, String> {
        Err("Importing needs JavaScript".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::{dataset_name_for, is_workbook_name};

    #[test]
    fn workbooks_are_told_by_extension_for_the_sheet_field() {
        assert!(is_workbook_name("Q1.XLSX"));
        assert!(is_workbook_name("old.xls"));
        assert!(!is_workbook_name("list.csv"));
    }

    #[test]
    fn dataset_names_come_from_file_stems() {
        assert_eq!(dataset_name_for("Customers 2024.csv"), "customers_2024");
        assert_eq!(dataset_name_for("sales-q1.CSV"), "sales-q1");
        assert_eq!(dataset_name_for("noext"), "noext");
    }
}
