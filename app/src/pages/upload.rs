//! `/`: choose or drop a spreadsheet, name the dataset, press Import. The browser uploads the
//! bytes (`POST /api/uploads`), creates the import job (`POST /api/jobs`) and goes to the job's
//! page, where the progress is followed live.

use leptos::prelude::*;
use leptos_router::hooks::use_navigate;
use send_wrapper::SendWrapper;
use web_sys::File;

#[component]
pub fn UploadPage() -> impl IntoView {
    let file = RwSignal::new(None::<SendWrapper<File>>);
    let dataset = RwSignal::new(String::new());
    let busy = RwSignal::new(false);
    let error = RwSignal::new(None::<String>);
    let dragging = RwSignal::new(false);
    let file_name = move || file.read().as_ref().map(|file| file.name());

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
        let navigate = navigate.clone();
        busy.set(true);
        error.set(None);
        leptos::task::spawn_local(async move {
            match client::start_import(chosen.take(), name).await {
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
            <p class="muted">"CSV files with a header row. The import runs in the background; you can watch it live."</p>
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
                    accept=".csv,text/csv"
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
            <label class="field">
                "Dataset"
                <input
                    type="text"
                    data-testid="dataset-input"
                    placeholder="e.g. customers"
                    prop:value=move || dataset.get()
                    on:input=move |ev| dataset.set(event_target_value(&ev))
                />
            </label>
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

/// The two API calls behind the Import button; they only ever run in the browser.
mod client {
    use web_sys::File;

    #[cfg(feature = "hydrate")]
    pub async fn start_import(file: File, dataset: String) -> Result<String, String> {
        use gloo_net::http::Request;
        use serde_json::{Value, json};

        async fn send(request: Result<Request, gloo_net::Error>) -> Result<Value, String> {
            let response = request
                .map_err(|e| e.to_string())?
                .send()
                .await
                .map_err(|e| format!("The server could not be reached: {e}"))?;
            let ok = response.ok();
            let body: Value = response.json().await.map_err(|e| e.to_string())?;
            if ok {
                Ok(body)
            } else {
                Err(body["error"]["message"]
                    .as_str()
                    .unwrap_or("The request failed")
                    .to_owned())
            }
        }

        let form = web_sys::FormData::new().map_err(|_| "FormData is not available".to_owned())?;
        form.append_with_blob_and_filename("file", &file, &file.name())
            .map_err(|_| "Cannot read the file".to_owned())?;
        let upload = send(Request::post("/api/uploads").body(form)).await?;
        let job = send(Request::post("/api/jobs").json(&json!({
            "jobType": "import",
            "fileGuid": upload["id"],
            "dataset": dataset,
        })))
        .await?;
        job["id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| "The server sent no job id".to_owned())
    }

    #[cfg(not(feature = "hydrate"))]
    pub async fn start_import(_file: File, _dataset: String) -> Result<String, String> {
        Err("Importing needs JavaScript".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::dataset_name_for;

    #[test]
    fn dataset_names_come_from_file_stems() {
        assert_eq!(dataset_name_for("Customers 2024.csv"), "customers_2024");
        assert_eq!(dataset_name_for("sales-q1.CSV"), "sales-q1");
        assert_eq!(dataset_name_for("noext"), "noext");
    }
}
