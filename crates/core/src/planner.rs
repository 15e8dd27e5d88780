//! The pure snapshot planner: active vector + contributions → canonical snapshot or the one
//! rejection code contract section 6 assigns.
//!
//! It is driven one package at a time ([`SnapshotBuilder`]) so the coordinator can fetch each
//! revision alone and drop it before the next, and as a whole ([`plan`]) for tests and tools.
//! No I/O happens here; the same inputs give the same bytes on every replica.

use std::collections::BTreeSet;

use crate::canonical::{self, HashSink, Sink};
use crate::identity::{self, LedgerConflict};
use crate::limits::{MAX_DEFINITIONS, MAX_PACKAGES, MAX_REVISION_BYTES, MAX_SNAPSHOT_BYTES};
use crate::model::{self, Digest, ProjectId};
use crate::quote::quote;
use crate::rejection::{Rejection, RejectionCode as Code};
use crate::revision::{self, ValidatedDefinition};

/// `schema` of the active vector document.
pub const ACTIVE_VECTOR_SCHEMA: &str = "qinglong/active-vector@v1";
/// `schema` of the definition set document.
pub const DEFINITIONS_SCHEMA: &str = "qinglong/tool-definitions@v1";
/// `schema` of the snapshot document.
pub const SNAPSHOT_SCHEMA: &str = "qinglong/project-tool-definition-snapshot@v1";

/// One active install head joined to its generation, as the source tables hold it (unchecked:
/// checking it is the planner's job, so a bad row becomes `source-invalid`, not a crash).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ActiveHead {
    /// `package_installations.package_name`.
    pub package_name: String,
    /// `package_installations.installation_id`.
    pub installation_id: String,
    /// `package_installations.active_generation`.
    pub generation: i64,
    /// `package_generations.generation_digest`.
    pub generation_digest: String,
    /// `package_generations.lock_digest`.
    pub lock_digest: String,
    /// `package_generations.revision_digest`.
    pub revision_digest: String,
    /// `package_generations.approved_permissions` (JSON text).
    pub approved_permissions: String,
}

/// What storage knows of a revision before fetching its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredLength {
    /// The row's `byte_length` column.
    pub byte_length: i64,
    /// The length of its `content`, measured by the database.
    pub actual_length: i64,
}

/// A built snapshot, ready to append.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Checked when the build finished (see [`ProjectId`]).
    pub project_id: ProjectId,
    /// Digest of the active vector document.
    pub active_vector_digest: Digest,
    /// Digest of the definition set document.
    pub definition_digest: Digest,
    /// Digest of the canonical snapshot document.
    pub snapshot_digest: Digest,
    /// The canonical snapshot document.
    pub canonical_json: Vec<u8>,
    /// The vector, in order: the snapshot's source rows.
    pub sources: Vec<ActiveHead>,
    /// Number of definitions.
    pub definition_count: usize,
}

/// Writes the active vector array.
fn write_vector<S: Sink>(heads: &[ActiveHead], out: &mut S) {
    out.put(b"[");
    for (i, h) in heads.iter().enumerate() {
        if i > 0 {
            out.put(b",");
        }
        out.put(b"{\"generation\":");
        canonical::write_number(h.generation as f64, out);
        out.put(b",\"generationDigest\":");
        canonical::write_string(&h.generation_digest, out);
        out.put(b",\"installationId\":");
        canonical::write_string(&h.installation_id, out);
        out.put(b",\"lockDigest\":");
        canonical::write_string(&h.lock_digest, out);
        out.put(b",\"packageName\":");
        canonical::write_string(&h.package_name, out);
        out.put(b",\"revisionDigest\":");
        canonical::write_string(&h.revision_digest, out);
        out.put(b"}");
    }
    out.put(b"]");
}

/// `activeVectorDigest` of a project and its heads (sorted here by package name).
pub fn active_vector_digest(project_id: &str, heads: &[ActiveHead]) -> Digest {
    let mut sorted: Vec<&ActiveHead> = heads.iter().collect();
    sorted.sort_by(|a, b| a.package_name.cmp(&b.package_name));
    let owned: Vec<ActiveHead> = sorted.into_iter().cloned().collect();
    vector_digest_sorted(project_id, &owned)
}

