//! The fuzz targets' bodies, shared by `fuzz/` (libFuzzer on nightly: `cargo fuzz run NAME`) and
//! `tests/it/core/fuzz_corpus.rs` (every committed corpus file replayed on stable, in the normal test
//! run). Each asserts properties, not only "no panic": a panic here is a defect.

use package_executor::canonical;
use package_executor::identity::{self, ToolIdentity};
use package_executor::model::Digest;
use package_executor::rejection::RejectionCode;
use package_executor::{revision, sources};

/// The package and approved permissions every revision input is checked against.
const PACKAGE: &str = "acme.github";
const APPROVED: [&str; 2] = ["network", "fs.read"];

/// Revision bytes → a contribution or the one rejection code. An accepted definition's
/// canonical bytes re-parse and re-canonicalize to themselves, carry their digest and length,
/// and its identity and alias are canonical.
pub fn revision(data: &[u8]) {
    let approved: Vec<String> = APPROVED.iter().map(|s| (*s).to_owned()).collect();
    let whole = revision::reference::extract(data, PACKAGE, &approved);
    // The streamed read agrees with the whole read, however the bytes are sliced.
    let cut = data.first().map_or(1, |b| usize::from(*b % 13) + 1);
    for slices in [
        data.chunks(1).collect::<Vec<_>>(),
        data.chunks(cut).collect(),
        vec![&data[..data.len() / 2], &data[data.len() / 2..]],
    ] {
        let mut stream = revision::RevisionStream::new(PACKAGE, &approved);
        for s in &slices {
            stream.feed(s);
        }
        let streamed = stream.finish();
        assert_eq!(streamed.digest, Digest::of(data));
        assert_eq!(streamed.len, data.len() as u64);
        match (&whole, streamed.extract()) {
            (Ok(w), Ok(s)) => assert_eq!(w, &s),
            (Err(w), Err(s)) => assert_eq!(w.code, s.code, "{} / {}", w.detail, s.detail),
            (w, s) => panic!("whole read {w:?}, streamed read {s:?}"),
        }
    }
    match whole {
        Ok(contribution) => {
            assert!(semver::Version::parse(&contribution.package_version).is_ok());
            for d in &contribution.definitions {
                let body = d
                    .body
                    .as_deref()
                    .expect("a small revision keeps its bodies");
                let value = canonical::parse_strict(body, 64).expect("a kept body re-parses");
                assert_eq!(
                    canonical::to_vec(&value),
                    body,
                    "canonical bytes are a fixed point"
                );
                assert!(
                    std::str::from_utf8(body).is_ok(),
                    "canonical bytes are UTF-8"
                );
                assert_eq!(Digest::of(body), d.definition_digest);
                assert_eq!(d.canonical_len, body.len() as u64);
                assert_eq!(d.identity.origin, PACKAGE);
                assert_eq!(
                    ToolIdentity::decode(&d.canonical_identity).as_ref(),
                    Ok(&d.identity)
                );
                assert!(identity::is_alias(&d.alias), "{:?}", d.alias);
                assert!(semver::Version::parse(&d.version).is_ok());
            }
        }
        Err(rejection) => {
            // Only the revision and definition stages can fail here.
            assert!(
                matches!(
                    rejection.code,
                    RejectionCode::RevisionMalformed
                        | RejectionCode::PackageMismatch
                        | RejectionCode::ForbiddenField
                        | RejectionCode::InvalidDefinition
                        | RejectionCode::NamespaceViolation
                        | RejectionCode::PermissionNotApproved
                ),
                "{:?}",
                rejection.code
            );
            assert!(rejection.detail.contains(PACKAGE), "{}", rejection.detail);
        }
    }
}

