//! `/`: choose or drop a spreadsheet and upload it. The browser sends the bytes (`POST
//! /api/uploads`) and goes to the upload's review (`/uploads/{id}`), where the person sees what
//! the file holds, picks the dataset and maps the columns before anything is imported.
//! `?fixes=<job>&dataset=<name>` (from a job's "Fix and re-import") is passed on to it.

use leptos::prelude::*;
use leptos_router::hooks::{use_navigate, use_query_map};
use send_wrapper::SendWrapper;
use web_sys::File;

use crate::session::use_session;

#[component]
pub fn UploadPage() -> impl IntoView {
    let file = RwSignal::new(None::<SendWrapper<File>>);
    let busy = RwSignal::new(false);
    let error = RwSignal::new(None::<String>);
    let dragging = RwSignal::new(false);
    let session = use_session();
    let file_name = move || file.read().as_ref().map(|file| file.name());
    // Passed on to the review: the import a fixed error report fixes, and its dataset.
    let passed_on = use_query_map().with_untracked(|query| {
        let mut passed = form_urlencoded::Serializer::new(String::new());
        for key in ["fixes", "dataset"] {
            if let Some(value) = query.get(key) {
                passed.append_pair(key, &value);
            }
        }
        passed.finish()
    });
    let fixing = !passed_on.is_empty();

    let choose = move |chosen: Option<File>| {
        if let Some(chosen) = chosen {
            error.set(None);
            file.set(Some(SendWrapper::new(chosen)));
        }
    };
    let navigate = use_navigate();
    let send = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let Some(chosen) = file.get_untracked() else {
            return;
        };
        let navigate = navigate.clone();
        let passed_on = passed_on.clone();
        busy.set(true);
        error.set(None);
        leptos::task::spawn_local(async move {
            let sent = client::upload(chosen.take()).await;
            // A visitor's upload made them a guest.
            if untrack(|| session.me().is_none()) {
                session.reload();
            }
            match sent {
                Ok(upload) => {
                    let id = upload["id"].as_str().unwrap_or_default();
                    let query = if passed_on.is_empty() {
                        String::new()
                    } else {
                        format!("?{passed_on}")
                    };
                    navigate(&format!("/uploads/{id}{query}"), Default::default());
                }
                Err(message) => {
                    error.set(Some(message));
                    busy.set(false);
                }
            }
        });
    };

    view! {
        <form class="card" on:submit=send>
            <h1>{if fixing { "Re-import the fixed rows" } else { "Import a spreadsheet" }}</h1>
            <Transition>
                <Show when=move || !session.may_create()>
                    <p class="warning" data-testid="viewer-notice">
                        "You are a viewer: you can see every job and dataset, but not import."
                    </p>
                </Show>
            </Transition>
            <p class="muted">"CSV, TSV, Excel (XLSX, XLS) or OpenDocument (ODS) files. Next you see what the file holds, choose the dataset and where each column goes; the import then runs in the background, and you can watch it live."</p>
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
            <button
                type="submit"
                data-testid="upload-button"
                disabled=move || busy.get() || file.read().is_none()
            >
                {move || if busy.get() { "Uploading..." } else { "Upload and review" }}
            </button>
            {move || error.get().map(|message| view! { <p class="error" role="alert">{message}</p> })}
        </form>
    }
}

/// The upload behind the button; it only ever runs in the browser.
mod client {
    use web_sys::File;

    #[cfg(feature = "hydrate")]
    use crate::api;

    #[cfg(feature = "hydrate")]
    pub async fn upload(file: File) -> Result<serde_json::Value, String> {
        let form = web_sys::FormData::new().map_err(|_| "FormData is not available".to_owned())?;
        form.append_with_blob_and_filename("file", &file, &file.name())
            .map_err(|_| "Cannot read the file".to_owned())?;
        api::send(gloo_net::http::Request::post("/api/uploads").body(form)).await
    }

    #[cfg(not(feature = "hydrate"))]
    pub async fn upload(_file: File) -> Result<serde_json::Value, String> {
        Err("Importing needs JavaScript".to_owned())
    }
}