fn vector_digest_sorted(project_id: &str, sorted: &[ActiveHead]) -> Digest {
    let mut sink = HashSink::default();
    sink.put(b"{\"packages\":");
    write_vector(sorted, &mut sink);
    sink.put(b",\"projectId\":");
    canonical::write_string(project_id, &mut sink);
    sink.put(b",\"schema\":");
    canonical::write_string(ACTIVE_VECTOR_SCHEMA, &mut sink);
    sink.put(b"}");
    sink.finish().0
}

/// `definitionDigest`: SHA-256 of the canonical `{"definitions":DEFS,"schema":…}`, where
/// `definitions` writes DEFS (already canonical) into the hash, so no copy of them is made.
pub fn definition_digest(definitions: impl FnOnce(&mut HashSink)) -> Digest {
    let mut set = HashSink::default();
    set.put(b"{\"definitions\":");
    definitions(&mut set);
    set.put(b",\"schema\":");
    canonical::write_string(DEFINITIONS_SCHEMA, &mut set);
    set.put(b"}");
    set.finish().0
}

/// A definition with the package it came from.
#[derive(Debug)]
struct Entry {
    def: ValidatedDefinition,
    package_name: String,
    generation: i64,
}

/// Builds one project's snapshot package by package, in vector order.
#[derive(Debug)]
pub struct SnapshotBuilder {
    /// The project id, checked once here: a bad one is kept as given, for its rejection.
    project: Result<ProjectId, String>,
    heads: Vec<ActiveHead>,
    vector_digest: Digest,
    entries: Vec<Entry>,
    body_bytes: u64,
    bodies_dropped: bool,
    /// Valid definitions seen, of which at most one more than the limit are kept.
    definition_count: usize,
}

fn parse_permissions(text: &str) -> Option<Vec<String>> {
    let value = canonical::parse_strict(text.as_bytes(), 2).ok()?;
    let items = value.as_array()?;
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let s = item.as_str()?;
        if !seen.insert(s) {
            return None;
        }
        out.push(s.to_owned());
    }
    Some(out)
}

impl SnapshotBuilder {
    /// Starts a build over a project's heads (at most 129 are ever needed).
    pub fn new(project_id: &str, mut heads: Vec<ActiveHead>) -> Self {
        heads.sort_by(|a, b| a.package_name.cmp(&b.package_name));
        let vector_digest = vector_digest_sorted(project_id, &heads);
        Self {
            project: ProjectId::parse(project_id).map_err(|_| project_id.to_owned()),
            heads,
            vector_digest,
            entries: Vec::new(),
            body_bytes: 0,
            definition_count: 0,
            bodies_dropped: false,
        }
    }

    /// The active vector digest (of the heads given, sorted).
    pub fn vector_digest(&self) -> &Digest {
        &self.vector_digest
    }

    /// The heads in vector order.
    pub fn heads(&self) -> &[ActiveHead] {
        &self.heads
    }

    /// Step 1: `too-many-packages`, then `source-invalid` for the project row.
    pub fn check_project(&self) -> Result<(), Rejection> {
        if self.heads.len() > MAX_PACKAGES {
            return Err(Rejection::new(
                Code::TooManyPackages,
                format!(
                    "project {} has more than {MAX_PACKAGES} active packages; remove packages \
                     until at most {MAX_PACKAGES} are active",
                    self.project_text()
                ),
            ));
        }
        self.checked_project_id().map(drop)
    }

    /// The project id as given.
    fn project_text(&self) -> &str {
        match &self.project {
            Ok(id) => id.as_str(),
            Err(text) => text,
        }
    }

    /// The project id, checked: a built snapshot carries a [`ProjectId`], so no build can skip
    /// this check.
    fn checked_project_id(&self) -> Result<&ProjectId, Rejection> {
        self.project.as_ref().map_err(|text| {
            Rejection::new(
                Code::SourceInvalid,
                format!(
                    "project id {} breaks ^[A-Za-z0-9._-]{{1,128}}$; the database's constraints \
                     were bypassed, repair the projects row",
                    quote(text)
                ),
            )
        })
    }

