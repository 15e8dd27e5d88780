//! Property tests for the canonical forms: JCS, identity encoding and the planner.

use package_executor_testkit::inputs;

use inputs::{Pkg, revision, tool};
use package_executor::canonical;
use package_executor::identity::{self, ToolIdentity};
use package_executor::planner;
use proptest::prelude::*;
use serde_json::{Map, Number, Value, json};

fn arb_number() -> impl Strategy<Value = Number> {
    prop_oneof![
        any::<i64>().prop_map(Number::from),
        any::<u64>().prop_map(Number::from),
        any::<f64>().prop_filter_map("finite", Number::from_f64),
        (-1e6f64..1e6).prop_filter_map("finite", Number::from_f64),
    ]
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        arb_number().prop_map(Value::Number),
        any::<String>().prop_map(Value::String),
        "[a-z\u{e000}-\u{e010}\u{1f600}-\u{1f610}]{0,4}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                "[a-zA-Z\u{e000}\u{ffff}\u{10000}\u{1f600}é]{0,3}",
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Serializes with object members in reverse order and whitespace, to test order independence.
fn scrambled(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let members: Vec<String> = m
                .iter()
                .rev()
                .map(|(k, v)| format!("{} : {}", serde_json::to_string(k).unwrap(), scrambled(v)))
                .collect();
            format!("{{ {} }}", members.join(" , "))
        }
        Value::Array(items) => {
            format!(
                "[ {} ]",
                items.iter().map(scrambled).collect::<Vec<_>>().join(", ")
            )
        }
        other => serde_json::to_string(other).unwrap(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn canonical_matches_reference_and_is_idempotent(v in arb_json()) {
        let ours = canonical::to_vec(&v);
        let reference = serde_json_canonicalizer::to_vec(&v).unwrap();
        prop_assert_eq!(&ours, &reference);
        let reparsed = canonical::parse_strict(&ours, 128).unwrap();
        prop_assert_eq!(canonical::to_vec(&reparsed), ours.clone());
        let from_scrambled = canonical::parse_strict(scrambled(&v).as_bytes(), 128).unwrap();
        prop_assert_eq!(canonical::to_vec(&from_scrambled), ours.clone());
        prop_assert_eq!(canonical::digest(&v), package_executor::model::Digest::of(&ours));
    }

    #[test]
    fn canonical_form_check_accepts_exactly_the_canonical_bytes(
        v in arb_json(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let bytes = serde_json_canonicalizer::to_vec(&v).unwrap();
        prop_assert!(canonical::is_canonical_form(&v, &bytes));
        // One byte changed, one missing, one extra: each refused.
        let i = at.index(bytes.len());
        let mut changed = bytes.clone();
        changed[i] = if byte == changed[i] { byte.wrapping_add(1) } else { byte };
        prop_assert!(!canonical::is_canonical_form(&v, &changed));
        prop_assert!(!canonical::is_canonical_form(&v, &bytes[..bytes.len() - 1]));
        let mut longer = bytes.clone();
        longer.insert(i, b' ');
        prop_assert!(!canonical::is_canonical_form(&v, &longer));
        let spaced = scrambled(&v);
        prop_assert_eq!(canonical::is_canonical_form(&v, spaced.as_bytes()), spaced.as_bytes() == bytes);
    }

    #[test]
    fn any_spelling_canonicalizes_like_the_reference(v in arb_json()) {
        let reference = serde_json_canonicalizer::to_vec(&v).unwrap();
        let ours = |text: &str| canonical::to_vec(&canonical::parse_strict(text.as_bytes(), 128).unwrap());
        prop_assert_eq!(&ours(&serde_json::to_string(&v).unwrap()), &reference);
        prop_assert_eq!(&ours(&scrambled(&v)), &reference);
        let escaped = serde_json::to_string(&v).unwrap().replace("é", "\\u00e9");
        prop_assert_eq!(ours(&escaped), reference);
    }

    #[test]
    fn numbers_match_reference(f in any::<f64>().prop_filter("finite", |f| f.is_finite())) {
        let mut ours = Vec::new();
        canonical::write_number(f, &mut ours);
        let reference = serde_json_canonicalizer::to_string(&json!(f)).unwrap();
        prop_assert_eq!(String::from_utf8(ours).unwrap(), reference);
    }

    #[test]
    fn identity_round_trips(s in "[a-z%:*?\\\\/é.]{1,6}", o in "[a-z%:*?\\\\/é.]{1,6}", n in "[a-z%:*?\\\\/é.]{1,6}") {
        let t = ToolIdentity { source: s, origin: o, name: n };
        let enc = t.encode().unwrap();
        prop_assert_eq!(ToolIdentity::decode(&enc).unwrap(), t.clone());
        prop_assert_eq!(ToolIdentity::decode(&enc).unwrap().encode().unwrap(), enc.clone());
        // Used as a pattern, an identity matches only itself.
        prop_assert!(identity::matches(&enc, &enc));
        let alias = t.alias().unwrap();
        prop_assert!(identity::is_alias(&alias));
    }

    #[test]
    fn decode_then_encode_is_identity(s in "[a-z:%2-5ACF*?/\\\\]{0,12}") {
        if let Ok(t) = ToolIdentity::decode(&s) {
            prop_assert_eq!(t.encode().unwrap(), s);
        }
    }

    #[test]
    fn encoding_is_injective_and_patterns_exact(
        a in ("[a-z:%*?]{1,3}", "[a-z:%*?]{1,3}", "[a-z:%*?]{1,3}"),
        b in ("[a-z:%*?]{1,3}", "[a-z:%*?]{1,3}", "[a-z:%*?]{1,3}"),
    ) {
        let ta = ToolIdentity { source: a.0, origin: a.1, name: a.2 };
        let tb = ToolIdentity { source: b.0, origin: b.1, name: b.2 };
        let (ea, eb) = (ta.encode().unwrap(), tb.encode().unwrap());
        prop_assert_eq!(ta == tb, ea == eb);
        prop_assert_eq!(identity::matches(&ea, &eb), ea == eb);
    }

    #[test]
    fn planner_ignores_input_order(order in Just((0..6usize).collect::<Vec<_>>()).prop_shuffle()) {
        let pkgs: Vec<Pkg> = (0..6)
            .map(|i| {
                let name = format!("pkg{i}");
                let tools: Vec<Value> = (0..i).map(|t| tool(&format!("t{t}"))).collect();
                Pkg::new(&name, &revision(&name, Value::Array(tools)))
            })
            .collect();
        let shuffled: Vec<Pkg> = order.iter().map(|&i| pkgs[i].clone()).collect();
        let a = inputs::plan("p", &pkgs).unwrap();
        let b = inputs::plan("p", &shuffled).unwrap();
        prop_assert_eq!(a, b);
    }

    #[test]
    fn any_vector_change_changes_the_digest(field in 0usize..6, which in 0usize..3) {
        let heads: Vec<_> = (0..3)
            .map(|i| Pkg::new(&format!("p{i}"), &revision(&format!("p{i}"), json!([]))).head)
            .collect();
        let base = planner::active_vector_digest("proj", &heads);
        let mut changed = heads.clone();
        let h = &mut changed[which];
        match field {
            0 => h.package_name.push('x'),
            1 => h.installation_id.push('x'),
            2 => h.generation += 1,
            3 => h.generation_digest = package_executor::model::Digest::of(b"g").as_str().into(),
            4 => h.lock_digest = package_executor::model::Digest::of(b"l").as_str().into(),
            _ => h.revision_digest = package_executor::model::Digest::of(b"r").as_str().into(),
        }
        prop_assert_ne!(planner::active_vector_digest("proj", &changed), base.clone());
        prop_assert_ne!(planner::active_vector_digest("proj2", &heads), base);
    }
}

/// Writes an object's first member a second time at its start (`twice`), or puts a lone
/// surrogate first in an array, at the `at`-th `{` or `[` of the text (a no-op when the text
/// has none, or when what starts there does not parse as an object).
fn inject(bytes: &mut Vec<u8>, at: prop::sample::Index, twice: bool) {
    let open = if twice { b'{' } else { b'[' };
    let starts: Vec<usize> = bytes
        .iter()
        .enumerate()
        .filter(|&(_, &b)| b == open)
        .map(|(i, _)| i + 1)
        .collect();
    if starts.is_empty() {
        return;
    }
    let i = starts[at.index(starts.len())];
    if !twice {
        bytes.splice(i..i, *br#""\ud800","#);
        return;
    }
    // The first member: `"name"` up to the end of its value, found by parsing from `{`.
    let rest = &bytes[i - 1..];
    let Ok(Value::Object(map)) = serde_json::Deserializer::from_slice(rest)
        .into_iter::<Value>()
        .next()
        .unwrap_or(Ok(Value::Null))
    else {
        return;
    };
    if let Some((k, v)) = map.iter().next() {
        let member = format!("{}:{},", serde_json::to_string(k).unwrap(), v);
        bytes.splice(i..i, member.into_bytes());
    }
}

/// A revision document, as text: a valid one with extra members, or that text damaged.
fn arb_revision_text() -> impl Strategy<Value = Vec<u8>> {
    let tools = prop::collection::vec(
        prop_oneof![
            3 => "[a-z]{1,6}".prop_map(|n| tool(&n)),
            1 => arb_json(),
        ],
        0..4,
    );
    // Skipped members make up most of the text, so most damage lands where only the scanner
    // looks (kept members are re-parsed strictly either way).
    let extra = prop::collection::vec(
        (
            "[a-z\\\\\"]{0,6}",
            prop_oneof![
                arb_json(),
                prop::collection::vec(arb_json(), 0..12).prop_map(Value::Array),
                "([a-z ]|\\\\[nt\"/]|1\\.5e-3){0,60}".prop_map(Value::String),
            ],
        ),
        1..6,
    );
    let names = prop_oneof![Just("acme.github".to_owned()), "[a-z.]{1,12}"];
    // `package`'s other members, ignored as the document's are.
    let package_extra = prop::option::of(arb_json());
    let doc = (names, tools, extra, package_extra, any::<bool>()).prop_map(
        |(name, tools, extra, package_extra, pretty)| {
            let mut doc = revision(&name, Value::Array(tools));
            for (k, v) in extra {
                doc[k.as_str()] = v;
            }
            if let Some(v) = package_extra {
                doc["package"]["pad"] = v;
            }
            if pretty {
                serde_json::to_vec_pretty(&doc).unwrap()
            } else {
                scrambled(&doc).into_bytes()
            }
        },
    );
    // Strictness, wherever it lands: an object's first member written twice, or a lone
    // surrogate as an array's first item.
    let strictness = prop::collection::vec((any::<prop::sample::Index>(), any::<bool>()), 0..3);
    let edit = (
        any::<prop::sample::Index>(),
        prop::sample::select(b"{}[]\",:\\u0e.-+ \x01\x1f\xff\xc3\xe2\x82".to_vec()),
        0u8..3,
    );
    let damage = prop_oneof![
        2 => Just(Vec::new()),
        3 => prop::collection::vec(edit, 1..4),
    ];
    (doc, strictness, damage).prop_map(|(mut bytes, strictness, damage)| {
        for (at, twice) in strictness {
            inject(&mut bytes, at, twice);
        }
        for (at, b, how) in damage {
            let i = at.index(bytes.len() + 1);
            match how {
                0 => bytes.insert(i, b),
                1 if i < bytes.len() => bytes[i] = b,
                _ if i < bytes.len() => {
                    bytes.remove(i);
                }
                _ => bytes.push(b),
            }
        }
        bytes
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// The streamed revision reader gives the reference whole-document reader's answer, however
    /// the bytes are cut.
    #[test]
    fn streamed_revision_reads_like_the_whole(
        bytes in arb_revision_text(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        use package_executor::revision::{self as rev, RevisionStream};
        let approved = vec!["network".to_owned()];
        let whole = rev::reference::extract(&bytes, "acme.github", &approved);
        let mut at: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
        at.push(0);
        at.push(bytes.len());
        at.sort_unstable();
        let mut stream = RevisionStream::new("acme.github", &approved);
        for w in at.windows(2) {
            stream.feed(&bytes[w[0]..w[1]]);
        }
        let streamed = stream.finish();
        prop_assert_eq!(&streamed.digest, &package_executor::model::Digest::of(&bytes));
        match (whole, streamed.extract()) {
            (Ok(w), Ok(s)) => prop_assert_eq!(w, s),
            (Err(w), Err(s)) => prop_assert_eq!(w.code, s.code, "{} / {}", w.detail, s.detail),
            (w, s) => prop_assert!(false, "whole {:?} streamed {:?}", w, s),
        }
    }
}
