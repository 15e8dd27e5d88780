//! `ARCHITECTURE.md` agrees with the code it maps: every source file of every crate is named in
//! the codemap, every path the page names exists, each "Uses …" sentence lists exactly the
//! modules its files refer to (read from their `use` paths), the core's modules are listed so
//! that each uses only those above it, the store's modules form no circle, and the crates'
//! dependency graph keeps the layers.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn architecture() -> String {
    std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap()
}

/// The crates whose sources the codemap maps: (source root, the name its own code calls it by).
const CRATES: [&str; 5] = [
    "src/",
    "crates/core/src/",
    "crates/store/src/",
    "crates/testkit/src/",
    "fuzz/fuzz_targets/",
];

/// Every `.rs` file below `dir`, recursively, as a path relative to the repository's root.
fn rust_files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root()).unwrap();
            out.push(rel.to_string_lossy().into_owned());
        }
    }
    out.sort();
    out
}

/// One bullet of the codemap: the path it starts with and its whole text.
struct Bullet {
    path: String,
    text: String,
}

/// The codemap's bullets (between `## Codemap` and the next `## ` heading) that start with a
/// backticked path.
fn bullets(arch: &str) -> Vec<Bullet> {
    let start = arch.find("## Codemap").expect("a Codemap section");
    let rest = &arch[start + 3..];
    let section = &rest[..rest.find("\n## ").unwrap_or(rest.len())];
    let mut out: Vec<Bullet> = Vec::new();
    let mut current: Option<String> = None;
    for line in section.lines() {
        if let Some(item) = line.strip_prefix("- ") {
            if let Some(text) = current.take() {
                out.extend(bullet(text));
            }
            current = Some(item.to_owned());
        } else if let (true, Some(text)) = (line.starts_with("  "), current.as_mut()) {
            text.push(' ');
            text.push_str(line.trim());
        } else if let Some(text) = current.take() {
            out.extend(bullet(text));
        }
    }
    out.extend(current.and_then(bullet));
    out
}

fn bullet(text: String) -> Option<Bullet> {
    let path = text.strip_prefix('`')?.split('`').next()?.to_owned();
    path.contains('/').then_some(Bullet { path, text })
}

/// The backticked words of `text`.
fn ticked(text: &str) -> impl Iterator<Item = &str> {
    text.split('`').skip(1).step_by(2)
}

/// Which crate root a source file lies under.
fn crate_root(file: &str) -> &'static str {
    CRATES
        .iter()
        .filter(|r| file.starts_with(**r))
        .max_by_key(|r| r.len())
        .unwrap()
}

/// The top-level module a file belongs to (`None` for the crate root itself).
fn module_of(file: &str) -> Option<String> {
    let rel = &file[crate_root(file).len()..];
    let first = rel.split('/').next().unwrap();
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(name, "lib" | "main")).then(|| name.to_owned())
}

/// The code of a file without its comment lines and its trailing `#[cfg(test)] mod` (tests may
/// use what the code does not).
fn code_of(file: &str) -> String {
    let text = std::fs::read_to_string(root().join(file)).unwrap();
    let mut code = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|n| n.trim_start().starts_with("mod "))
        {
            break;
        }
        if !t.starts_with("//") {
            code.push_str(line);
            code.push('\n');
        }
    }
    code
}

/// The first segments of the paths a file names through `prefix` (`crate::`, a crate's name):
/// `crate::planner::X` gives `planner`, `crate::{a, b::c}` gives `a` and `b`.
fn named_through(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = code.as_bytes();
    for (at, _) in code.match_indices(prefix) {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let mut i = at + prefix.len();
        if bytes.get(i) == Some(&b'{') {
            let mut depth = 0;
            let mut item = String::new();
            for c in code[i..].chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 1 => break,
                    '}' => depth -= 1,
                    ',' if depth == 1 => {
                        out.insert(std::mem::take(&mut item));
                        continue;
                    }
                    _ => {}
                }
                if depth == 1 && c != '{' {
                    item.push(c);
                }
            }
            out.insert(item);
            continue;
        }
        let start = i;
        while bytes
            .get(i)
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
        {
            i += 1;
        }
        out.insert(code[start..i].to_owned());
    }
    out.into_iter()
        .map(|s| {
            let s = s.trim();
            let end = s
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(s.len());
            s[..end].to_owned()
        })
        .filter(|s| !s.is_empty() && s != "self")
        .collect()
}

