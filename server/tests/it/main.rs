//! Conveyor's integration tests: one test binary (one link, not one per file), one module per
//! concern. Each test gets a database of its own, cloned from a migrated template and dropped
//! when the test ends (`support::TestDb`).
//!
//! `cargo test -p server --test it` runs them all, `… --test it faults::` one module, and
//! `… --test it faults::a_repeated_create_with_the_same_key_returns_the_first_job -- --exact`
//! one test.

mod support;

mod access;
mod accounts;
mod api_flow;
mod bulk;
mod create_groups;
mod dataset_lifecycle;
mod datasets;
mod defences;
mod exactly_once;
mod exports;
mod faults;
mod health;
mod history;
mod hostile_files;
mod hostile_requests;
mod import_review;
mod items;
mod job_list;
mod job_trees;
mod job_types;
mod jobs_with_files;
mod live_events;
mod logs;
mod metrics;
mod openapi;
mod progress_feed;
mod queue_health;
mod schema_pins;
mod small_jobs;
mod streamed_sheets;
mod topology;
mod workbooks;
mod workers;
