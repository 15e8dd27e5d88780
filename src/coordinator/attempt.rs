//! One project of a batch, from its opening to what it asks the batch's finish ([`prepare`]):
//! the claim's and the current proof's verdicts, the first observation's checks, its revisions
//! read in loads within the memory budget and fed to the pure planner. The transaction around
//! it, and the finish, are `batch.rs`'s; [`attempt`] is a project alone, a batch of one.

use std::collections::HashMap;
use std::time::Duration;

use crate::limits::MAX_REVISION_BYTES;
use crate::model::Digest;
use crate::model::GenerationStatus;
use crate::planner::{ActiveHead, Snapshot, SnapshotBuilder, StoredLength};
use crate::rejection::Rejection;
use crate::report::{Outcome, Unresolved};
use crate::revision::{self, RevisionStream};
use crate::store::{
    Attempt, Dialect, ObservedHead, Opening, Replay, RevisionBytes, Session, StoreError, answered,
};

use super::budget::{MemoryBudget, Reservation};
pub(super) use super::readings::Readings;

/// How an attempt ended: final, or worth another try.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Final for this run.
    Done(Outcome),
    /// Try again later.
    Retry(Unresolved, String),
    /// A cause no retry heals and no other project escapes (a login without its grants, a
    /// damaged database file): the run stops and exits 1.
    Halt(String),
}

/// Runs one attempt of a project alone on a worker's session, in one transaction (see
/// [`Session::transaction`]): a batch of one, whose reads wait for the budget. Database errors
/// become a retryable step. Every wait for the database is bounded by
/// [`Session::answer_timeout`].
pub async fn attempt(session: &mut Session, budget: &MemoryBudget, project_id: &str) -> Step {
    super::batch::attempt_alone(session, budget, project_id)
        .await
        .unwrap_or_else(|e| {
            if e.is_fatal() {
                Step::Halt(e.to_string())
            } else {
                Step::Retry(Unresolved::Database, e.to_string())
            }
        })
}

fn heads(observed: &[ObservedHead]) -> Vec<ActiveHead> {
    observed.iter().map(|o| o.head.clone()).collect()
}

/// Compares two observations: a changed (package, installation, generation) set is vector
/// drift; the same heads with any other difference is generation drift.
pub fn drift(first: &[ObservedHead], second: &[ObservedHead]) -> Option<(Unresolved, String)> {
    fn key(h: &ObservedHead) -> (&str, &str, i64) {
        (
            h.head.package_name.as_str(),
            h.head.installation_id.as_str(),
            h.head.generation,
        )
    }
    if first.len() != second.len() || first.iter().zip(second).any(|(a, b)| key(a) != key(b)) {
        return Some((
            Unresolved::VectorDrift,
            "the active package set changed while the snapshot was built; will retry".into(),
        ));
    }
    if let Some((a, _)) = first.iter().zip(second).find(|(a, b)| a != b) {
        return Some((
            Unresolved::GenerationDrift,
            format!(
                "package {}: generation {} changed while the snapshot was built; will retry",
                a.head.package_name, a.head.generation
            ),
        ));
    }
    None
}

fn not_active(observed: &[ObservedHead]) -> Option<String> {
    observed
        .iter()
        .find(|o| o.status != Some(GenerationStatus::Active))
        .map(|o| {
            format!(
                "package {}: the head points at generation {}, which is {}; waiting for the \
             activation to settle",
                o.head.package_name,
                o.head.generation,
                o.status.map_or("missing", GenerationStatus::as_str)
            )
        })
}

/// Memory held for revisions that come with a project's first observation: the row as it
/// arrived and the contents taken out of it, and the parser's state for one of them.
/// `cap` is the most one project's revisions may hold to come along.
pub(super) fn inline_reservation(projects: usize, cap: u64) -> u64 {
    2 * cap * projects as u64 + parse_held(cap)
}

/// The outcome of a rejection, as reported.
pub(super) fn rejected(rejection: Rejection) -> Step {
    Step::Done(Outcome::Rejected {
        code: rejection.code.into(),
        detail: rejection.detail,
    })
}