/// The canonicalizer: output is a fixed point; `is_canonical_form` accepts the input only when
/// it is that output; and, where `serde_json_canonicalizer` (the reference) also accepts the
/// input, the same bytes as the reference.
pub fn canonical(data: &[u8]) {
    let by_value = canonical::parse_strict(data, 128).map(|v| canonical::to_vec(&v));
    let Ok(out) = by_value else { return };
    // `verify`'s check of stored bytes: it accepts the canonical form and nothing else.
    let value = canonical::parse_strict(data, 128).expect("parsed once already");
    assert!(canonical::is_canonical_form(&value, &out));
    assert_eq!(
        canonical::is_canonical_form(&value, data),
        data == out.as_slice(),
        "the canonical-form check accepts exactly the canonical bytes"
    );
    let again = canonical::parse_strict(&out, 128).expect("canonical output re-parses");
    assert_eq!(
        canonical::to_vec(&again),
        out,
        "canonical output is a fixed point"
    );
    if let Ok(reference_value) = serde_json::from_slice::<serde_json::Value>(data)
        && only_safe_integers(&reference_value)
        && let Ok(reference) = serde_json_canonicalizer::to_vec(&reference_value)
    {
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&reference),
            "ours and the reference differ"
        );
    }
}

/// Whether every integer is one a double holds exactly. Beyond 2^53 serde_json keeps an integer
/// exactly while RFC 8785 (and we) go through the nearest double, so the reference's output for
/// such input is not RFC 8785 and is not compared.
fn only_safe_integers(v: &serde_json::Value) -> bool {
    const SAFE: u64 = 1 << 53;
    match v {
        serde_json::Value::Number(n) => {
            n.as_u64().is_none_or(|u| u <= SAFE)
                && n.as_i64().is_none_or(|i| i.unsigned_abs() <= SAFE)
        }
        serde_json::Value::Array(a) => a.iter().all(only_safe_integers),
        serde_json::Value::Object(o) => o.values().all(only_safe_integers),
        _ => true,
    }
}

/// Identity strings: every string that decodes re-encodes to itself; every triple that encodes
/// decodes back to itself, matches itself as a pattern, and has a well-formed alias.
pub fn identity(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(id) = ToolIdentity::decode(s) {
        assert_eq!(
            id.encode().as_deref(),
            Ok(s),
            "decode then encode is the identity"
        );
    }
    // The same bytes as a triple, split at NUL.
    let parts: Vec<&str> = s.splitn(3, '\0').collect();
    if let [source, origin, name] = parts[..] {
        let triple = ToolIdentity {
            source: source.to_owned(),
            origin: origin.to_owned(),
            name: name.to_owned(),
        };
        match triple.encode() {
            Ok(encoded) => {
                assert_eq!(ToolIdentity::decode(&encoded).as_ref(), Ok(&triple));
                assert!(identity::matches(&encoded, &encoded));
                let alias = triple.alias().expect("an encodable identity has an alias");
                assert!(identity::is_alias(&alias), "{alias:?}");
            }
            Err(_) => assert!(source.is_empty() || origin.is_empty() || name.is_empty()),
        }
    }
}

/// The fixture importer's parser: accepts only strict JSON of the fixture's shape and schema,
/// refuses everything else as bad input, and every revision it accepts canonicalizes to a fixed
/// point.
pub fn fixture(data: &[u8]) {
    match sources::parse_fixture(data) {
        Ok(f) => {
            assert_eq!(f.schema, sources::FIXTURE_SCHEMA);
            assert!(
                canonical::parse_strict(data, 256).is_ok(),
                "accepted only if strict"
            );
            for g in f
                .projects
                .iter()
                .flat_map(|p| &p.packages)
                .flat_map(|p| &p.generations)
            {
                if let Some(r) = &g.revision {
                    let bytes = canonical::to_vec(r);
                    let again = canonical::parse_strict(&bytes, 256).expect("re-parses");
                    assert_eq!(canonical::to_vec(&again), bytes);
                }
            }
        }
        // Every refusal is the fixture's own error, which the store reports as bad input.
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}
