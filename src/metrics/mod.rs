//! The run's figures in the Prometheus text format (contract section 10, "Metrics"): encoded
//! here from the run summary alone, so the numbers a dashboard shows are the numbers the
//! termination message shows. A Job lives too briefly to be scraped, so the text is pushed to
//! a Pushgateway ([`push`]) and/or written for node_exporter's textfile collector ([`mod@file`]).
//! Metrics never change a run's outcome: failures are reported to the caller as text.

pub mod file;
pub mod push;

use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::report::RunSummary;

/// The `Content-Type` of what [`encode`] returns (text format 0.0.4).
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// Every metric name this program emits (the chart's alert rules may use only these).
pub const NAMES: [&str; 6] = [
    "package_executor_last_run_projects",
    "package_executor_last_run_scanned_projects",
    "package_executor_last_run_duration_seconds",
    "package_executor_last_run_exit_code",
    "package_executor_last_run_timestamp_seconds",
    "package_executor_last_success_timestamp_seconds",
];

type Labels = Vec<(&'static str, String)>;

/// The text for a run that ended at `end_unix_seconds` with `summary`.
pub fn encode(summary: &RunSummary, end_unix_seconds: f64) -> String {
    let mut registry = Registry::default();
    let projects = Family::<Labels, Gauge>::default();
    // Every outcome on every run, zeros included: POST replaces a family whole, so a series
    // of an earlier run (an `unresolved` that has cleared since) never survives to keep an
    // alert firing.
    let outcome = |name: &'static str, n: u64| {
        projects
            .get_or_create(&vec![("outcome", name.to_owned())])
            .set(clamp(n));
    };
    outcome("published", summary.published);
    outcome("replayed", summary.replayed);
    outcome("already-current", summary.already_current);
    outcome("claimed-elsewhere", summary.claimed_elsewhere);
    outcome("vanished", summary.vanished);
    for (name, counts) in [
        // One list type for the three tallies, whose codes are of three types.
        ("rejected", summary.rejected.by_text().collect::<Vec<_>>()),
        ("unresolved", summary.unresolved.by_text().collect()),
        ("integrity-violation", summary.integrity.by_text().collect()),
    ] {
        // One series per reason with a count; none, and the outcome's zero stands alone.
        if counts.is_empty() {
            outcome(name, 0);
        }
        for (reason, n) in counts {
            projects
                .get_or_create(&vec![("outcome", name.to_owned()), ("reason", reason)])
                .set(clamp(n));
        }
    }
    registry.register(
        "package_executor_last_run_projects",
        "Projects of the last run by outcome (and reason for rejected, unresolved and integrity-violation)",
        projects,
    );
    let int = |registry: &mut Registry, name: &str, help: &str, v: i64| {
        let g = Gauge::<i64>::default();
        g.set(v);
        registry.register(name, help, g);
    };
    let float = |registry: &mut Registry, name: &str, help: &str, v: f64| {
        let g = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        g.set(v);
        registry.register(name, help, g);
    };
    int(
        &mut registry,
        "package_executor_last_run_scanned_projects",
        "Distinct projects the last run attempted",
        clamp(summary.projects_scanned),
    );
    float(
        &mut registry,
        "package_executor_last_run_duration_seconds",
        "Wall-clock time of the last run",
        summary.elapsed_ms as f64 / 1000.0,
    );
    int(
        &mut registry,
        "package_executor_last_run_exit_code",
        "Exit code of the last run",
        i64::from(summary.exit_code.code()),
    );
    float(
        &mut registry,
        "package_executor_last_run_timestamp_seconds",
        "When the last run ended, Unix seconds",
        end_unix_seconds,
    );
    if summary.exit_code.is_ok() {
        float(
            &mut registry,
            "package_executor_last_success_timestamp_seconds",
            "When the last run that exited 0 ended, Unix seconds",
            end_unix_seconds,
        );
    }
    let mut text = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_text::encode(&mut text, &registry);
    text
}

fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Where the text goes at the end of a run.
#[derive(Clone, Debug, Default)]
pub struct Sinks {
    /// Pushgateway base URL.
    pub push_url: Option<String>,
    /// The `<job>` of the push path.
    pub job: String,
    /// The `<instance>` of the push path: which release, in which namespace.
    pub instance: String,
    /// The `<kind>` of the push path: `recovery` for `run`, `sweep` for `run --full-scan`.
    pub kind: &'static str,
    /// A file for node_exporter's textfile collector.
    pub file: Option<std::path::PathBuf>,
}

impl Sinks {
    /// Whether anything is to be written.
    pub fn any(&self) -> bool {
        self.push_url.is_some() || self.file.is_some()
    }

    /// Pushes and writes the run's metrics; returns one warning per sink that failed.
    pub async fn deliver(&self, summary: &RunSummary) -> Vec<String> {
        if !self.any() {
            return Vec::new();
        }
        let end = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let text = encode(summary, end);
        let mut warnings = Vec::new();
        if let Some(url) = &self.push_url {
            match push::Target::new(
                url,
                &self.job,
                &self.instance,
                self.kind,
                summary.shard.index,
            ) {
                Ok(target) => {
                    if let Err(e) = push::push(&target, &text).await {
                        warnings.push(format!("metrics push failed: {e}"));
                    }
                }
                Err(e) => warnings.push(format!("metrics not pushed: {e}")),
            }
        }
        if let Some(path) = &self.file
            && let Err(e) = file::write_atomically(path, &text)
        {
            warnings.push(format!("metrics file {} not written: {e}", path.display()));
        }
        warnings
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Shard;

    #[test]
    fn every_outcome_every_run_and_success_only_on_exit_0() {
        let mut s = RunSummary::new(Shard { index: 0, count: 1 });
        s.published = 3;
        s.rejected
            .add(crate::rejection::RejectionCode::ForbiddenField.into());
        s.projects_scanned = 4;
        let text = encode(&s, 1_700_000_000.5);
        assert!(text.contains("package_executor_last_run_projects{outcome=\"published\"} 3\n"));
        assert!(text.contains(
            "package_executor_last_run_projects{outcome=\"rejected\",reason=\"forbidden-field\"} 1\n"
        ));
        // Zeros too, so that a cleared problem replaces the series that fired its alert.
        assert!(text.contains("package_executor_last_run_projects{outcome=\"replayed\"} 0\n"));
        assert!(text.contains("package_executor_last_run_projects{outcome=\"unresolved\"} 0\n"));
        assert!(
            text.contains(
                "package_executor_last_run_projects{outcome=\"integrity-violation\"} 0\n"
            )
        );
        // A reason with a count stands for its outcome; no reason-less zero beside it.
        assert!(!text.contains("package_executor_last_run_projects{outcome=\"rejected\"} "));
        assert!(text.contains("package_executor_last_success_timestamp_seconds 1700000000.5\n"));
        s.exit_code = crate::exit::Exit::Unresolved;
        assert!(!encode(&s, 1.0).contains("last_success"));
    }
}