/// The outcome of a snapshot inserted now.
pub(super) fn published(snapshot: &Snapshot) -> Step {
    Step::Done(Outcome::Published {
        snapshot_digest: Some(snapshot.snapshot_digest.clone()),
    })
}

/// The outcome of a snapshot whose insert met a stored one: the same (an exact replay) or
/// another for the same vector (`replay-mismatch`).
pub(super) fn replayed(snapshot: &Snapshot, replay: Replay) -> Step {
    let digest = snapshot.snapshot_digest.clone();
    match replay {
        Replay::Exact => Step::Done(Outcome::Replayed {
            snapshot_digest: Some(digest),
        }),
        Replay::Mismatch { existing } => Step::Done(Outcome::Integrity {
            detail: format!(
                "replay-mismatch: project {} vector {} already has snapshot {existing}, but \
                 this build gives {digest}; the stored row is kept, investigate which is right \
                 with `package-executor verify`",
                snapshot.project_id.as_str(),
                snapshot.active_vector_digest.as_str(),
            ),
        }),
    }
}

/// Whether a read may wait for memory, as a type: a lone attempt waits ([`Wait`]), holding
/// nothing else; a batch's reads never wait ([`Now`]), since the batch holds memory for the
/// projects it has built. A read that finds no room gives [`Room::Short`] instead: [`NoRoom`] in
/// a batch, and nothing at all for a project alone (`Infallible`: it is always decided).
pub(super) trait Room: Copy + Send + Sync {
    /// What a read that found no room now gives instead of its reservation.
    type Short: Send;
    /// Whether the reads wait for the budget.
    const WAITS: bool;
    /// `bytes` of the budget: waited for, or taken now if free.
    fn hold(
        self,
        budget: &MemoryBudget,
        bytes: u64,
    ) -> impl Future<Output = Result<Reservation, Self::Short>> + Send;
    /// What a project past its batch's observation cap gives (the store opens a batch's first
    /// project whole, so a project alone is never past it).
    fn deferred(self) -> Result<(), Self::Short>;
}

/// A project alone: its reads wait for the budget, holding nothing else.
#[derive(Clone, Copy, Debug)]
pub(super) struct Wait;

/// A batch: its reads take the budget now or give way.
#[derive(Clone, Copy, Debug)]
pub(super) struct Now;

/// A batch's project whose reads found no room now (or that came past the batch's observation
/// cap): nothing of it was decided, and the batch closes before it.
#[derive(Clone, Copy, Debug)]
pub(super) struct NoRoom;

impl Room for Wait {
    type Short = std::convert::Infallible;
    const WAITS: bool = true;
    async fn hold(self, budget: &MemoryBudget, bytes: u64) -> Result<Reservation, Self::Short> {
        Ok(budget.reserve(bytes).await)
    }
    fn deferred(self) -> Result<(), Self::Short> {
        Ok(())
    }
}

impl Room for Now {
    type Short = NoRoom;
    const WAITS: bool = false;
    async fn hold(self, budget: &MemoryBudget, bytes: u64) -> Result<Reservation, Self::Short> {
        budget.try_reserve(bytes).ok_or(NoRoom)
    }
    fn deferred(self) -> Result<(), Self::Short> {
        Err(NoRoom)
    }
}

/// How an attempt's reads go: whether they may wait for the budget, and the readings its batch
/// keeps (see `readings.rs`).
pub(super) struct Reads<'r, R> {
    pub(super) room: R,
    pub(super) readings: &'r mut Readings,
}

/// What an opened project comes to before its outcome is written.
#[derive(Debug)]
pub(super) enum Prepared {
    /// Nothing to write and worth another try: a claim held elsewhere, a head that is not
    /// active yet.
    Retry(Step),
    /// Final without a build (already current, a rejection that stands): clears the mark.
    Read(Step, Option<i64>),
    /// Built: the snapshot to append, if the second observation equals the first.
    Planned {
        snapshot: Snapshot,
        first: Vec<ObservedHead>,
        mark: Option<i64>,
    },
    /// Built: the rejection to record, if the second observation equals the first.
    Rejected {
        rejection: Rejection,
        vector: Digest,
        first: Vec<ObservedHead>,
        mark: Option<i64>,
    },
}

