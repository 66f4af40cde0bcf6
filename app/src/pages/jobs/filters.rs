//! The job list's filter form (a GET form: submitting it is navigating to its URL, with or
//! without JavaScript) and the counts per status, each a link to that status.

use leptos::prelude::*;
use leptos_router::components::Form;

use crate::{
    job_list::{JobFilter, ListQuery, PAGE_SIZES, PageAt, StatusCount},
    model::{JobKind, JobStatus, thousands},
    session::use_session,
    zone::use_zone,
};

/// A fieldset of checkboxes named `name`, one per word, each checked as given: the query
/// string repeats `name` for each one checked.
#[component]
fn Choices<const N: usize>(
    legend: &'static str,
    name: &'static str,
    words: [(&'static str, bool); N],
) -> impl IntoView {
    view! {
        <fieldset>
            <legend>{legend}</legend>
            {words
                .into_iter()
                .map(|(word, checked)| {
                    view! {
                        <label class="check">
                            <input type="checkbox" name=name value=word checked=checked />
                            {word}
                        </label>
                    }
                })
                .collect_view()}
        </fieldset>
    }
}

#[component]
pub fn FilterForm(query: ListQuery) -> impl IntoView {
    let everyone = untrack(|| use_session().sees_everything());
    let zone = use_zone();
    let filter = query.filter;
    let statuses = filter.statuses.clone();
    let kinds = filter.kinds.clone();
    let text = |value: &Option<String>| value.clone().unwrap_or_default();
    let (from, to) = (filter.created_from, filter.created_to);
    // `to` is exclusive: a day's filter ends at the next midnight, shown as the day itself.
    let to_day = move || to.map(|to| zone.day(to - chrono::Duration::seconds(1)));
    let limit = query.limit;
    view! {
        <Form method="GET" action="/jobs">
            <div class="filters" role="search">
                <label class="grow">
                    "Search "
                    <input type="search" name="q" value=text(&filter.search)
                        placeholder="File name, dataset or job id" data-testid="filter-search" />
                </label>
                <Choices legend="Status" name="status"
                    words=JobStatus::ALL.map(|status| (status.as_str(), statuses.contains(&status))) />
                <Choices legend="Type" name="type"
                    words=JobKind::ALL.map(|kind| (kind.as_str(), kinds.contains(&kind))) />
                {everyone.then(|| view! {
                    <label>
                        "Owner "
                        <input type="text" name="owner" value=text(&filter.owner)
                            placeholder="email" data-testid="filter-owner" />
                    </label>
                })}
                <label>
                    "Dataset " <input type="text" name="dataset" value=text(&filter.dataset) />
                </label>
                <label>
                    "Created from "
                    <input type="date" name="from" value=move || from.map(|at| zone.day(at)) />
                </label>
                <label>"to " <input type="date" name="to" value=to_day /></label>
                <input type="hidden" name="tz" value=move || zone.minutes_east().to_string() />
                <label class="check">
                    <input type="checkbox" name="errors" value="1" checked=filter.with_row_errors />
                    "With row errors"
                </label>
                <label>
                    "Per page "
                    <select name="limit">
                        {PAGE_SIZES
                            .into_iter()
                            .map(|size| view! {
                                <option value=size.to_string() selected=size == limit>
                                    {size.to_string()}
                                </option>
                            })
                            .collect_view()}
                    </select>
                </label>
                <button type="submit" data-testid="apply-filter">"Apply"</button>
                <a href="/jobs" class="button secondary">"Clear"</a>
            </div>
        </Form>
    }
    .into_any()
}

/// "All 12,345 · waiting 3 · running 2 · …", each a link to the list of that status (with the
/// rest of the filter kept); a capped count reads "1,000+".
#[component]
pub fn StatusCounts(counts: Vec<StatusCount>, query: ListQuery) -> impl IntoView {
    let with_statuses = |statuses: Vec<JobStatus>| {
        let mut query = query.at(PageAt::Newest);
        query.filter = JobFilter {
            statuses,
            ..query.filter
        };
        format!("/jobs?{}", query.to_query_string())
    };
    let shown = |count: i64, or_more: bool| {
        if or_more {
            format!("{}+", thousands(count))
        } else {
            thousands(count)
        }
    };
    let total: i64 = counts.iter().map(|c| c.count).sum();
    let total_more = counts.iter().any(|c| c.or_more);
    let current = query.filter.statuses.clone();
    let all_current = current.is_empty();
    view! {
        <nav class="counts" aria-label="Jobs by status" data-testid="status-counts">
            <a href=with_statuses(Vec::new()) aria-current=all_current.then_some("page")>
                "All " <strong>{shown(total, total_more)}</strong>
            </a>
            {counts
                .into_iter()
                .map(|count| {
                    let here = current == [count.status];
                    view! {
                        <a href=with_statuses(vec![count.status])
                            data-status=count.status.as_str()
                            aria-current=here.then_some("page")>
                            {count.status.as_str()} " " <strong>{shown(count.count, count.or_more)}</strong>
                        </a>
                    }
                })
                .collect_view()}
        </nav>
    }
    .into_any()
}
