//! Focus after a navigation inside the app: the browser keeps it on the link that was followed,
//! which the new page may not even have, so a screen reader says nothing of the new page and
//! Tab starts from nowhere. After each navigation (not the first load) focus moves to the new
//! page's heading, or to its main region while the heading is still loading.

use leptos::prelude::*;
use leptos_router::hooks::use_location;

/// Mounted once inside the router.
#[component]
pub fn FocusOnNavigate() -> impl IntoView {
    let location = use_location();
    Effect::new(move |seen: Option<String>| {
        let path = location.pathname.get();
        if seen.is_some_and(|seen| seen != path) {
            request_animation_frame(focus_page);
        }
        path
    });
}

fn focus_page() {
    let document = document();
    let target = ["main h1", "main"]
        .into_iter()
        .find_map(|selector| document.query_selector(selector).ok().flatten());
    if let Some(target) = target {
        // Focusable by script only, not a stop on the Tab key's way.
        let _ = target.set_attribute("tabindex", "-1");
        if let Ok(target) = wasm_bindgen::JsCast::dyn_into::<web_sys::HtmlElement>(target) {
            let _ = target.focus();
        }
    }
}