/// Takes an opened project as far as it goes without writing: an outcome read from the
/// opening, or a build from its revisions; the room's [`Room::Short`] when its reads found no
/// room now.
pub(super) async fn prepare<R: Room>(
    a: &mut Attempt<'_>,
    budget: &MemoryBudget,
    project_id: &str,
    mut opening: Opening,
    reads: Reads<'_, R>,
    limit: Option<Duration>,
) -> Result<Result<Prepared, R::Short>, StoreError> {
    if !opening.claimed {
        return Ok(Ok(Prepared::Retry(Step::Retry(
            Unresolved::ClaimedElsewhere,
            "another replica holds this project's claim".into(),
        ))));
    }
    // Past its batch's observation cap: the batch closes before it, and the next one takes it.
    if opening.deferred
        && let Err(short) = reads.room.deferred()
    {
        return Ok(Err(short));
    }
    // A final outcome clears the project's mark, if it still holds the version read now.
    let mark = opening.mark;
    // Deleted since it was listed: no snapshot is ever stored for a project id without a
    // project row (its deletion took its mark; one read before that is cleared all the same).
    if opening.vanished {
        return Ok(Ok(Prepared::Read(Step::Done(Outcome::Vanished), mark)));
    }
    if let Some(snapshot_digest) = opening.current {
        return Ok(Ok(Prepared::Read(
            Step::Done(Outcome::AlreadyCurrent {
                snapshot_digest: Some(snapshot_digest),
            }),
            mark,
        )));
    }
    let first = std::mem::take(&mut opening.heads);
    if let Some(detail) = not_active(&first) {
        return Ok(Ok(Prepared::Retry(Step::Retry(
            Unresolved::GenerationDrift,
            detail,
        ))));
    }
    let builder = SnapshotBuilder::new(project_id, heads(&first));
    let vector = builder.vector_digest().clone();
    if let Some(r) = opening.rejections.get(&vector) {
        return Ok(Ok(Prepared::Read(
            Step::Done(Outcome::Rejected {
                code: r.reason.clone(),
                detail: r.detail.clone(),
            }),
            mark,
        )));
    }
    let inline = std::mem::take(&mut opening.inline);
    let built = build(a, budget, builder, &opening.lengths, inline, reads, limit).await?;
    Ok(built.map(|built| match built {
        Ok(snapshot) => Prepared::Planned {
            snapshot,
            first,
            mark,
        },
        Err(rejection) => Prepared::Rejected {
            rejection,
            vector,
            first,
            mark,
        },
    }))
}

/// Revisions at least this large are parsed off the async thread, so that one big revision
/// does not hold up the other workers' round trips.
const OFFLOAD_BYTES: usize = 256 * 1024;

/// Runs `work` on the blocking pool when `large`, inline otherwise.
async fn cpu<T: Send + 'static>(
    large: bool,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, StoreError> {
    if large {
        tokio::task::spawn_blocking(work)
            .await
            .map_err(|e| StoreError::Other(format!("a revision parser task failed: {e}")))
    } else {
        Ok(work())
    }
}

/// Revisions are read together, in one statement (a load), up to this many stored bytes; a
/// larger revision is read alone. Typical revisions are a few KiB, so most projects need one read.
const LOAD_BYTES: u64 = 1 << 20;

/// A project whose revisions together hold at most this many bytes gets them with its first
/// observation (no read of its own). The attempt holds twice this against the
/// memory budget meanwhile: the row as it arrived and the contents taken out of it.
pub(super) const INLINE_BYTES: u64 = 256 << 10;

/// A revision larger than [`LOAD_BYTES`] is read in slices and parsed as they arrive
/// ([`RevisionStream`]), so it is never whole in memory. On PostgreSQL a slice reads only its
/// own stored chunks and costs the driver about its own size.
const SLICE_BYTES_PG: u64 = 1 << 20;

/// SQLite loads the whole value to cut a slice from it, once per statement, so its slices are
/// larger (fewer whole loads) while still far below the revision's size.
const SLICE_BYTES_SQLITE: u64 = 4 << 20;

