//! Previous / Next over a keyset-paged list read by the browser (rows in error, items): the
//! cursors of the pages read so far, the last one's page shown.

use leptos::prelude::*;

/// The pager under a page: Previous while there is a page before, Next when the page says
/// where the next starts. `cursors` holds each page's `after`, the first's 0.
#[component]
pub fn Pager(
    cursors: RwSignal<Vec<i64>>,
    /// Where the next page starts; none on the last.
    next: Option<i64>,
    /// The Next button's test id.
    next_testid: &'static str,
) -> impl IntoView {
    view! {
        <p class="pager">
            {move || (cursors.with(|c| c.len()) > 1).then(|| view! {
                <button class="secondary" on:click=move |_| cursors.update(|c| { c.pop(); })>
                    "Previous"
                </button>
            })}
            {next.map(|after| view! {
                <button
                    class="secondary"
                    data-testid=next_testid
                    on:click=move |_| cursors.update(|c| {
                        // Pressed twice while the page loads: once.
                        if c.last() != Some(&after) {
                            c.push(after);
                        }
                    })
                >
                    "Next"
                </button>
            })}
        </p>
    }
}
