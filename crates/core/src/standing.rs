//! Where a project stands, as `explain` reads it from the live tables, and what to tell a person
//! about its mark in the pending index and the next step. Pure: the store reads the tables, the
//! command prints.

/// Where a project stands, as `explain` reads it from the live tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// A snapshot is proven current.
    Current,
    /// A rejection recorded for the live vector stands.
    Rejected,
    /// A head points at a generation that is not `active` (or has no row): a build can only
    /// end in `generation-drift` until the generation's activation commits, which marks the
    /// project.
    AwaitingActivation,
    /// A head's revision is not stored yet: nothing is recorded, and its arrival marks the
    /// project.
    AwaitingRevision,
    /// Neither: a run that looks at it builds it.
    Buildable,
}

/// What `explain` says of a project's mark in the pending index (contract section 9), and the
/// next step when the project is neither current nor rejected: a plain `run` looks only at
/// marked projects, so an unmarked one that is not current waits for a full scan, unless it
/// waits for a revision, whose arrival marks it.
pub fn pending_lines(
    project: &str,
    mark: Option<i64>,
    standing: Standing,
) -> (String, Option<String>) {
    let project = crate::quote::shown(project);
    let pending = match (mark, standing) {
        (Some(v), Standing::AwaitingActivation) => format!(
            "marked (version {v}): the next `run` looks at it, and reports generation-drift \
             while a head's generation is not active"
        ),
        (Some(v), Standing::AwaitingRevision) => format!(
            "marked (version {v}): the next `run` looks at it, and reports revision-missing \
             while the revision is not stored"
        ),
        (Some(v), Standing::Buildable) => {
            format!("marked (version {v}): the next `run` looks at it and builds it")
        }
        (Some(v), _) => format!("marked (version {v}): the next `run` looks at it"),
        (None, Standing::Current) => {
            "not marked: nothing changed since it was last dealt with".to_owned()
        }
        (None, Standing::Rejected) => {
            "not marked: the rejection stands until its packages change".to_owned()
        }
        (None, Standing::AwaitingActivation) => "not marked: the generation's activation marks \
             it, and the next `run` then builds it"
            .to_owned(),
        (None, Standing::AwaitingRevision) => "not marked: storing the revision marks it, and \
             the next `run` then builds it"
            .to_owned(),
        (None, Standing::Buildable) => "not marked, though not current: a plain `run` skips it \
             (its mark was lost); `run --full-scan`, the chart's periodic sweep, finds it"
            .to_owned(),
    };
    let next = match (standing, mark) {
        (Standing::Current | Standing::Rejected, _) => None,
        (Standing::AwaitingActivation, _) => Some(
            "finish the generation's activation (the control plane's job, or `package-executor \
             sources activate`), or point the head at an active generation; a publish now can \
             only report generation-drift"
                .to_owned(),
        ),
        (Standing::AwaitingRevision, _) => Some(
            "materialize the missing revision (the control plane's job); or activate another \
             generation of the package"
                .to_owned(),
        ),
        (Standing::Buildable, Some(_)) => Some(format!(
            "`package-executor publish {project}` (or wait for the next run)"
        )),
        (Standing::Buildable, None) => Some(format!(
            "`package-executor publish {project}` (or `package-executor run --full-scan`)"
        )),
    };
    (pending, next)
}

impl Standing {
    /// What the live tables say, first match wins: a snapshot proven current, a rejection
    /// recorded for the live vector, a head whose generation is not active (the observation
    /// stops there, before any revision is read), a head whose revision is not stored yet, else
    /// buildable.
    pub fn of(
        current: bool,
        rejected: bool,
        awaiting_activation: bool,
        awaiting_revision: bool,
    ) -> Self {
        if current {
            Self::Current
        } else if rejected {
            Self::Rejected
        } else if awaiting_activation {
            Self::AwaitingActivation
        } else if awaiting_revision {
            Self::AwaitingRevision
        } else {
            Self::Buildable
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Standing, pending_lines};

    #[test]
    fn explain_says_whether_a_run_will_look_at_the_project() {
        let (line, next) = pending_lines("p", Some(7), Standing::Buildable);
        assert!(line.starts_with("marked (version 7)"), "{line}");
        assert!(line.ends_with("builds it"), "{line}");
        assert_eq!(
            next.as_deref(),
            Some("`package-executor publish p` (or wait for the next run)")
        );
        let (line, next) = pending_lines("p", None, Standing::Current);
        assert!(line.starts_with("not marked: nothing changed"), "{line}");
        assert_eq!(next, None);
        let (line, next) = pending_lines("p", None, Standing::Rejected);
        assert!(line.contains("rejection stands"), "{line}");
        assert_eq!(next, None);
        // A lost mark: only a full scan or a publish builds it.
        let (line, next) = pending_lines("p", None, Standing::Buildable);
        assert!(
            line.contains("--full-scan") && line.contains("skips it"),
            "{line}"
        );
        assert_eq!(
            next.as_deref(),
            Some("`package-executor publish p` (or `package-executor run --full-scan`)")
        );
        // Marked and rejected (the packages changed again): the run looks, no step to take.
        let (line, next) = pending_lines("p", Some(9), Standing::Rejected);
        assert!(line.starts_with("marked"), "{line}");
        assert_eq!(next, None);
    }

    /// A head on a `queued` generation can only drift: `explain` must not send a person to
    /// `publish` for it.
    #[test]
    fn explain_says_a_generation_not_active_is_waited_for_not_published() {
        assert_eq!(
            Standing::of(false, false, true, true),
            Standing::AwaitingActivation
        );
        for mark in [Some(3), None] {
            let (line, next) = pending_lines("p", mark, Standing::AwaitingActivation);
            let next = next.unwrap();
            assert!(!next.starts_with("`package-executor publish"), "{next}");
            assert!(next.contains("activation"), "{next}");
            assert!(
                line.contains("generation") || line.contains("activation"),
                "{line}"
            );
        }
    }

    #[test]
    fn explain_says_a_missing_revision_is_waited_for_not_a_verdict() {
        // The run that met it cleared the mark; the revision's arrival marks it again.
        let (line, next) = pending_lines("p", None, Standing::AwaitingRevision);
        assert!(line.contains("storing the revision marks it"), "{line}");
        assert!(!line.contains("stands") && !line.contains("lost"), "{line}");
        assert!(next.is_some_and(|n| n.contains("materialize the missing revision")));
        let (line, _) = pending_lines("p", Some(3), Standing::AwaitingRevision);
        assert!(line.contains("revision-missing while"), "{line}");
    }
}