/// The most one read reserves: the largest revision the limits allow, sliced on SQLite (the
/// whole value SQLite loads, two slices, the reader's state). A budget smaller than this still
/// reads it, alone, so the memory bound counts the larger of the two.
pub const LARGEST_READ_BYTES: u64 =
    MAX_REVISION_BYTES as u64 + 2 * SLICE_BYTES_SQLITE + revision::HELD_BYTES;

/// What reading revisions of `need` stored bytes holds besides their bytes: the reader's
/// state ([`revision::HELD_BYTES`] at most, and never more than a fixed multiple of the text,
/// since nothing is built that the text does not spell out: a value tree of at most 32 bytes
/// per byte of text, the text of one string, and canonical bodies).
pub(super) fn parse_held(need: u64) -> u64 {
    revision::HELD_BYTES.min(40 * need + (64 << 10))
}

/// A load: heads whose revisions are read in one go (head index, approved permissions, revision
/// digest), in order. (A batch is a set of projects; a load, of one project's revisions.)
struct Load {
    heads: Vec<(usize, Vec<String>, String)>,
    /// Their stored bytes, together.
    bytes: u64,
    /// The check that ended the load, reported once the heads before it are read.
    failed: Option<Rejection>,
}

/// The heads from `next` on that pass their row and length checks, in vector order, up to
/// [`LOAD_BYTES`] (a larger revision alone); advances `next` past them.
fn next_load(
    builder: &SnapshotBuilder,
    lengths: &HashMap<String, StoredLength>,
    next: &mut usize,
) -> Load {
    let mut load = Load {
        heads: Vec::new(),
        bytes: 0,
        failed: None,
    };
    while *next < builder.heads().len() {
        let approved = match builder.check_row(*next) {
            Ok(p) => p,
            Err(r) => {
                load.failed = Some(r);
                break;
            }
        };
        let digest = builder.heads()[*next].revision_digest.clone();
        let stored = lengths.get(&digest).copied();
        if let Err(r) = builder.check_stored(*next, stored) {
            load.failed = Some(r);
            break;
        }
        let size = stored.map_or(0, |s| s.actual_length.max(0) as u64);
        if !load.heads.is_empty() && load.bytes + size > LOAD_BYTES {
            break;
        }
        load.heads.push((*next, approved, digest));
        load.bytes += size;
        *next += 1;
    }
    load
}

/// Reads the revisions in vector order, in loads sized from their stored lengths, and feeds
/// the builder; a load's bytes are dropped (and their budget returned) before the next load
/// is fetched. `lengths` are the stored lengths read with the first observation (never the
/// bytes). The checks run head by head in vector order exactly as if each revision were read
/// alone, so the first failure is the same. Ends with the planned snapshot or the rejection.
async fn build<R: Room>(
    a: &mut Attempt<'_>,
    budget: &MemoryBudget,
    mut builder: SnapshotBuilder,
    lengths: &HashMap<String, StoredLength>,
    mut inline: HashMap<String, Vec<u8>>,
    mut reads: Reads<'_, R>,
    limit: Option<Duration>,
) -> Result<Result<Result<Snapshot, Rejection>, R::Short>, StoreError> {
    if let Err(r) = builder.check_project() {
        return Ok(Ok(Err(r)));
    }
    let heads = builder.heads().len();
    let (mut next, mut total) = (0, 0);
    while next < heads {
        let Load {
            heads: load,
            bytes: need,
            failed,
        } = next_load(&builder, lengths, &mut next);
        let known = |(i, approved, digest): &(usize, Vec<String>, String)| {
            reads
                .readings
                .has(digest, &builder.heads()[*i].package_name, approved)
        };
        let in_hand = load.iter().all(|h| known(h) || inline.contains_key(&h.2));
        let added;
        (builder, added) = match load.as_slice() {
            [] => (builder, Ok(())),
            _ if in_hand => {
                let revisions = load
                    .iter()
                    .filter_map(|(_, _, d)| inline.remove_entry(d))
                    .collect();
                feed(builder, load, revisions, reads.readings).await?
            }
            [(i, approved, digest)] if need > LOAD_BYTES => {
                let head = (*i, approved.as_slice(), digest.as_str());
                match read_in_slices(a, budget, builder, head, need, &mut reads, limit).await? {
                    Ok(read) => read,
                    Err(short) => return Ok(Err(short)),
                }
            }
            _ => match read_together(a, budget, builder, load, need, &mut reads, limit).await? {
                Ok(read) => read,
                Err(short) => return Ok(Err(short)),
            },
        };
        total += need;
        if let Err(r) = added {
            return Ok(Ok(Err(r)));
        }
        if let Some(r) = failed {
            return Ok(Ok(Err(r)));
        }
    }
    cpu(total >= OFFLOAD_BYTES as u64, move || builder.finish())
        .await
        .map(Ok)
}