    /// Step 2a: the row formats of package `i`; returns its approved permissions.
    pub fn check_row(&self, i: usize) -> Result<Vec<String>, Rejection> {
        let h = &self.heads[i];
        let bad = |column: &str, value: &str| {
            Rejection::new(
                Code::SourceInvalid,
                format!(
                    "package {}: column {column} = {} breaks its format; the database's \
                     constraints were bypassed, repair the source row",
                    quote(&h.package_name),
                    quote(value)
                ),
            )
        };
        if !model::is_package_name(&h.package_name) {
            return Err(bad("package_name", &h.package_name));
        }
        if i > 0 && self.heads[i - 1].package_name == h.package_name {
            return Err(bad("package_name (twice in one project)", &h.package_name));
        }
        if !model::is_installation_id(&h.installation_id) {
            return Err(bad("installation_id", &h.installation_id));
        }
        if model::Generation::new(h.generation).is_err() {
            return Err(bad("active_generation", &h.generation.to_string()));
        }
        for (column, value) in [
            ("generation_digest", &h.generation_digest),
            ("lock_digest", &h.lock_digest),
            ("revision_digest", &h.revision_digest),
        ] {
            if !model::is_digest(value) {
                return Err(bad(column, value));
            }
        }
        if let Some(bytes) = model::permissions_past_limit(&h.approved_permissions) {
            return Err(Rejection::new(
                Code::SourceInvalid,
                format!(
                    "package {}: generation {} of installation {}: approved_permissions holds \
                     {bytes} bytes, more than the {} a generation's may; the row predates the \
                     limit or the database's checks were bypassed: activate a generation that \
                     approves at most {} permissions, each one a definition could name",
                    quote(&h.package_name),
                    h.generation,
                    quote(&h.installation_id),
                    model::MAX_APPROVED_PERMISSIONS_BYTES,
                    model::MAX_APPROVED_PERMISSIONS
                ),
            ));
        }
        let approved = parse_permissions(&h.approved_permissions)
            .ok_or_else(|| bad("approved_permissions", &h.approved_permissions))?;
        // A row stored before the limits of contract section 5 keeps them in the database;
        // its project is refused here instead.
        if let Some(problem) = model::approved_permissions_problem(&approved) {
            return Err(Rejection::new(
                Code::SourceInvalid,
                format!(
                    "package {}: generation {} of installation {}: {problem}; the row predates \
                     the limit or the database's checks were bypassed: activate a generation \
                     that approves at most {} permissions, each one a definition could name",
                    quote(&h.package_name),
                    h.generation,
                    quote(&h.installation_id),
                    model::MAX_APPROVED_PERMISSIONS
                ),
            ));
        }
        Ok(approved)
    }

    /// Step 2b: what storage knows of package `i`'s revision before fetching it.
    pub fn check_stored(&self, i: usize, stored: Option<StoredLength>) -> Result<(), Rejection> {
        let h = &self.heads[i];
        let Some(stored) = stored else {
            return Err(Rejection::of_row(
                Code::RevisionMissing,
                format!(
                    "package {}: generation {} points at revision {}, which is not stored; \
                     materialize the revision or activate another generation",
                    h.package_name, h.generation, h.revision_digest
                ),
            ));
        };
        if stored.byte_length != stored.actual_length {
            return Err(Rejection::of_row(
                Code::SourceInvalid,
                format!(
                    "package {}: revision {} has byte_length {} but {} stored bytes; the \
                     database's constraints were bypassed, repair the revision row",
                    h.package_name, h.revision_digest, stored.byte_length, stored.actual_length
                ),
            ));
        }
        if stored.actual_length > MAX_REVISION_BYTES {
            return Err(Rejection::new(
                Code::RevisionTooLarge,
                format!(
                    "package {}: revision {} is {} bytes, over the {MAX_REVISION_BYTES}-byte \
                     limit; slim the package and republish",
                    h.package_name, h.revision_digest, stored.actual_length
                ),
            ));
        }
        Ok(())
    }

    /// Step 2c: package `i`'s revision bytes (digest, document, definitions), held whole.
    pub fn add_revision(
        &mut self,
        i: usize,
        approved: &[String],
        bytes: &[u8],
    ) -> Result<(), Rejection> {
        let mut stream = revision::RevisionStream::new(&self.heads[i].package_name, approved);
        stream.feed(bytes);
        self.add_streamed(i, stream.finish())
    }