/// The modules (of its own crate, or the core's and the store's by their names) that the files
/// under `path` refer to, outside themselves.
fn uses_of(path: &str) -> BTreeSet<String> {
    let files: Vec<String> = if path.ends_with('/') {
        rust_files(&root().join(path))
    } else {
        vec![path.to_owned()]
    };
    // A whole crate's bullet says what it uses of the others; its own modules are itself.
    let whole_crate = CRATES.contains(&path);
    let own = module_of(&files[0]).filter(|_| !whole_crate);
    let mut uses = BTreeSet::new();
    for file in &files {
        let code = code_of(file);
        if whole_crate {
            uses.extend(named_through(&code, "package_executor_core::"));
            continue;
        }
        let root_dir = root().join(crate_root(file));
        let is_module =
            |m: &str| root_dir.join(format!("{m}.rs")).exists() || root_dir.join(m).is_dir();
        for m in named_through(&code, "crate::") {
            // The shell re-exports the core's modules and the store under their own names.
            let shell = crate_root(file) == "src/";
            if is_module(&m) || shell {
                uses.insert(m);
            }
        }
        for m in named_through(&code, "package_executor_core::") {
            uses.insert(m);
        }
        if code.contains("package_executor_store") {
            uses.insert("store".to_owned());
        }
    }
    if let Some(own) = own {
        uses.remove(&own);
    }
    uses
}

/// The "Uses …" sentence of a bullet, if it has one, as the set of backticked names it gives.
fn claimed_uses(text: &str) -> Option<BTreeSet<String>> {
    let at = text.find("Uses ")?;
    let sentence = &text[at..];
    let end = sentence.find(['.', ';']).unwrap_or(sentence.len());
    Some(ticked(&sentence[..end]).map(str::to_owned).collect())
}

