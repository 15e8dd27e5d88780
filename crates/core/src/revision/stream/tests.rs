//! The reader against the whole-document oracle, case by case (the property and fuzz tests
//! compare them over any input and slicing).

#![allow(clippy::unwrap_used)]

use super::*;
use crate::rejection::RejectionCode;

const HEAD: &str = r#""package":{"name":"p","version":"1.0.0"},"schema":"qinglong/materialized-revision@v1","tools":[]"#;

/// The verdict of the reference whole-document reader and of this one fed a byte at a time.
fn both(doc: &[u8]) -> (Option<RejectionCode>, Option<RejectionCode>) {
    let whole = crate::revision::reference::extract(doc, "p", &[])
        .err()
        .map(|r| r.code);
    let mut s = RevisionStream::new("p", &[]);
    for b in doc.chunks(1) {
        s.feed(b);
    }
    let streamed = s.finish().extract().err().map(|r| r.code);
    (whole, streamed)
}

fn verdict(doc: &[u8]) -> Result<Contribution, Rejection> {
    let approved = vec!["network".to_owned()];
    let mut s = RevisionStream::new("p", &approved);
    for part in doc.chunks(7919) {
        s.feed(part);
    }
    s.finish().extract()
}

fn code(doc: &[u8]) -> Option<RejectionCode> {
    verdict(doc).err().map(|r| r.code)
}

const PKG: &str = r#"{"name":"p","version":"1.0.0"}"#;

fn doc(package: &str, tools: &str, extra: &str) -> Vec<u8> {
    format!(
        r#"{{"schema":"qinglong/materialized-revision@v1","package":{package},"tools":{tools}{extra}}}"#
    )
    .into_bytes()
}

