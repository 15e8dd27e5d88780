//! The push scanner: a [`Lexer`] feeding a [`Collector`], and the contribution at the end.

use super::*;

/// The push scanner: JSON syntax of the whole document (the lexer), and what the snapshot
/// needs of the three kept members, built from the lexer's events (the collector).
#[derive(Debug)]
pub(super) struct Scanner {
    lex: Lexer,
    doc: Collector,
}

impl Scanner {
    pub(super) fn new(package_name: &str, approved: &[String]) -> Self {
        Self {
            lex: Lexer::default(),
            doc: Collector::new(package_name, approved),
        }
    }

    /// The package whose revision this is.
    pub(super) fn package_name(&self) -> &str {
        &self.doc.package_name
    }

    pub(super) fn feed(&mut self, slice: &[u8]) {
        self.lex.feed(slice, &mut self.doc);
    }

    pub(super) fn finish(mut self) -> Result<Contribution, Rejection> {
        if self.lex.error.is_none()
            && !(self.lex.expect == Expect::End && self.lex.token == Token::None)
        {
            self.lex.fail("EOF while parsing the document");
        }
        let doc = &mut self.doc;
        let package = doc.package_name.as_str();
        if let Some(e) = &self.lex.error {
            return Err(malformed(package, e));
        }
        match &doc.schema {
            Schema::Right => {}
            Schema::Wrong(text) => {
                return Err(malformed(
                    package,
                    format_args!("schema is {text}, not {REVISION_SCHEMA:?}"),
                ));
            }
            Schema::Missing => return Err(malformed(package, "the schema member is missing")),
        }
        let Package::Object { name, version } = &doc.package else {
            return Err(malformed(package, "package is missing or not an object"));
        };
        let declared = match name {
            Field::Str(s) => s.as_str(),
            Field::Long(prefix, _) => prefix.as_str(),
            _ => {
                return Err(malformed(
                    package,
                    "package.name is missing or not a string",
                ));
            }
        };
        let package_version = match version {
            Field::Str(v) if semver::Version::parse(v).is_ok() => v.clone(),
            _ => {
                return Err(malformed(
                    package,
                    format_args!(
                        "package.version is missing, not SemVer 2.0.0 or over \
                         {SMALL_TEXT_BYTES} bytes"
                    ),
                ));
            }
        };
        if doc.tools == Tools::NotArray {
            return Err(malformed(package, "tools is not an array"));
        }
        if let Some(i) = doc.not_object {
            return Err(malformed(
                package,
                format_args!("tools[{i}] is not an object"),
            ));
        }
        if !matches!(name, Field::Str(s) if s == package) {
            let shown = match name {
                Field::Long(_, len) => format!("{}… ({len} bytes of JSON text)", quote(declared)),
                _ => quote(declared).to_string(),
            };
            return Err(Rejection::new(
                Code::PackageMismatch,
                format!(
                    "package {package}: the revision declares package {shown}; the \
                     installation's generation points at another package's revision, fix the \
                     generation"
                ),
            ));
        }
        if let Some(r) = doc.first_rejection.take() {
            return Err(r);
        }
        Ok(Contribution {
            package_version,
            definitions: std::mem::take(&mut doc.kept),
            definition_count: doc.valid,
        })
    }
}
