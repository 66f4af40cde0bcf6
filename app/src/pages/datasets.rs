//! `/datasets`: every dataset, and `/datasets/{name}`: one dataset's schema and first rows.

use leptos::prelude::*;
use leptos_router::hooks::{use_navigate, use_params_map, use_query_map};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::{
    api,
    data::{DATASET_PAGE_ROWS, get_dataset, list_datasets},
    model::{DatasetView, MAX_XLSX_ROWS, count_of, dataset_href, owner_label, thousands},
    pages::NotFound,
    session::use_session,
};

#[component]
pub fn DatasetsPage() -> impl IntoView {
    let session = use_session();
    let datasets = Resource::new(|| (), |_| list_datasets());
    view! {
        <section class="card">
            <h1>"Datasets"</h1>
            <Suspense fallback=|| view! { <p class="muted">"Loading datasets..."</p> }>
                {move || Suspend::new(async move {
                    session.ready().await;
                    match datasets.await {
                        Ok(datasets) if datasets.is_empty() => {
                            view! {
                                <p class="muted">"No datasets yet. " <a href="/">"Import a file"</a></p>
                            }
                                .into_any()
                        }
                        Ok(datasets) => view! { <DatasetTable datasets /> }.into_any(),
                        Err(err) => {
                            view! { <p class="error">"Cannot load datasets: " {err.to_string()}</p> }
                                .into_any()
                        }
                    }
                })}
            </Suspense>
        </section>
    }
}

