//! Live updates in the browser: one `EventSource` per page, closed when the page goes away.
//! The server pushes a `job` event carrying a full [`JobView`](crate::model::JobView) on every
//! change; the browser reconnects by itself and sends `Last-Event-ID`, so nothing is missed.

use serde::de::DeserializeOwned;

/// Calls `on_item` with every `job` event from the SSE stream at `url`, for as long as the
/// current reactive owner lives and `on_item` answers `true` (keep listening). Does nothing
/// during server rendering.
pub fn subscribe<T: DeserializeOwned + 'static>(
    url: String,
    on_item: impl Fn(T) -> bool + 'static,
) {
    #[cfg(feature = "hydrate")]
    {
        use leptos::prelude::on_cleanup;
        use send_wrapper::SendWrapper;
        use wasm_bindgen::{JsCast, closure::Closure};

        let Ok(source) = web_sys::EventSource::new(&url) else {
            leptos::logging::warn!("cannot open the live stream at {url}");
            return;
        };
        let stream = source.clone();
        let listener = Closure::<dyn FnMut(web_sys::MessageEvent)>::new(
            move |event: web_sys::MessageEvent| {
                let Some(text) = event.data().as_string() else {
                    return;
                };
                match serde_json::from_str::<T>(&text) {
                    Ok(item) => {
                        if !on_item(item) {
                            stream.close();
                        }
                    }
                    Err(err) => leptos::logging::warn!("bad live event: {err}"),
                }
            },
        );
        if source
            .add_event_listener_with_callback("job", listener.as_ref().unchecked_ref())
            .is_err()
        {
            source.close();
            return;
        }
        let guard = SendWrapper::new((source, listener));
        on_cleanup(move || guard.0.close());
    }
    #[cfg(not(feature = "hydrate"))]
    {
        let _ = (url, on_item);
    }
}