#[test]
fn the_codemap_names_every_source_file_of_every_crate() {
    let arch = architecture();
    let bullets = bullets(&arch);
    let mut missing = Vec::new();
    for crate_dir in CRATES {
        for file in rust_files(&root().join(crate_dir)) {
            let named = bullets.iter().any(|b| {
                b.path == file
                    || b.text.contains(&format!("`{file}`"))
                    || (b.path.ends_with('/')
                        && file
                            .strip_prefix(b.path.as_str())
                            .is_some_and(|name| ticked(&b.text).any(|t| t == name)))
            });
            if !named {
                missing.push(file);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md's codemap does not name: {missing:#?}"
    );
}

#[test]
fn every_path_the_architecture_names_exists() {
    let arch = architecture();
    let roots = [
        "src/",
        "crates/",
        "tests/",
        "docs/",
        "scripts/",
        "benches/",
        "charts/",
        "tools/",
        "fuzz/",
        "manifests/",
        "examples/",
    ];
    let stale: Vec<&str> = ticked(&arch)
        .filter(|t| roots.iter().any(|r| t.starts_with(r)))
        .filter(|t| !t.contains(['{', '*', ' ', '<']))
        .filter(|t| !root().join(t).exists())
        .collect();
    assert!(
        stale.is_empty(),
        "ARCHITECTURE.md names paths that do not exist: {stale:#?}"
    );
}

#[test]
fn each_uses_sentence_lists_what_the_code_uses() {
    let arch = architecture();
    let mut wrong = Vec::new();
    for b in bullets(&arch) {
        let Some(claimed) = claimed_uses(&b.text) else {
            continue;
        };
        let actual = uses_of(&b.path);
        if claimed != actual {
            wrong.push(format!(
                "{}: says it uses {claimed:?}, its code uses {actual:?}",
                b.path
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// "Each uses only modules listed above it": the core's modules, in the codemap's order, form
/// layers (no cycle can hide in such a list).
#[test]
fn each_core_module_uses_only_those_listed_above_it() {
    let arch = architecture();
    let mut above = BTreeSet::new();
    let mut wrong = Vec::new();
    for b in bullets(&arch) {
        if !b.path.starts_with("crates/core/src/") {
            continue;
        }
        let own = module_of(&b.path).unwrap_or_default();
        let later: BTreeMap<String, ()> = uses_of(&b.path)
            .into_iter()
            .filter(|m| !above.contains(m))
            .map(|m| (m, ()))
            .collect();
        if !later.is_empty() {
            wrong.push(format!(
                "{}: uses {:?}, not listed above it",
                b.path,
                later.keys().collect::<Vec<_>>()
            ));
        }
        above.insert(own);
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The packages a workspace member depends on to build (normal dependencies, transitively), by
/// name, from `cargo metadata`'s resolved graph.
fn build_closure(member: &str) -> BTreeSet<String> {
    let meta = package_executor_testkit::cargo_metadata(&[]);
    let nodes = meta["resolve"]["nodes"].as_array().unwrap();
    let name_of = |id: &str| {
        meta["packages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["id"] == id)
            .map(|p| p["name"].as_str().unwrap().to_owned())
            .unwrap()
    };
    let start = nodes
        .iter()
        .find(|n| name_of(n["id"].as_str().unwrap()) == member)
        .unwrap_or_else(|| panic!("{member} is not a workspace package"));
    let mut seen = BTreeSet::new();
    let mut todo = vec![start];
    while let Some(node) = todo.pop() {
        for dep in node["deps"].as_array().unwrap() {
            let normal = dep["dep_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k["kind"].is_null());
            let id = dep["pkg"].as_str().unwrap();
            if normal && seen.insert(name_of(id)) {
                todo.push(nodes.iter().find(|n| n["id"] == id).unwrap());
            }
        }
    }
    seen
}

/// The layers of ARCHITECTURE.md, as far as Cargo cannot hold them: the core crate builds without
/// an async runtime, a database driver, a Kubernetes or HTTP client or a network stack, and its
/// sources touch no file, socket, process or environment (the standard library is always there).
#[test]
fn the_pure_core_does_no_io_and_the_store_knows_no_coordinator() {
    let io_crates = [
        "tokio",
        "sqlx",
        "kube",
        "k8s-openapi",
        "hyper",
        "rustls",
        "mio",
        "socket2",
        "reqwest",
        "tracing",
        "libsqlite3-sys",
    ];
    let closure = build_closure("package-executor-core");
    let mut broken: Vec<String> = io_crates
        .iter()
        .filter(|c| closure.contains(**c))
        .map(|c| format!("package-executor-core depends on {c}"))
        .collect();
    for path in rust_files(&root().join("crates/core/src")) {
        let text = std::fs::read_to_string(root().join(&path)).unwrap();
        for word in [
            "std::fs",
            "std::net",
            "std::process",
            "std::env",
            "stdin()",
            "stdout()",
        ] {
            if text.contains(word) {
                broken.push(format!("{path} uses {word}"));
            }
        }
    }
    // The store is a crate of its own: Cargo keeps the shell out of it; what it must not
    // reach for is the shell's clients.
    let store = build_closure("package-executor-store");
    for c in [
        "kube",
        "k8s-openapi",
        "hyper",
        "clap",
        "prometheus-client",
        "indicatif",
    ] {
        if store.contains(c) {
            broken.push(format!("package-executor-store depends on {c}"));
        }
    }
    assert!(broken.is_empty(), "{broken:#?}");
}

/// The top-level modules of the crate at `crate_dir` and the others each refers to (through
/// `crate::`, or `super::` in a top-level file, where it means the same).
fn module_graph(crate_dir: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph = BTreeMap::new();
    for entry in std::fs::read_dir(root().join(crate_dir)).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let (module, rel) = if path.is_dir() {
            (name.clone(), format!("{crate_dir}{name}/"))
        } else if let Some(stem) = name.strip_suffix(".rs") {
            (stem.to_owned(), format!("{crate_dir}{name}"))
        } else {
            continue;
        };
        if matches!(module.as_str(), "lib" | "main") {
            continue;
        }
        let mut uses = uses_of(&rel);
        if !path.is_dir() {
            uses.extend(named_through(&code_of(&rel), "super::"));
        }
        graph.insert(module, uses);
    }
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for (module, uses) in &mut graph {
        uses.retain(|u| u != module && modules.contains(u));
    }
    graph
}

/// A circle in `graph`, as the path that closes it, if there is one.
fn a_circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        graph: &BTreeMap<String, BTreeSet<String>>,
        at: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|m| m == at) {
            let mut circle = path[start..].to_vec();
            circle.push(at.to_owned());
            return Some(circle);
        }
        if done.contains(at) {
            return None;
        }
        path.push(at.to_owned());
        for next in graph.get(at).into_iter().flatten() {
            if let Some(circle) = visit(graph, next, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(at.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|m| visit(graph, m, &mut Vec::new(), &mut done))
}

/// The store's modules refer to each other without a circle: a reader can take them in an order
/// where each needs only those before it (the connection string's parsing is a leaf,
/// `conninfo.rs`, below the failover, the secrets and their masking).
#[test]
fn the_store_s_modules_form_no_circle() {
    let graph = module_graph("crates/store/src/");
    assert!(graph.contains_key("conninfo") && graph.contains_key("attempt"));
    assert_eq!(a_circle(&graph), None, "{graph:#?}");
}

/// The circle finder finds a circle where there is one.
#[test]
fn a_circle_is_found_where_there_is_one() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(m, u)| (m.to_owned(), u.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(
        a_circle(&graph),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}