#[component]
fn DatasetTable(datasets: Vec<DatasetView>) -> impl IntoView {
    // Read once: the page waited for the session before building this.
    let session = use_session();
    let everyone = untrack(|| session.sees_everything());
    let reader = untrack(|| session.me().map(|me| me.id));
    view! {
        <table class="jobs">
            <thead>
                <tr>
                    <th>"Dataset"</th>
                    {everyone.then_some(view! { <th>"Owner"</th> })}
                    <th>"Rows"</th>
                    <th>"Columns"</th>
                    <th>"Key"</th>
                    <th>"Created"</th>
                </tr>
            </thead>
            <tbody>
                {datasets
                    .into_iter()
                    .map(|dataset| {
                        view! {
                            <tr data-testid="dataset-row">
                                <td>
                                    <a href=dataset_href(&dataset.name, dataset.owner, reader)>
                                        {dataset.name.clone()}
                                    </a>
                                </td>
                                {everyone.then(|| view! {
                                    <td>{owner_label(dataset.owner_email.as_deref())}</td>
                                })}
                                <td data-testid="dataset-row-count">{thousands(dataset.row_count)}</td>
                                <td>{dataset.columns.len()}</td>
                                <td>{dataset.key.clone().unwrap_or_else(|| "-".into())}</td>
                                <td>{dataset.created_at.format("%Y-%m-%d %H:%M:%S").to_string()}</td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
    }
}

#[component]
pub fn DatasetPage() -> impl IntoView {
    let params = use_params_map();
    let query = use_query_map();
    let name = move || params.read().get("name").unwrap_or_default();
    let owner = move || {
        query
            .read()
            .get("owner")
            .and_then(|o| Uuid::parse_str(&o).ok())
    };
    let session = use_session();
    let dataset = Resource::new(
        move || (name(), owner()),
        |(name, owner)| get_dataset(name, owner),
    );
    view! {
        <Suspense fallback=|| view! { <p class="muted">"Loading dataset..."</p> }>
            {move || Suspend::new(async move {
                session.ready().await;
                match dataset.await {
                    Ok(Some((dataset, rows))) => view! { <Dataset dataset rows /> }.into_any(),
                    Ok(None) => view! { <NotFound /> }.into_any(),
                    Err(err) => {
                        view! { <p class="error">"Cannot load the dataset: " {err.to_string()}</p> }
                            .into_any()
                    }
                }
            })}
        </Suspense>
    }
}

#[component]
fn Dataset(dataset: DatasetView, rows: Vec<Value>) -> impl IntoView {
    let names: Vec<String> = dataset.columns.iter().map(|c| c.name.clone()).collect();
    let key = dataset.key.clone();
    let session = use_session();
    let own = untrack(|| session.me().is_some_and(|me| me.id == dataset.owner));
    let may_create = untrack(|| session.may_create());
    let may_delete = untrack(|| session.may_change(dataset.owner));
    // The dataset's own API address: `?owner=` when it is someone else's.
    let api_url = |rest: &str| match own {
        true => format!("/api/datasets/{}{rest}", dataset.name),
        false => format!(
            "/api/datasets/{}{rest}?owner={}",
            dataset.name, dataset.owner
        ),
    };
    let rows_url = api_url("/rows");
    let delete_url = api_url("");
    view! {
        <section class="card">
            <h1>"Dataset " {dataset.name.clone()}</h1>
            <p data-testid="dataset-size">
                {count_of(dataset.row_count, "row")} ", " {count_of(dataset.columns.len() as i64, "column")}
            </p>
            {(!own).then(|| view! {
                <p class="muted" data-testid="dataset-owner">
                    "Owner: " {owner_label(dataset.owner_email.as_deref())}
                </p>
            })}
            {(own && may_create).then(|| view! {
                <p class="actions">
                    <a
                        class="button"
                        data-testid="import-into"
                        href=format!("/?{}", form_urlencoded::Serializer::new(String::new()).append_pair("dataset", &dataset.name).finish())
                    >
                        "Import into this dataset"
                    </a>
                </p>
                <ExportButtons dataset=dataset.name.clone() rows=dataset.row_count />
            })}
            <p>
                <a
                    data-testid="dataset-jobs"
                    href=format!("/jobs?{}", form_urlencoded::Serializer::new(String::new()).append_pair("dataset", &dataset.name).finish())
                >
                    "Its imports and exports"
                </a>
            </p>
            <h2>"Columns"</h2>
            <table class="jobs" data-testid="dataset-schema">
                <thead>
                    <tr>
                        <th>"Column"</th>
                        <th>"Type"</th>
                        <th>"Required"</th>
                    </tr>
                </thead>
                <tbody>
                    {dataset
                        .columns
                        .iter()
                        .map(|column| {
                            let is_key = key.as_deref() == Some(column.name.as_str());
                            view! {
                                <tr>
                                    <td>
                                        {column.name.clone()}
                                        {is_key.then_some(" (key)")}
                                    </td>
                                    <td>{column.kind.as_str()}</td>
                                    <td>{if column.required { "yes" } else { "no" }}</td>
                                </tr>
                            }
                        })
                        .collect_view()}
                </tbody>
            </table>
            <h2>"First rows"</h2>
            <p class="muted">
                "Up to " {DATASET_PAGE_ROWS} " rows. All rows: "
                <a href=rows_url>"JSON"</a>
            </p>
            <div class="scroll">
                <table class="jobs" data-testid="dataset-rows">
                    <thead>
                        <tr>{names.iter().map(|name| view! { <th>{name.clone()}</th> }).collect_view()}</tr>
                    </thead>
                    <tbody>
                        {rows
                            .into_iter()
                            .map(|row| {
                                let cells = names
                                    .iter()
                                    .map(|name| view! { <td>{cell_text(&row[name.as_str()])}</td> })
                                    .collect_view();
                                view! { <tr>{cells}</tr> }
                            })
                            .collect_view()}
                    </tbody>
                </table>
            </div>
            {may_delete.then(|| view! {
                <DeleteDataset name=dataset.name.clone() rows=dataset.row_count url=delete_url />
            })}
        </section>
    }
}

/// "Delete dataset", then a second, explicit confirmation naming what goes; the deletion's job
/// page follows, with its progress.
#[component]
fn DeleteDataset(name: String, rows: i64, url: String) -> impl IntoView {
    let asking = RwSignal::new(false);
    let busy = RwSignal::new(false);
    let error = RwSignal::new(None::<String>);
    let navigate = use_navigate();
    let url = StoredValue::new(url);
    let delete = move |_| {
        let navigate = navigate.clone();
        busy.set(true);
        error.set(None);
        leptos::task::spawn_local(async move {
            match api::call("DELETE", &url.get_value(), None).await {
                Ok(job) => {
                    let id = job["id"].as_str().unwrap_or_default().to_owned();
                    navigate(&format!("/jobs/{id}"), Default::default());
                }
                Err(message) => {
                    error.set(Some(message));
                    busy.set(false);
                }
            }
        });
    };
    let question = format!(
        "Delete {name} and its {}? This cannot be undone.",
        count_of(rows, "row")
    );
    view! {
        <h2>"Delete"</h2>
        <Show
            when=move || asking.get()
            fallback=move || view! {
                <p class="actions">
                    <button class="secondary" data-testid="delete-dataset"
                        on:click=move |_| asking.set(true)>
                        "Delete dataset"
                    </button>
                </p>
            }
        >
            <p class="warning" data-testid="delete-question">{question.clone()}</p>
            <p class="actions">
                <button class="danger" data-testid="confirm-delete" disabled=move || busy.get()
                    on:click=delete.clone()>
                    "Delete"
                </button>
                " "
                <button class="secondary" data-testid="keep-dataset" on:click=move |_| asking.set(false)>
                    "Keep it"
                </button>
            </p>
        </Show>
        {move || error.get().map(|message| view! { <p class="error" role="alert">{message}</p> })}
    }
}

/// "Export CSV" / "Export XLSX": start an export job and follow it on its page. XLSX is not
/// offered for more rows than an Excel sheet holds.
#[component]
fn ExportButtons(dataset: String, rows: i64) -> impl IntoView {
    let too_big_for_excel = rows > MAX_XLSX_ROWS;
    let busy = RwSignal::new(false);
    let error = RwSignal::new(None::<String>);
    let navigate = use_navigate();
    let start = move |format: &'static str| {
        let dataset = dataset.clone();
        let navigate = navigate.clone();
        move |_| {
            let dataset = dataset.clone();
            let navigate = navigate.clone();
            busy.set(true);
            error.set(None);
            leptos::task::spawn_local(async move {
                let body = json!({ "jobType": "export", "dataset": dataset, "format": format });
                match api::create_job(body).await {
                    Ok(job_id) => navigate(&format!("/jobs/{job_id}"), Default::default()),
                    Err(message) => {
                        error.set(Some(message));
                        busy.set(false);
                    }
                }
            });
        }
    };
    view! {
        <p class="actions">
            <button data-testid="export-csv" disabled=move || busy.get() on:click=start("csv")>
                "Export CSV"
            </button>
            " "
            <button data-testid="export-xlsx" disabled=move || too_big_for_excel || busy.get()
                aria-describedby=too_big_for_excel.then_some("xlsx-too-big") on:click=start("xlsx")>
                "Export XLSX"
            </button>
        </p>
        {too_big_for_excel.then(|| view! {
            <p class="muted" id="xlsx-too-big" data-testid="xlsx-too-big">
                {format!(
                    "XLSX is not offered: an Excel sheet holds at most {} rows.",
                    thousands(MAX_XLSX_ROWS),
                )}
            </p>
        })}
        {move || error.get().map(|message| view! { <p class="error" role="alert">{message}</p> })}
    }
}

/// A JSON value as a table cell: strings bare, null empty, anything else as JSON.
fn cell_text(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}
