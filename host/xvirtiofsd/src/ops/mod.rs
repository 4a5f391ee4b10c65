// SPDX-License-Identifier: Apache-2.0
//! What an operator sees and talks to.
//!
//! - [`control`]: the control socket (`xvirtiofsd status`, upgrade requests);
//! - [`metrics`] and [`metrics_file`]: per-queue counters (`--metrics-file`);
//! - [`logger`]: standard error or syslog (`--log-level`, `RUST_LOG`);
//! - [`status_client`]: `xvirtiofsd status`'s side: the daemons found, a
//!   table, JSON or Prometheus text;
//! - [`service_manager`]: systemd's `Type=notify`.

pub mod control;
pub mod logger;
pub mod metrics;
pub mod metrics_file;
pub mod service_manager;
pub mod status_client;
