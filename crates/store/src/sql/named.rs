//! Named parameters for the statements that take many: the parameters are declared once, as
//! the fields of a struct ([`named_params!`]), and the text names them (`$project_ids`). Both
//! the text's `$N` and the order the values are bound in come from that one declaration, so no
//! comment has to keep twenty positions in line. The text is rendered while the crate compiles,
//! and the build fails if it names a parameter that is not declared, leaves one declared
//! unused, or a name is the start of another.

/// `$1`, `$2`, … for the parameters in declaration order.
const POSITIONS: [&str; 32] = [
    "$1", "$2", "$3", "$4", "$5", "$6", "$7", "$8", "$9", "$10", "$11", "$12", "$13", "$14", "$15",
    "$16", "$17", "$18", "$19", "$20", "$21", "$22", "$23", "$24", "$25", "$26", "$27", "$28",
    "$29", "$30", "$31", "$32",
];

/// The placeholders `$name` of `names`, each with its position.
pub(crate) const fn numbered<const N: usize>(
    mut table: [(&'static str, &'static str); N],
) -> [(&'static str, &'static str); N] {
    assert!(
        N <= POSITIONS.len(),
        "too many parameters for one statement"
    );
    let mut i = 0;
    while i < N {
        table[i].1 = POSITIONS[i];
        i += 1;
    }
    table
}

/// Whether `text` has `pattern` at some byte.
const fn contains(text: &[u8], pattern: &[u8]) -> bool {
    let mut at = 0;
    while at + pattern.len() <= text.len() {
        let mut i = 0;
        while i < pattern.len() && text[at + i] == pattern[i] {
            i += 1;
        }
        if i == pattern.len() {
            return true;
        }
        at += 1;
    }
    false
}

/// Fails the build unless every placeholder of `table` stands in `text` and none is the start
/// of another (which would make the rendering depend on the table's order).
pub(crate) const fn check(text: &str, table: &[(&str, &str)]) {
    let mut i = 0;
    while i < table.len() {
        assert!(
            contains(text.as_bytes(), table[i].0.as_bytes()),
            "a declared parameter is not used by its statement"
        );
        let mut j = 0;
        while j < table.len() {
            let (a, b) = (table[i].0.as_bytes(), table[j].0.as_bytes());
            if i != j && a.len() <= b.len() {
                let mut k = 0;
                while k < a.len() && a[k] == b[k] {
                    k += 1;
                }
                assert!(k < a.len(), "a parameter's name is the start of another's");
            }
            j += 1;
        }
        i += 1;
    }
}

/// Fails the build if `text` still names a parameter (`$` and a letter or `_`): one the
/// statement uses but its struct does not declare.
pub(crate) const fn check_rendered(text: &str) {
    let bytes = text.as_bytes();
    let mut at = 0;
    while at + 1 < bytes.len() {
        let next = bytes[at + 1];
        assert!(
            !(bytes[at] == b'$' && (next.is_ascii_alphabetic() || next == b'_')),
            "a statement names a parameter its struct does not declare"
        );
        at += 1;
    }
}

/// A struct of named parameters: its fields, in order, are the statement's `$1`, `$2`, …;
/// `bind` binds them in that order and `PLACEHOLDERS` renders a text that names them
/// ([`named_text!`]).
macro_rules! named_params {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident<$lt:lifetime> {
            $($(#[$fmeta:meta])* $field:ident: $ty:ty,)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Default)]
        $vis struct $name<$lt> {
            $($(#[$fmeta])* pub(crate) $field: $ty,)*
        }

        impl<$lt> $name<$lt> {
            /// Each field's placeholder, `$field`, and its position.
            pub(crate) const PLACEHOLDERS: &'static [(&'static str, &'static str)] =
                &$crate::sql::named::numbered([$((concat!("$", stringify!($field)), ""),)*]);

            /// `query` with every field bound, in declaration order.
            pub(crate) fn bind<'q>(
                &'q self,
                mut query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
            ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
                $(query = query.bind(&self.$field);)*
                query
            }
        }
    };
}

/// A constant text whose `$name` placeholders are numbered by a [`named_params!`] struct's
/// `PLACEHOLDERS`, while the crate compiles.
macro_rules! named_text {
    ($text:expr, $table:expr) => {{
        const TEXT: &str = $text;
        const TABLE: &[(&str, &str)] = $table;
        const _: () = $crate::sql::named::check(TEXT, TABLE);
        const LEN: usize = $crate::dialect::rendered_len(TEXT, TABLE);
        const BYTES: [u8; LEN] = $crate::dialect::render(TEXT, TABLE);
        const RENDERED: &str = $crate::dialect::as_text(&BYTES);
        const _: () = $crate::sql::named::check_rendered(RENDERED);
        RENDERED
    }};
}

#[cfg(test)]
mod tests {
    named_params! {
        struct Pair<'s> {
            names: Vec<&'s str>,
            name_counts: Vec<i64>,
        }
    }

    #[test]
    fn placeholders_become_positions_in_declaration_order() {
        const TEXT: &str = named_text!(
            "SELECT * FROM unnest($name_counts::bigint[], $names::text[])",
            Pair::PLACEHOLDERS
        );
        assert_eq!(TEXT, "SELECT * FROM unnest($2::bigint[], $1::text[])");
        let pair = Pair {
            names: vec!["a"],
            name_counts: vec![1],
        };
        // Both bound.
        let mut query = pair.bind(sqlx::query(TEXT));
        let arguments = sqlx::Execute::take_arguments(&mut query).unwrap().unwrap();
        assert_eq!(sqlx::Arguments::len(&arguments), 2);
    }

    #[test]
    fn the_checks_refuse_what_would_misnumber() {
        let unused =
            std::panic::catch_unwind(|| super::check("SELECT $a", &[("$a", ""), ("$b", "")]));
        assert!(unused.is_err());
        let prefix =
            std::panic::catch_unwind(|| super::check("SELECT $a, $ab", &[("$a", ""), ("$ab", "")]));
        assert!(prefix.is_err());
        let undeclared = std::panic::catch_unwind(|| super::check_rendered("SELECT $1, $c"));
        assert!(undeclared.is_err());
        super::check_rendered("SELECT $1::text, $2");
    }
}
