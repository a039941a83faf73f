//! The standard `process_*` families (the names every client library's
//! process collector uses), one series per daemon under a `daemon` label:
//! the proxy's own figures, read at the scrape, and the supervisor's, which
//! came with its metrics. One scrape of the proxy thus covers both
//! processes of the router; without the supervisor its series are absent.

use strata_protocol::wire::ProcessFigures;

use super::Exposition;

/// How a family's value is read from a daemon's figures.
type Figure = fn(&ProcessFigures) -> Option<f64>;

/// A whole-number figure as a sample value.
fn whole(value: Option<u64>) -> Option<f64> {
    value.map(|v| v as f64)
}

/// Appends the families, each with the daemons that have a figure for it.
pub(super) fn render(
    out: &mut Exposition,
    proxy: &ProcessFigures,
    supervisor: Option<&ProcessFigures>,
) {
    let daemons = [("proxy", Some(proxy)), ("supervisor", supervisor)];
    let families: [(&str, &str, &str, Figure); 6] = [
        (
            "process_cpu_seconds_total",
            "counter",
            "User and system CPU time of the daemon, seconds.",
            |p| p.cpu_seconds,
        ),
        (
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory of the daemon.",
            |p| whole(p.resident_memory_bytes),
        ),
        (
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory of the daemon.",
            |p| whole(p.virtual_memory_bytes),
        ),
        (
            "process_open_fds",
            "gauge",
            "Open file descriptors of the daemon.",
            |p| whole(p.open_fds),
        ),
        (
            "process_max_fds",
            "gauge",
            "The daemon's limit on open file descriptors.",
            |p| whole(p.max_fds),
        ),
        (
            "process_start_time_seconds",
            "gauge",
            "Start time of the daemon, seconds since the Unix epoch.",
            |p| p.start_time_seconds,
        ),
    ];
    for (name, kind, help, figure) in families {
        out.family_named(name, kind, help);
        for (daemon, figures) in daemons {
            if let Some(value) = figures.and_then(figure) {
                out.sample_named(name, &[("daemon", daemon)], value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_daemons_carry_the_standard_names_under_a_daemon_label() {
        let proxy = ProcessFigures {
            cpu_seconds: Some(1.5),
            resident_memory_bytes: Some(4096),
            open_fds: None,
            ..ProcessFigures::default()
        };
        let supervisor = ProcessFigures {
            open_fds: Some(12),
            ..proxy.clone()
        };
        let mut out = Exposition {
            openmetrics: true,
            ..Exposition::default()
        };
        render(&mut out, &proxy, Some(&supervisor));
        let text = out.finish();
        assert!(
            text.contains("# TYPE process_cpu_seconds counter\n"),
            "{text}"
        );
        assert!(
            text.contains("\nprocess_cpu_seconds_total{daemon=\"proxy\"} 1.5\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "\nprocess_resident_memory_bytes{daemon=\"proxy\"} 4096\n\
                 process_resident_memory_bytes{daemon=\"supervisor\"} 4096\n"
            ),
            "{text}"
        );
        // A figure that could not be read is absent, not 0.
        assert!(
            text.contains(
                "# TYPE process_open_fds gauge\nprocess_open_fds{daemon=\"supervisor\"} 12\n# HELP"
            ),
            "{text}"
        );
        // Without the supervisor, its series are absent.
        let mut out = Exposition::default();
        render(&mut out, &proxy, None);
        let text = out.finish();
        assert!(!text.contains("supervisor"), "{text}");
        assert!(
            text.contains("process_resident_memory_bytes{daemon=\"proxy\"} 4096\n"),
            "{text}"
        );
    }
}