fn tool(name: &str, schema: &str) -> String {
    format!(r#"{{"name":"{name}","version":"1.0.0","inputSchema":{schema}}}"#)
}

#[test]
fn bulk_in_package_is_skipped_and_bulk_in_tools_refused_as_it_streams() {
    let zeros = format!("[{}0]", "0,".repeat(200_000));
    let pkg = format!(r#"{{"name":"p","version":"1.0.0","pad":{zeros}}}"#);
    let ok = verdict(&doc(&pkg, "[]", "")).unwrap();
    assert_eq!(ok.package_version, "1.0.0");
    assert_eq!(
        code(&doc(PKG, &zeros, "")),
        Some(RejectionCode::RevisionMalformed)
    );
    // A definition over the limit, with a forbidden member after the bulk: forbidden first.
    let big = tool("t", &format!(r#"{{"a":{zeros}}}"#));
    let late = format!(r#"{},"command":"x"}}"#, &big[..big.len() - 1]);
    let r = verdict(&doc(PKG, &format!("[{late}]"), "")).unwrap_err();
    assert_eq!(r.code, RejectionCode::ForbiddenField, "{}", r.detail);
    let early = format!(r#"{{"command":"x",{}"#, &big[1..]);
    let r = verdict(&doc(PKG, &format!("[{early}]"), "")).unwrap_err();
    assert_eq!(r.code, RejectionCode::ForbiddenField, "{}", r.detail);
    let r = verdict(&doc(PKG, &format!("[{big}]"), "")).unwrap_err();
    assert_eq!(r.code, RejectionCode::InvalidDefinition, "{}", r.detail);
    assert!(r.detail.contains("262144"), "{}", r.detail);
    // A syntax error after the oversized definition still makes the revision malformed.
    let r = verdict(&doc(PKG, &format!("[{big},{{]"), ""));
    assert_eq!(r.unwrap_err().code, RejectionCode::RevisionMalformed);
    // A long package name is a mismatch, quoted short.
    let long = "p".repeat(100_000);
    let pkg = format!(r#"{{"name":"{long}","version":"1.0.0"}}"#);
    let r = verdict(&doc(&pkg, "[]", "")).unwrap_err();
    assert_eq!(r.code, RejectionCode::PackageMismatch);
    assert!(r.detail.len() < 1024, "{}", r.detail.len());
    // A long tool name: invalid, quoted short.
    let t = tool(&"n".repeat(100_000), "{}");
    let r = verdict(&doc(PKG, &format!("[{t}]"), "")).unwrap_err();
    assert_eq!(r.code, RejectionCode::InvalidDefinition);
    assert!(r.detail.len() < 1024, "{}", r.detail.len());
    // A long schema value: malformed, quoted short.
    let d = format!(r#"{{"schema":"{long}","package":{PKG}}}"#);
    let r = verdict(d.as_bytes()).unwrap_err();
    assert_eq!(r.code, RejectionCode::RevisionMalformed);
    assert!(r.detail.len() < 1024, "{}", r.detail.len());
}

#[test]
fn a_definition_at_the_limit_is_kept_and_one_byte_past_it_is_not() {
    let fixed = tool("t", r#"{"a":""}"#).len() as u64;
    for (extra, ok) in [(0, true), (1, false)] {
        let text = "x".repeat((MAX_DEFINITION_BYTES - fixed + extra) as usize);
        let t = tool("t", &format!(r#"{{"a":"{text}"}}"#));
        let got = verdict(&doc(PKG, &format!("[{t}]"), ""));
        assert_eq!(got.is_ok(), ok, "{extra}: {:?}", got.err());
    }
    // Escapes spell more text than they decode to: still within the limit.
    let text = r"\u0041".repeat((MAX_DEFINITION_BYTES - fixed) as usize);
    let t = tool("t", &format!(r#"{{"a":"{text}"}}"#));
    assert!(verdict(&doc(PKG, &format!("[{t}]"), "")).is_ok());
}

#[test]
fn past_the_kept_definitions_a_count_goes_on() {
    let tools: Vec<String> = (0..300).map(|i| tool(&format!("t{i}"), "{}")).collect();
    let c = verdict(&doc(PKG, &format!("[{}]", tools.join(",")), "")).unwrap();
    assert_eq!(c.definitions.len(), KEPT_DEFINITIONS);
    assert_eq!(c.definition_count, 300);
    // A forbidden member in the 300th still ranks first.
    let mut bad = tools.clone();
    bad[299] = r#"{"name":"x","version":"1.0.0","inputSchema":{},"url":"u"}"#.into();
    let r = verdict(&doc(PKG, &format!("[{}]", bad.join(",")), "")).unwrap_err();
    assert_eq!(r.code, RejectionCode::ForbiddenField);
    assert!(r.detail.contains("tools[299]"), "{}", r.detail);
}

#[test]
fn long_numbers_round_as_written() {
    for (spelled, want) in [
        (format!("1.{}", "0".repeat(5000)), "1"),
        (format!("0.{}1e5000", "0".repeat(4999)), "1"),
        (format!("{}e-4999", "1".repeat(5000)), "1.1111111111111112"),
        (format!("-0.{}", "0".repeat(5000)), "0"),
    ] {
        let t = tool("t", &format!(r#"{{"default":{spelled}}}"#));
        let c = verdict(&doc(PKG, &format!("[{t}]"), "")).unwrap();
        let body = String::from_utf8(c.definitions[0].body.clone().unwrap()).unwrap();
        assert!(
            body.contains(&format!(r#""default":{want}}}"#)),
            "{:.20}: {body}",
            spelled
        );
    }
    let t = tool("t", &format!(r#"{{"default":1{}}}"#, "0".repeat(5000)));
    assert_eq!(
        code(&doc(PKG, &format!("[{t}]"), "")),
        Some(RejectionCode::RevisionMalformed)
    );
}

#[test]
fn duplicates_and_surrogates_in_what_is_kept_are_malformed() {
    let t = |schema: &str| format!("[{}]", tool("t", schema));
    for bad in [
        doc(r#"{"name":"p","name":"p","version":"1.0.0"}"#, "[]", ""),
        doc(r#"{"name":"p","version":"1.0.0","\ud800":1}"#, "[]", ""),
        doc(PKG, &t(r#"{"a":"\udc00"}"#), ""),
        doc(PKG, &t(r#"{"a":"\ud800\n"}"#), ""),
        doc(PKG, "[]", r#","tools":[]"#),
        doc(PKG, "[]", r#","\udc00":[]"#),
    ] {
        assert_eq!(
            code(&bad),
            Some(RejectionCode::RevisionMalformed),
            "{}",
            String::from_utf8_lossy(&bad)
        );
    }
    // A surrogate pair is fine; ignored members, `package`'s other members among them,
    // need only be well-formed.
    assert_eq!(code(&doc(PKG, &t(r#"{"a":"\ud83d\ude00"}"#), "")), None);
    assert_eq!(code(&doc(PKG, "[]", r#","x":{"a":1,"a":"\ud800"}"#)), None);
    for ignored in [
        r#"{"name":"p","version":"1.0.0","x":"\ud800"}"#,
        r#"{"name":"p","version":"1.0.0","x":{"a":1,"a":2}}"#,
        r#"{"name":"p","x":[1E400],"version":"1.0.0","x":0}"#,
    ] {
        assert_eq!(code(&doc(ignored, "[]", "")), None, "{ignored}");
    }
}

#[test]
fn a_duplicate_inside_a_definition_makes_it_invalid_wherever_it_sits() {
    let t = |schema: &str| format!("[{}]", tool("t", schema));
    let zeros = format!("[{}0]", "0,".repeat(200_000));
    for (bad, why) in [
        (
            r#"[{"name":"t","name":"t","version":"1.0.0","inputSchema":{}}]"#.to_owned(),
            "its own members",
        ),
        (t(r#"{"a":1,"a":2}"#), "a nested object"),
        (
            t(&format!(r#"{{"a":1,"a":2,"z":{zeros}}}"#)),
            "before the limit",
        ),
        (
            t(&format!(r#"{{"z":{zeros},"a":1,"a":2}}"#)),
            "past the limit",
        ),
    ] {
        let r = verdict(&doc(PKG, &bad, "")).unwrap_err();
        assert_eq!(
            r.code,
            RejectionCode::InvalidDefinition,
            "{why}: {}",
            r.detail
        );
        assert!(r.detail.contains("tools[0]"), "{why}: {}", r.detail);
    }
    let r = verdict(&doc(PKG, &t(r#"{"a":1,"a":2}"#), "")).unwrap_err();
    assert!(r.detail.contains(r#""a" twice"#), "{}", r.detail);
    // A forbidden member still ranks first, before or after the duplicate.
    for bad in [
        r#"[{"command":"x","name":"t","name":"t","version":"1.0.0","inputSchema":{}}]"#,
        r#"[{"name":"t","name":"t","version":"1.0.0","inputSchema":{},"url":"u"}]"#,
    ] {
        let r = verdict(&doc(PKG, bad, "")).unwrap_err();
        assert_eq!(r.code, RejectionCode::ForbiddenField, "{bad}: {}", r.detail);
    }
    // A problem of the document after it still makes the revision malformed.
    let bad = format!("[{},{{]", tool("t", r#"{"a":1,"a":2}"#));
    assert_eq!(
        code(&doc(PKG, &bad, "")),
        Some(RejectionCode::RevisionMalformed),
        "{bad}"
    );
}
#[test]
fn skipped_values_are_checked_as_serde_json_checks_them() {
    let values = [
        "0",
        "-0",
        "12",
        "1.5",
        "1.5e-3",
        "1E+5",
        "0.5E5",
        "-12.25e10",
        "01",
        "1.5.3",
        "-",
        "-a",
        "1e",
        "1e+",
        ".5",
        "1.",
        "+1",
        "true",
        "false",
        "null",
        "tru",
        "truex",
        "nul",
        "[]",
        "[[]]",
        "[1,2]",
        "[1,]",
        "[,]",
        "[1 2]",
        "{}",
        "{,}",
        r#"{"a":1}"#,
        r#"{"a":1,}"#,
        r#"{"a" 1}"#,
        r#"{"a":}"#,
        r#"{1:2}"#,
        r#"{"a":1}}"#,
        "[1]]",
        "]",
        r#""\x""#,
        r#""\u12G4""#,
        r#""\ud800""#,
        r#""\u00e9\n\t\/\"""#,
        "\"a\u{1}b\"",
        "\"a\u{7f}b\"",
        r#""unterminated"#,
        "\"é\"",
        r#"[{"a":[{"b":null}]}]"#,
    ];
    for v in values {
        for doc in [
            format!(r#"{{"x":{v},{HEAD}}}"#),
            format!(r#"{{{HEAD},"x":{v}}}"#),
            format!(r#"{{ "x" : [ {v} ] , {HEAD} }}"#),
        ] {
            let (whole, streamed) = both(doc.as_bytes());
            assert_eq!(whole, streamed, "{doc}");
        }
    }
}

#[test]
fn the_document_and_its_member_names_are_checked_as_serde_json_checks_them() {
    let docs = [
        String::new(),
        " ".into(),
        "[]".into(),
        "{}".into(),
        format!("{{{HEAD}}} x"),
        format!("{{{HEAD}}} \n\t\r"),
        format!(" \n{{{HEAD}}}"),
        format!("{{{HEAD}"),
        format!(r#"{{{HEAD},"sch\u0065ma":"x"}}"#),
        format!(r#"{{{HEAD},"schema":"x"}}"#),
        format!(r#"{{{HEAD},"files":1,"files":2}}"#),
        format!(r#"{{"\ud800":1,{HEAD}}}"#),
        format!(r#"{{"t\u006fols":[],"x":1,{}}}"#, &HEAD[..HEAD.len() - 11]),
        "\u{feff}{}".into(),
        format!("{{{HEAD},\"x\":\"\u{e9}\"}}"),
    ];
    for doc in &docs {
        let (whole, streamed) = both(doc.as_bytes());
        assert_eq!(whole, streamed, "{doc}");
    }
    let mut bad = format!(r#"{{{HEAD},"x":"é"}}"#).into_bytes();
    let at = bad.len() - 3;
    bad[at] = 0xC3;
    bad[at + 1] = 0x28;
    assert_eq!(
        both(&bad),
        (
            Some(RejectionCode::RevisionMalformed),
            Some(RejectionCode::RevisionMalformed)
        )
    );
    let deep = format!(r#"{{{HEAD},"x":{}{}}}"#, "[".repeat(200), "]".repeat(200));
    assert_eq!(
        both(deep.as_bytes()),
        (
            Some(RejectionCode::RevisionMalformed),
            Some(RejectionCode::RevisionMalformed)
        )
    );
}

#[test]
fn problems_rank_as_in_the_whole_read() {
    // Bad UTF-8 late in the text outranks a syntax error early in it; so does depth.
    let mut doc = format!(r#"{{"x":01,{HEAD},"y":"é"}}"#).into_bytes();
    let n = doc.len();
    doc[n - 3] = 0xFF;
    let mut s = RevisionStream::new("p", &[]);
    s.feed(&doc);
    let why = s.finish().extract().unwrap_err().detail;
    assert!(why.contains("utf-8"), "{why}");
    let doc = format!(
        r#"{{"x":01,{HEAD},"y":{}{}}}"#,
        "[".repeat(129),
        "]".repeat(129)
    );
    let mut s = RevisionStream::new("p", &[]);
    s.feed(doc.as_bytes());
    let why = s.finish().extract().unwrap_err().detail;
    assert!(
        why.contains(&JsonError::TooDeep(MAX_REVISION_DEPTH).to_string()),
        "{why}"
    );
}
