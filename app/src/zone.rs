//! Times in the reader's time zone. The server renders times in UTC (it does not know the
//! zone), and once the page is live in the browser every time switches to the browser's zone,
//! marked, so the hydrated page matches the HTML it came in before it changes.

use chrono::{DateTime, FixedOffset, Utc};
use leptos::prelude::*;

/// The reader's offset from UTC: `None` until the browser says (UTC meanwhile).
#[derive(Clone, Copy)]
pub struct Zone(RwSignal<Option<FixedOffset>>);

impl Zone {
    /// Provides the zone to every page; call once, in the app.
    pub fn provide() -> Self {
        let zone = Self(RwSignal::new(None));
        provide_context(zone);
        zone
    }

    /// Learns the browser's zone (from an effect: only in the browser, after hydration).
    pub fn learn(self) {
        #[cfg(feature = "hydrate")]
        {
            let minutes_west = js_sys::Date::new_0().get_timezone_offset() as i32;
            self.0.set(FixedOffset::west_opt(minutes_west * 60));
        }
    }

    /// The offset in use (tracked).
    pub fn offset(self) -> FixedOffset {
        self.0
            .get()
            .unwrap_or(FixedOffset::east_opt(0).expect("UTC"))
    }

    /// Minutes east of UTC, as the job list's `tz` parameter takes them (tracked).
    pub fn minutes_east(self) -> i32 {
        self.offset().local_minus_utc() / 60
    }

    /// "UTC" or "UTC+01:00" (tracked).
    pub fn label(self) -> String {
        match self.offset().local_minus_utc() {
            0 => "UTC".to_owned(),
            _ => format!("UTC{}", self.offset()),
        }
    }

    /// "2026-11-23 10:30:05" in the zone (tracked).
    pub fn show(self, at: DateTime<Utc>) -> String {
        at.with_timezone(&self.offset())
            .format("%Y-%m-%d %H:%M:%S")
            .to_string()
    }

    /// The day of `at` in the zone, as a date input shows it (tracked).
    pub fn day(self, at: DateTime<Utc>) -> String {
        at.with_timezone(&self.offset())
            .format("%Y-%m-%d")
            .to_string()
    }
}

pub fn use_zone() -> Zone {
    expect_context::<Zone>()
}

/// A `<time>` in the reader's zone, with the instant in UTC as its `datetime`.
#[component]
pub fn LocalTime(at: DateTime<Utc>) -> impl IntoView {
    let zone = use_zone();
    view! {
        <time datetime=at.to_rfc3339() title=move || zone.label()>{move || zone.show(at)}</time>
    }
}