    /// Step 2 for a revision read by [`revision::RevisionStream`] (made for package `i`, with
    /// its generation's approved permissions): the digest check, then what the reader found.
    pub fn add_streamed(
        &mut self,
        i: usize,
        streamed: revision::Streamed,
    ) -> Result<(), Rejection> {
        let digest = streamed.digest.clone();
        let contribution = self
            .check_digest(i, digest)
            .and_then(|_| streamed.extract());
        self.accept(i, contribution)
    }

    /// The digest check, first of a revision's checks; gives the package name on success.
    fn check_digest(&self, i: usize, actual: Digest) -> Result<&str, Rejection> {
        let h = &self.heads[i];
        if actual.as_str() != h.revision_digest {
            return Err(Rejection::of_row(
                Code::RevisionDigestMismatch,
                format!(
                    "package {}: revision {} hashes to {actual}; the stored bytes were altered, \
                     re-materialize the revision",
                    h.package_name, h.revision_digest
                ),
            ));
        }
        Ok(&h.package_name)
    }

    fn accept(
        &mut self,
        i: usize,
        contribution: Result<revision::Contribution, Rejection>,
    ) -> Result<(), Rejection> {
        let h = &self.heads[i];
        let contribution = contribution?;
        self.definition_count += contribution.definition_count;
        for def in contribution.definitions {
            self.body_bytes += def.canonical_len;
            let mut entry = Entry {
                def,
                package_name: h.package_name.clone(),
                generation: h.generation,
            };
            if self.body_bytes > MAX_SNAPSHOT_BYTES && !self.bodies_dropped {
                self.bodies_dropped = true;
                for e in &mut self.entries {
                    e.def.body = None;
                }
            }
            if self.bodies_dropped {
                entry.def.body = None;
            }
            // One past the limit is enough for the set checks to refuse the project.
            if self.entries.len() <= MAX_DEFINITIONS {
                self.entries.push(entry);
            }
        }
        Ok(())
    }

    /// Step 3: the set checks, then the document.
    pub fn finish(mut self) -> Result<Snapshot, Rejection> {
        let project_id = self.checked_project_id()?.clone();
        let project = &project_id;
        if self.definition_count > MAX_DEFINITIONS {
            return Err(Rejection::new(
                Code::TooManyDefinitions,
                format!(
                    "project {project} offers {} tool definitions, over the limit of \
                     {MAX_DEFINITIONS}; remove packages or tools",
                    self.definition_count
                ),
            ));
        }
        self.entries.sort_by(|a, b| {
            (&a.def.canonical_identity, &a.def.version)
                .cmp(&(&b.def.canonical_identity, &b.def.version))
        });
        for pair in self.entries.windows(2) {
            let (a, b) = (&pair[0].def, &pair[1].def);
            if a.canonical_identity == b.canonical_identity && a.version == b.version {
                return Err(Rejection::new(
                    Code::DuplicateDefinition,
                    format!(
                        "package {}: tool {} version {} is defined twice; keep one definition \
                         per identity and version",
                        pair[1].package_name, a.canonical_identity, a.version
                    ),
                ));
            }
        }
        let ledger = self
            .entries
            .iter()
            .map(|e| (e.def.canonical_identity.as_str(), e.def.alias.as_str()));
        match identity::check_ledger(ledger) {
            Ok(()) => {}
            Err(LedgerConflict::CaseCollision { first, second }) => {
                return Err(Rejection::new(
                    Code::IdentityCaseCollision,
                    format!(
                        "project {project}: tools {first} and {second} differ only in case; \
                         rename one of them"
                    ),
                ));
            }
            Err(LedgerConflict::AliasCollision {
                alias,
                first,
                second,
            }) => {
                return Err(Rejection::new(
                    Code::AliasCollision,
                    format!(
                        "project {project}: tools {first} and {second} share the alias {alias}; \
                         rename one tool or package"
                    ),
                ));
            }
        }
        let too_large = |size: String| {
            Rejection::new(
                Code::SnapshotTooLarge,
                format!(
                    "project {project}: the canonical snapshot would be {size} bytes, over the \
                     {MAX_SNAPSHOT_BYTES}-byte limit; shrink the tool schemas or remove packages"
                ),
            )
        };
        if self.bodies_dropped {
            return Err(too_large(format!("more than {MAX_SNAPSHOT_BYTES}")));
        }

        let mut definitions =
            Vec::with_capacity(self.body_bytes as usize + 512 * self.entries.len());
        definitions.put(b"[");
        for (i, e) in self.entries.iter_mut().enumerate() {
            if i > 0 {
                definitions.put(b",");
            }
            write_entry(e, &mut definitions);
            e.def.body = None;
        }
        definitions.put(b"]");
        let definition_digest = definition_digest(|set| set.put(&definitions));

        let mut doc = Vec::with_capacity(definitions.len() + 256 * self.heads.len() + 512);
        doc.put(b"{\"activeVector\":");
        write_vector(&self.heads, &mut doc);
        doc.put(b",\"activeVectorDigest\":");
        canonical::write_string(self.vector_digest.as_str(), &mut doc);
        doc.put(b",\"definitionDigest\":");
        canonical::write_string(definition_digest.as_str(), &mut doc);
        doc.put(b",\"definitions\":");
        doc.put(&definitions);
        drop(definitions);
        doc.put(b",\"projectId\":");
        canonical::write_string(project.as_str(), &mut doc);
        doc.put(b",\"schema\":");
        canonical::write_string(SNAPSHOT_SCHEMA, &mut doc);
        doc.put(b"}");
        if doc.len() as u64 > MAX_SNAPSHOT_BYTES {
            return Err(too_large(doc.len().to_string()));
        }
        Ok(Snapshot {
            snapshot_digest: Digest::of(&doc),
            project_id,
            active_vector_digest: self.vector_digest,
            definition_digest,
            canonical_json: doc,
            definition_count: self.entries.len(),
            sources: self.heads,
        })
    }
}

