//! The endpoints other than chat completions: read-only documents, each
//! answered from the config and what the supervisor last said or answers
//! now.
//!
//! - `models`: `GET /v1/models`, the enabled models and aliases.
//! - `health`: `GET /health`.
//! - `metrics`: `GET /metrics`, JSON or the Prometheus text or OpenMetrics
//!   `prometheus` writes, in the format `metrics_format` negotiates.
//! - `records`: `GET /requests`, pages of accounting records.

pub mod health;
pub mod metrics;
mod metrics_format;
pub mod models;
mod prometheus;
pub mod records;
