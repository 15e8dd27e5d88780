//! The key a snapshot is found by: what the current proof computes from the live heads and
//! looks up by index, so that its cost follows the live vector, not the project's history
//! (contract section 7).
//!
//! For each source row in package order (byte order), the first 8 hex digits of its generation
//! digest and the first 8 of its revision digest, concatenated: 16 characters a row. Both
//! dialects compute the same text in SQL (`substr(d, 8, 8)`, `string_agg`/`group_concat` in
//! package order), which is why it is not a digest: SQLite's SQL has no hash function. It needs
//! no collision resistance either: a key match only chooses which snapshots the proof compares
//! with the live heads in full, and vectors that share a key (the same contents under other
//! ids) are told apart there.

use crate::planner::ActiveHead;

/// Hex digits taken from each digest (after `sha256:`).
const DIGITS: usize = 8;

/// The source key of a vector: `heads` in any order (they are taken in package order).
pub fn source_key(heads: &[ActiveHead]) -> String {
    let mut ordered: Vec<&ActiveHead> = heads.iter().collect();
    ordered.sort_by(|a, b| a.package_name.as_bytes().cmp(b.package_name.as_bytes()));
    let mut key = String::with_capacity(heads.len() * 2 * DIGITS);
    for h in ordered {
        key.extend(prefix(&h.generation_digest));
        key.extend(prefix(&h.revision_digest));
    }
    key
}

/// SQL's `substr(d, 8, 8)`: the characters after `sha256:`, at most eight.
fn prefix(digest: &str) -> impl Iterator<Item = char> + '_ {
    digest.chars().skip("sha256:".len()).take(DIGITS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(name: &str, g: char, r: char) -> ActiveHead {
        ActiveHead {
            package_name: name.into(),
            installation_id: format!("i-{name}"),
            generation: 1,
            generation_digest: format!("sha256:{}", g.to_string().repeat(64)),
            lock_digest: format!("sha256:{}", "0".repeat(64)),
            revision_digest: format!("sha256:{}", r.to_string().repeat(64)),
            approved_permissions: "[]".into(),
        }
    }

    #[test]
    fn sixteen_characters_a_row_in_package_order() {
        let heads = [head("b.pkg", 'c', 'd'), head("a.pkg", 'a', 'b')];
        assert_eq!(source_key(&heads), "aaaaaaaabbbbbbbbccccccccdddddddd");
    }

    #[test]
    fn the_empty_vector_has_the_empty_key() {
        assert_eq!(source_key(&[]), "");
    }

    #[test]
    fn package_order_is_byte_order() {
        // '@' (0x40) before 'a' (0x61); '-' (0x2d) before '.' (0x2e).
        let heads = [
            head("a.b", '1', '1'),
            head("a-b", '2', '2'),
            head("@s/a", '3', '3'),
        ];
        let key = source_key(&heads);
        assert_eq!(&key[..16], "3333333333333333");
        assert_eq!(&key[16..32], "2222222222222222");
        assert_eq!(&key[32..], "1111111111111111");
    }
}