fn write_entry(e: &Entry, out: &mut Vec<u8>) {
    let d = &e.def;
    out.put(b"{\"alias\":");
    canonical::write_string(&d.alias, out);
    out.put(b",\"canonicalIdentity\":");
    canonical::write_string(&d.canonical_identity, out);
    out.put(b",\"definition\":");
    out.put(d.body.as_deref().unwrap_or(b"null"));
    out.put(b",\"definitionDigest\":");
    canonical::write_string(d.definition_digest.as_str(), out);
    out.put(b",\"generation\":");
    canonical::write_number(e.generation as f64, out);
    out.put(b",\"identity\":{\"name\":");
    canonical::write_string(&d.identity.name, out);
    out.put(b",\"origin\":");
    canonical::write_string(&d.identity.origin, out);
    out.put(b",\"source\":");
    canonical::write_string(&d.identity.source, out);
    out.put(b"},\"packageName\":");
    canonical::write_string(&e.package_name, out);
    out.put(b",\"version\":");
    canonical::write_string(&d.version, out);
    out.put(b"}");
}

/// The outcome of planning with every revision at hand.
pub type PlanResult = Result<Snapshot, Rejection>;

/// Plans a snapshot in one call. `revision` answers, for a revision digest, its stored length
/// and bytes (or `None` when no row exists). Used by tests, `verify` and tools; the coordinator
/// drives [`SnapshotBuilder`] itself to keep one revision in memory at a time.
pub fn plan<'a>(
    project_id: &str,
    heads: Vec<ActiveHead>,
    mut revision: impl FnMut(&str) -> Option<(i64, &'a [u8])>,
) -> PlanResult {
    let mut builder = SnapshotBuilder::new(project_id, heads);
    builder.check_project()?;
    for i in 0..builder.heads().len() {
        let approved = builder.check_row(i)?;
        let found = revision(&builder.heads()[i].revision_digest);
        let stored = found.map(|(byte_length, bytes)| StoredLength {
            byte_length,
            actual_length: bytes.len() as i64,
        });
        builder.check_stored(i, stored)?;
        if let Some((_, bytes)) = found {
            builder.add_revision(i, &approved, bytes)?;
        }
    }
    builder.finish()
}