/// One large revision, `need` stored bytes, read slice by slice into a [`RevisionStream`]. The
/// budget holds what is really in memory: a slice or two on PostgreSQL; on SQLite also the whole
/// value SQLite loads to cut each slice.
async fn read_in_slices<R: Room>(
    a: &mut Attempt<'_>,
    budget: &MemoryBudget,
    builder: SnapshotBuilder,
    (i, approved, digest): (usize, &[String], &str),
    need: u64,
    reads: &mut Reads<'_, R>,
    limit: Option<Duration>,
) -> Result<Result<Read, R::Short>, StoreError> {
    // What is held while a slice is parsed: on PostgreSQL the driver's read buffer, which the
    // row borrows (up to two slices while it grows); on SQLite the whole value SQLite loaded to
    // cut the slice, the slice and its copy in the row.
    let (slice, held) = match a.dialect() {
        Dialect::Postgres => (SLICE_BYTES_PG, 2 * SLICE_BYTES_PG.min(need)),
        Dialect::Sqlite => (SLICE_BYTES_SQLITE, need + 2 * SLICE_BYTES_SQLITE.min(need)),
    };
    let _reservation = match reads.room.hold(budget, held + parse_held(need)).await {
        Ok(reservation) => reservation,
        Err(short) => return Ok(Err(short)),
    };
    let package = builder.heads()[i].package_name.clone();
    let mut stream = RevisionStream::new(&package, approved);
    let mut offset = 0;
    while offset < need {
        let len = slice.min(need - offset);
        let part = answered(limit, a.revision_slice(digest, offset, len))
            .await?
            .filter(|p| p.len() as u64 == len)
            .ok_or_else(|| {
                StoreError::Transient(format!(
                    "revision {digest} vanished or changed length while read"
                ))
            })?;
        stream = cpu(true, move || {
            part.bytes().map(|b| {
                stream.feed(b);
                stream
            })
        })
        .await??;
        offset += len;
    }
    let streamed = cpu(true, move || stream.finish()).await?;
    reads.readings.keep(digest, &package, approved, &streamed);
    cpu(true, move || {
        let mut builder = builder;
        let added = builder.add_streamed(i, streamed);
        (builder, added)
    })
    .await
    .map(Ok)
}

/// Several revisions (together at most [`LOAD_BYTES`], or one that fits) in one statement.
async fn read_together<R: Room>(
    a: &mut Attempt<'_>,
    budget: &MemoryBudget,
    builder: SnapshotBuilder,
    load: Vec<(usize, Vec<String>, String)>,
    need: u64,
    reads: &mut Reads<'_, R>,
    limit: Option<Duration>,
) -> Result<Result<Read, R::Short>, StoreError> {
    let _reservation = match reads.room.hold(budget, need + parse_held(need)).await {
        Ok(reservation) => reservation,
        Err(short) => return Ok(Err(short)),
    };
    // A revision the batch has already read for an earlier project is not fetched again.
    let unread: Vec<&(usize, Vec<String>, String)> = load
        .iter()
        .filter(|(i, approved, d)| {
            !reads
                .readings
                .has(d, &builder.heads()[*i].package_name, approved)
        })
        .collect();
    let digests: Vec<&str> = unread.iter().map(|(_, _, d)| d.as_str()).collect();
    let revisions = answered(limit, a.revision_contents(&digests)).await?;
    if let Some((_, _, d)) = unread.iter().find(|(_, _, d)| !revisions.contains_key(d)) {
        return Err(StoreError::Transient(format!(
            "revision {d} vanished while read"
        )));
    }
    feed(builder, load, revisions, reads.readings).await.map(Ok)
}

