//! Every RFC 8785 test vector in `tests/data/jcs/` (vendored, see its NOTICE) canonicalizes
//! byte for byte.

use std::path::PathBuf;

use package_executor::canonical;

fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/jcs")
}

#[test]
fn every_input_canonicalizes_to_its_output() {
    let dir = vectors_dir();
    let inputs = std::fs::read_dir(dir.join("input")).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; the vendored vectors belong to the repository",
            dir.display()
        )
    });
    let mut checked = 0;
    for entry in inputs {
        let path = entry.expect("dir entry").path();
        let name = path.file_name().expect("file name").to_owned();
        let input = std::fs::read(&path).expect("read input");
        let expected = std::fs::read(dir.join("output").join(&name)).expect("read output");
        let value = canonical::parse_strict(&input, 128)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let got = canonical::to_vec(&value);
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&expected),
            "{}",
            name.to_string_lossy()
        );
        assert_eq!(got, expected);
        // The hex form agrees too.
        let hex = std::fs::read_to_string(
            dir.join("outhex")
                .join(name.to_string_lossy().replace(".json", ".txt")),
        )
        .expect("read outhex");
        let from_hex: Vec<u8> = hex
            .split_whitespace()
            .map(|h| u8::from_str_radix(h, 16).expect("hex byte"))
            .collect();
        assert_eq!(got, from_hex);
        checked += 1;
    }
    assert_eq!(checked, 6, "expected the six public vectors");
}
