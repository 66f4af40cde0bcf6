//! The job page's rows in error, on the page: how many have a problem in each column (each a
//! filter), a filter on the messages, and a page of rows at a time, read by the browser from
//! `GET /api/jobs/{id}/errors`. The CSV and XLSX reports hold them all.

use leptos::prelude::*;
use serde::Deserialize;
use uuid::Uuid;

use crate::{api, model::thousands, pages::pager::Pager};

/// Rows a page shows.
const PAGE_ROWS: usize = 25;

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ErrorsPage {
    errors: Vec<ErrorLine>,
    #[serde(default)]
    by_column: Option<Vec<ColumnCount>>,
    #[serde(default)]
    next: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ErrorLine {
    row_no: i64,
    column: Option<String>,
    value: Option<String>,
    message: String,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
struct ColumnCount {
    column: Option<String>,
    rows: i64,
}

/// The filter a column's button sets: rows with a problem in it. (Rows wrong as a whole have
/// no column to filter on; their count is shown.)
#[component]
pub fn ErrorTable(id: Uuid, #[prop(into)] failed: Signal<i64>) -> impl IntoView {
    let column = RwSignal::new(None::<String>);
    let text = RwSignal::new(String::new());
    // The pages read so far (their `after`), to go back.
    let cursors = RwSignal::new(vec![0i64]);
    let page = LocalResource::new(move || {
        failed.track();
        let mut query = form_urlencoded::Serializer::new(String::new());
        query.append_pair("limit", &PAGE_ROWS.to_string());
        let after = cursors.with(|c| c.last().copied().unwrap_or(0));
        if after > 0 {
            query.append_pair("after", &after.to_string());
        }
        let column = column.get();
        if let Some(column) = &column {
            query.append_pair("column", column);
        }
        let text = text.get();
        if !text.trim().is_empty() {
            query.append_pair("q", text.trim());
        }
        // The counts by column, with an unfiltered first page (they do not depend on the
        // filter; they are not read again for every page).
        if after == 0 && column.is_none() && text.trim().is_empty() {
            query.append_pair("counts", "true");
        }
        let path = format!("/api/jobs/{id}/errors?{}", query.finish());
        async move {
            let answer = api::call("GET", &path, None).await?;
            serde_json::from_value::<ErrorsPage>(answer).map_err(|e| e.to_string())
        }
    });
    // The counts by column come with an unfiltered first page; kept while others are read,
    // and set only when they change (the buttons are not rebuilt under the keyboard).
    let counts = RwSignal::new(Vec::<ColumnCount>::new());
    Effect::new(move |_| {
        if let Some(Ok(ErrorsPage {
            by_column: Some(by_column),
            ..
        })) = page.get()
            && counts.with_untracked(|shown| *shown != by_column)
        {
            counts.set(by_column);
        }
    });
    let choose = move |chosen: Option<String>| {
        column.set(chosen);
        cursors.set(vec![0]);
    };
    view! {
        <section class="errors" data-testid="error-table" aria-labelledby="errors-heading">
            <h2 id="errors-heading">"Rows in error"</h2>
            <div class="filters" role="group" aria-label="Show the rows with a problem in">
                <button
                    class="secondary"
                    aria-pressed=move || column.with(Option::is_none).to_string()
                    on:click=move |_| choose(None)
                >
                    {move || format!("All ({})", thousands(failed.get()))}
                </button>
                {move || counts.get().into_iter().map(|count| {
                    let label = format!(
                        "{} ({})",
                        count.column.clone().unwrap_or_else(|| "the row as a whole".into()),
                        thousands(count.rows)
                    );
                    match count.column {
                        Some(name) => {
                            let pressed = name.clone();
                            view! {
                                <button
                                    class="secondary"
                                    data-testid=format!("errors-in-{name}")
                                    aria-pressed=move || (column.get().as_deref() == Some(pressed.as_str())).to_string()
                                    on:click=move |_| choose(Some(name.clone()))
                                >
                                    {label}
                                </button>
                            }.into_any()
                        }
                        None => view! { <span class="muted">{label}</span> }.into_any(),
                    }
                }).collect_view()}
                <label class="grow">
                    "Message has"
                    // Applied when the text is done (Enter, or leaving the field): not a read of
                    // the errors per key pressed.
                    <input
                        type="search"
                        data-testid="errors-filter"
                        prop:value=move || text.get()
                        on:change=move |ev| {
                            text.set(event_target_value(&ev));
                            cursors.set(vec![0]);
                        }
                    />
                </label>
            </div>
            <Transition fallback=|| view! { <p class="muted">"Reading the rows in error..."</p> }>
                {move || Suspend::new(async move {
                    match page.await {
                        Ok(read) => {
                            let next = read.next;
                            view! {
                                {read.errors.is_empty().then(|| view! {
                                    <p class="muted">
                                        {if next.is_some() {
                                            "None of the rows looked through matches: Next looks further."
                                        } else {
                                            "No row matches."
                                        }}
                                    </p>
                                })}
                                <table class="jobs" data-testid="error-rows">
                                    <thead><tr><th>"Row"</th><th>"Column"</th><th>"Value"</th><th>"Problem"</th></tr></thead>
                                    <tbody>
                                        {read.errors.into_iter().map(|line| view! {
                                            <tr data-testid="error-row">
                                                <td>{line.row_no}</td>
                                                <td>{line.column.unwrap_or_default()}</td>
                                                <td>{line.value.unwrap_or_default()}</td>
                                                <td>{line.message}</td>
                                            </tr>
                                        }).collect_view()}
                                    </tbody>
                                </table>
                                <Pager cursors next next_testid="errors-next" />
                            }.into_any()
                        }
                        Err(message) => view! { <p class="error" role="alert">{message}</p> }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}
