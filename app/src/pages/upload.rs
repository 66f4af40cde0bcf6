//! `/`: choose or drop a spreadsheet and upload it. The browser sends the bytes (`POST
//! /api/uploads`) and goes to the upload's review (`/uploads/{id}`), where the person sees what
//! the file holds, picks the dataset and maps the columns before anything is imported.
//! `?fixes=<job>&dataset=<name>` (from a job's "Fix and re-import") is passed on to it. While
//! the bytes go, the form is locked and shows how much has been sent, with a Cancel (the
//! upload is an `XMLHttpRequest`: `fetch` tells nothing of a request body's progress).

use leptos::prelude::*;
use leptos_router::hooks::{use_navigate, use_query_map};
use send_wrapper::SendWrapper;
use web_sys::File;

use crate::session::use_session;

#[component]
pub fn UploadPage() -> impl IntoView {
    let file = RwSignal::new(None::<SendWrapper<File>>);
    let busy = RwSignal::new(false);
    // While sending: the percentage sent, and the request, for Cancel.
    let sent_percent = RwSignal::new(None::<u8>);
    let sending = RwSignal::new(None::<SendWrapper<client::Sending>>);
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
        if busy.get_untracked() {
            return;
        }
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
        sent_percent.set(Some(0));
        leptos::task::spawn_local(async move {
            let sent = client::upload(chosen.take(), sent_percent, sending).await;
            sent_percent.set(None);
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
                    disabled=move || busy.get()
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
            <div class="actions">
                <button
                    type="submit"
                    data-testid="upload-button"
                    disabled=move || busy.get() || file.read().is_none()
                >
                    {move || if busy.get() { "Uploading..." } else { "Upload and review" }}
                </button>
                {move || sent_percent.get().map(|percent| view! {
                    <progress
                        data-testid="upload-progress"
                        aria-label="Upload progress"
                        max="100"
                        value=percent
                    ></progress>
                    <span role="status" data-testid="upload-percent">{format!("{percent}% sent")}</span>
                    <button
                        type="button"
                        class="secondary"
                        data-testid="cancel-upload"
                        on:click=move |_| {
                            sending.with_untracked(|request| {
                                if let Some(request) = request {
                                    request.cancel();
                                }
                            });
                        }
                    >
                        "Cancel"
                    </button>
                })}
            </div>
            {move || error.get().map(|message| view! { <p class="error" role="alert">{message}</p> })}
        </form>
    }
}

/// The upload behind the button; it only ever runs in the browser.
mod client {
    use leptos::prelude::*;
    use send_wrapper::SendWrapper;
    use serde_json::Value;
    use web_sys::File;

    /// An upload on its way.
    pub struct Sending {
        #[cfg(feature = "hydrate")]
        request: web_sys::XmlHttpRequest,
    }

    impl Sending {
        /// Stops sending; the upload then ends as cancelled.
        pub fn cancel(&self) {
            #[cfg(feature = "hydrate")]
            let _ = self.request.abort();
        }
    }

    /// `POST /api/uploads` with the file as the form field `file`, reporting the percentage
    /// sent in `percent` and holding the request in `sending` (for Cancel) until it ends; the
    /// API's answer, or a message for the person.
    #[cfg(feature = "hydrate")]
    pub async fn upload(
        file: File,
        percent: RwSignal<Option<u8>>,
        sending: RwSignal<Option<SendWrapper<Sending>>>,
    ) -> Result<Value, String> {
        use wasm_bindgen::{JsCast, JsValue, closure::Closure};
        use web_sys::{FormData, ProgressEvent, XmlHttpRequest};

        let form = FormData::new().map_err(|_| "FormData is not available".to_owned())?;
        form.append_with_blob_and_filename("file", &file, &file.name())
            .map_err(|_| "Cannot read the file".to_owned())?;
        let request = XmlHttpRequest::new().map_err(|_| "Cannot send requests".to_owned())?;
        request
            .open("POST", "/api/uploads")
            .map_err(|_| "Cannot send requests".to_owned())?;
        let progress = Closure::<dyn FnMut(ProgressEvent)>::new(move |ev: ProgressEvent| {
            if ev.length_computable() && ev.total() > 0.0 {
                percent.set(Some(
                    (ev.loaded() / ev.total() * 100.0).floor().min(100.0) as u8
                ));
            }
        });
        if let Ok(upload) = request.upload() {
            upload.set_onprogress(Some(progress.as_ref().unchecked_ref()));
        }
        // Settles once the request has ended, however it ended.
        let ended = js_sys::Promise::new(&mut |resolve, _| {
            let settle = Closure::once_into_js(move || {
                let _ = resolve.call0(&JsValue::NULL);
            });
            request.set_onloadend(Some(settle.unchecked_ref()));
        });
        request
            .send_with_opt_form_data(Some(&form))
            .map_err(|_| "The upload could not be sent".to_owned())?;
        sending.set(Some(SendWrapper::new(Sending {
            request: request.clone(),
        })));
        let _ = wasm_bindgen_futures::JsFuture::from(ended).await;
        sending.set(None);
        drop(progress);
        let status = request.status().unwrap_or(0);
        if status == 0 {
            return Err("The upload was cancelled, or the server could not be reached.".to_owned());
        }
        let text = request.response_text().ok().flatten().unwrap_or_default();
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if (200..300).contains(&status) {
            Ok(body)
        } else {
            Err(body["error"]["message"]
                .as_str()
                .unwrap_or("The upload failed")
                .to_owned())
        }
    }

    #[cfg(not(feature = "hydrate"))]
    pub async fn upload(
        _file: File,
        _percent: RwSignal<Option<u8>>,
        _sending: RwSignal<Option<SendWrapper<Sending>>>,
    ) -> Result<Value, String> {
        Err("Importing needs JavaScript".to_owned())
    }
}
