//! The job page's items, for a job of a registered type: a page at a time, in the order they
//! were added, with their state, payload, result and last failure, read by the browser from
//! `GET /api/jobs/{id}/items` and read again when the job's progress moves.

use leptos::prelude::*;
use serde::Deserialize;
use uuid::Uuid;

use crate::{
    api,
    job_types::{ItemState, ItemView},
    pages::pager::Pager,
};

/// Items a page shows.
const PAGE_ITEMS: usize = 25;

#[derive(Clone, Debug, PartialEq, Deserialize)]
struct ItemsPage {
    items: Vec<ItemView>,
    #[serde(default)]
    next: Option<i64>,
}

/// JSON as a cell shows it: compact, cut at 200 characters.
fn shown(value: &serde_json::Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(200) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// The items table; `progress` is the job's count of items ended (or known): a change reads
/// the page again.
#[component]
pub fn ItemTable(id: Uuid, #[prop(into)] progress: Signal<(i64, Option<i64>)>) -> impl IntoView {
    let state = RwSignal::new(None::<ItemState>);
    let cursors = RwSignal::new(vec![0i64]);
    let page = LocalResource::new(move || {
        progress.track();
        let mut query = form_urlencoded::Serializer::new(String::new());
        query.append_pair("limit", &PAGE_ITEMS.to_string());
        let after = cursors.with(|c| c.last().copied().unwrap_or(0));
        if after > 0 {
            query.append_pair("after", &after.to_string());
        }
        if let Some(state) = state.get() {
            query.append_pair("state", state.as_str());
        }
        let path = format!("/api/jobs/{id}/items?{}", query.finish());
        async move {
            let answer = api::call("GET", &path, None).await?;
            serde_json::from_value::<ItemsPage>(answer).map_err(|e| e.to_string())
        }
    });
    let choose = move |chosen: Option<ItemState>| {
        state.set(chosen);
        cursors.set(vec![0]);
    };
    let filter = move |label: &'static str, chosen: Option<ItemState>| {
        view! {
            <button
                class="secondary"
                aria-pressed=move || (state.get() == chosen).to_string()
                on:click=move |_| choose(chosen)
            >
                {label}
            </button>
        }
    };
    view! {
        <section class="items" data-testid="item-table" aria-labelledby="items-heading">
            <h2 id="items-heading">"Items"</h2>
            <div class="filters" role="group" aria-label="Show the items that are">
                {filter("All", None)}
                {filter("To do", Some(ItemState::Pending))}
                {filter("Done", Some(ItemState::Done))}
                {filter("Failed", Some(ItemState::Failed))}
            </div>
            <Transition fallback=|| view! { <p class="muted">"Reading the items..."</p> }>
                {move || Suspend::new(async move {
                    match page.await {
                        Ok(read) => {
                            let next = read.next;
                            view! {
                                {read.items.is_empty().then(|| view! { <p class="muted">"No items."</p> })}
                                <table class="jobs" data-testid="item-rows">
                                    <thead><tr>
                                        <th>"Item"</th><th>"State"</th><th>"Payload"</th>
                                        <th>"Result"</th><th>"Attempts"</th><th>"Last failure"</th>
                                    </tr></thead>
                                    <tbody>
                                        {read.items.into_iter().map(|item| {
                                            let failure = item.failures.as_array()
                                                .and_then(|all| all.last())
                                                .and_then(|last| last["message"].as_str())
                                                .unwrap_or_default()
                                                .to_owned();
                                            view! {
                                                <tr data-testid="item-row" data-state=item.state.as_str()>
                                                    <td>{item.item_no}</td>
                                                    <td>{item.state.as_str()}</td>
                                                    <td><code>{shown(&item.payload)}</code></td>
                                                    <td><code>{item.result.as_ref().map(shown).unwrap_or_default()}</code></td>
                                                    <td>{item.attempts}</td>
                                                    <td>{failure}</td>
                                                </tr>
                                            }
                                        }).collect_view()}
                                    </tbody>
                                </table>
                                <Pager cursors next next_testid="items-next" />
                            }.into_any()
                        }
                        Err(message) => view! { <p class="error" role="alert">{message}</p> }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}