/// A load read and fed: the builder, and whether its heads were added or which rejection
/// stopped them.
type Read = (SnapshotBuilder, Result<(), Rejection>);

/// Revision bytes as a load holds them: borrowed from the rows they came in, or owned.
trait Held: Send + 'static {
    fn held(&self) -> Result<&[u8], StoreError>;
}

impl Held for RevisionBytes {
    fn held(&self) -> Result<&[u8], StoreError> {
        self.bytes()
    }
}

impl Held for Vec<u8> {
    fn held(&self) -> Result<&[u8], StoreError> {
        Ok(self)
    }
}

/// Feeds a load's revisions to the builder in vector order, off the async thread when they
/// are large; stops at the first rejection. The revisions are dropped before returning.
async fn feed<R: Held>(
    builder: SnapshotBuilder,
    load: Vec<(usize, Vec<String>, String)>,
    revisions: HashMap<String, R>,
    readings: &mut Readings,
) -> Result<Read, StoreError> {
    let bytes: usize = revisions
        .values()
        .map(|r| r.held().map_or(0, <[u8]>::len))
        .sum();
    let mut kept = std::mem::replace(readings, Readings::none());
    let (builder, added, kept) = cpu(bytes >= OFFLOAD_BYTES, move || {
        let mut builder = builder;
        let mut added = Ok(Ok(()));
        for (i, approved, digest) in &load {
            let package = builder.heads()[*i].package_name.clone();
            added = match kept.take(digest, &package, approved) {
                Some(streamed) => Ok(builder.add_streamed(*i, streamed)),
                None => match revisions.get(digest).map(Held::held) {
                    Some(Ok(b)) => {
                        let mut stream = RevisionStream::new(&package, approved);
                        stream.feed(b);
                        let streamed = stream.finish();
                        kept.keep(digest, &package, approved, &streamed);
                        Ok(builder.add_streamed(*i, streamed))
                    }
                    Some(Err(e)) => Err(e),
                    // Both callers check that every head's revision is present; were one
                    // missing, its package would silently drop out of the snapshot, so fail
                    // the attempt.
                    None => Err(StoreError::Other(format!(
                        "revision {digest} is missing from the load read for it; this is a \
                         bug, please report it"
                    ))),
                },
            };
            if !matches!(added, Ok(Ok(()))) {
                break;
            }
        }
        drop(revisions);
        (builder, added, kept)
    })
    .await?;
    *readings = kept;
    Ok((builder, added?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(package: &str, revision: &str) -> ActiveHead {
        ActiveHead {
            package_name: package.into(),
            installation_id: format!("{package}-i"),
            generation: 1,
            generation_digest: format!("sha256:{}", "1".repeat(64)),
            lock_digest: format!("sha256:{}", "2".repeat(64)),
            revision_digest: revision.into(),
            approved_permissions: "[]".into(),
        }
    }

    /// A head whose revision is not in its load fails the attempt instead of leaving its
    /// package out of the snapshot.
    #[tokio::test]
    async fn a_revision_missing_from_its_load_fails_the_attempt() {
        let content = br#"{"schema":"qinglong/materialized-revision@v1","package":{"name":"x","version":"1.0.0"},"tools":[]}"#.to_vec();
        let a = crate::model::Digest::of(&content).as_str().to_owned();
        let b = format!("sha256:{}", "b".repeat(64));
        let builder = SnapshotBuilder::new("p", vec![head("x", &a), head("y", &b)]);
        let load = vec![(0, vec![], a.clone()), (1, vec![], b.clone())];
        let revisions = HashMap::from([(a.clone(), content)]);
        let err = feed(builder, load, revisions, &mut Readings::none())
            .await
            .err()
            .map(|e| e.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains(&b) && e.contains("missing")),
            "{err:?}"
        );
    }
}
