//! Canonicalize-and-digest throughput over a ~1 MiB definition set (128 definitions with nested
//! schemas), beside raw SHA-256 over the same bytes, serde_json's plain serializer plus digest,
//! and the reference `serde_json_canonicalizer`, so the ratios read off one run.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use package_executor::canonical;
use package_executor::model::Digest;
use serde_json::{Value, json};

fn definition_set() -> Value {
    let defs: Vec<Value> = (0..128)
        .map(|i| {
            let props: serde_json::Map<String, Value> = (0..24)
                .map(|p| {
                    (
                        format!("param_{p}"),
                        json!({
                            "type": "object",
                            "description": format!("Parameter {p} of tool {i}: a reasonably long human description \"quoted\" with é and ✓."),
                            "properties": {
                                "value": {"type": "string", "maxLength": 256, "pattern": "^[a-z]+$"},
                                "weight": {"type": "number", "minimum": -1.5, "maximum": 1e3},
                                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 16}
                            },
                            "required": ["value"]
                        }),
                    )
                })
                .collect();
            json!({
                "name": format!("tool_{i}"), "version": "1.2.3", "title": format!("Tool {i}"),
                "description": "Searches things.\nSecond line\twith tab.",
                "inputSchema": {"type": "object", "properties": props},
                "annotations": {"readOnlyHint": true}, "permissions": ["network"]
            })
        })
        .collect();
    json!({"schema": "qinglong/tool-definitions@v1", "definitions": defs})
}

fn bench(c: &mut Criterion) {
    let value = definition_set();
    let bytes = canonical::to_vec(&value);
    let mut group = c.benchmark_group("definition-set");
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    eprintln!("definition set: {} canonical bytes", bytes.len());
    group.bench_function("raw-sha256", |b| b.iter(|| Digest::of(black_box(&bytes))));
    group.bench_function("canonicalize-and-digest", |b| {
        b.iter(|| canonical::digest(black_box(&value)))
    });
    group.bench_function("serde_json-plain-and-digest", |b| {
        b.iter(|| Digest::of(&serde_json::to_vec(black_box(&value)).unwrap()))
    });
    group.bench_function("serde_json_canonicalizer-and-digest", |b| {
        b.iter(|| Digest::of(&serde_json_canonicalizer::to_vec(black_box(&value)).unwrap()))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
