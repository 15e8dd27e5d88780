//! The push scanner's collecting half: what each token means for the three kept members,
//! and the contribution at the end.

use super::*;

impl Scanner {
    /// A member name starts: decide how much of it to collect.
    pub(super) fn begin_key(&mut self) {
        let depth = self.lex.stack.len();
        let cap = match self.region() {
            _ if self.names_are_read() => Some(NAME_BYTES),
            Some(Member::Tools) if self.in_definition() => match &self.definition {
                Some(d) if !d.unbuilt => Some(6 * d.room() as usize + 8),
                Some(_) if depth == 3 => Some(NAME_BYTES),
                _ => None,
            },
            _ => None,
        };
        match cap {
            Some(cap) => self.lex.text.start(cap),
            None => self.lex.text.on = false,
        }
        self.lex.text.push(b"\"");
        self.lex.token = Token::Str(self.new_str(true));
    }

    /// A value starts (the stack does not hold it yet): note what the kept members are.
    pub(super) fn begin_value(&mut self, kind: Kind) {
        let depth = self.lex.stack.len();
        self.lex.text.on = false;
        match (depth, self.member) {
            (1, Some(Member::Schema)) => {
                if kind == Kind::String {
                    self.lex.text.start(SMALL_TEXT_BYTES);
                } else {
                    self.schema =
                        Schema::Wrong(format!("not a string but {kind:?}").to_lowercase());
                }
            }
            (1, Some(Member::Package)) => {
                self.package = if kind == Kind::Object {
                    Package::Object {
                        name: Field::Missing,
                        version: Field::Missing,
                    }
                } else {
                    Package::NotObject
                };
            }
            (1, Some(Member::Tools)) => {
                self.tools = if kind == Kind::Array {
                    Tools::Array
                } else {
                    Tools::NotArray
                };
            }
            (2, Some(Member::Package)) => {
                if let Some(field) = self.package_field {
                    if kind == Kind::String {
                        self.lex.text.start(SMALL_TEXT_BYTES);
                    } else {
                        self.set_field(field, Field::NotString);
                        self.package_field = None;
                    }
                }
            }
            (2, Some(Member::Tools)) if self.tools == Tools::Array => {
                let index = self.tool_items;
                self.tool_items += 1;
                if kind == Kind::Object {
                    // The definition's own `{` is opened by the caller; its frame is here.
                    self.definition = Some(Definition::new(index));
                } else {
                    self.not_object.get_or_insert(index);
                }
            }
            (d, Some(Member::Tools)) if d >= 3 && self.definition.is_some() => {
                let in_array = self.lex.stack.last() == Some(&Container::Array);
                match kind {
                    Kind::Object | Kind::Array => {
                        if let Some(def) = &mut self.definition {
                            def.open(kind == Kind::Object, in_array);
                        }
                    }
                    Kind::String => {
                        if let Some(def) = &mut self.definition {
                            if in_array {
                                def.comma();
                            }
                            if !def.unbuilt {
                                let cap = 6 * def.room() as usize + 8;
                                self.lex.text.start(cap);
                            }
                        }
                    }
                    Kind::Number | Kind::Literal => {}
                }
            }
            _ => {}
        }
    }

    pub(super) fn set_field(&mut self, field: PackageField, value: Field) {
        if let Package::Object { name, version } = &mut self.package {
            *field.of(name, version) = value;
        }
    }

    pub(super) fn open(&mut self, container: Container) {
        if self.lex.stack.len() >= MAX_REVISION_DEPTH {
            // The depth check reports it; nothing deeper is scanned.
            self.fail(JsonError::TooDeep(MAX_REVISION_DEPTH));
            return;
        }
        self.lex.stack.push(container);
        self.lex.expect = if container == Container::Object {
            Expect::KeyOrClose
        } else {
            Expect::ValueOrClose
        };
    }

    pub(super) fn close(&mut self, container: Container) {
        let depth = self.lex.stack.len();
        if self.lex.stack.pop() != Some(container) {
            self.fail("mismatched closing bracket");
            return;
        }
        if depth == 3 && self.member == Some(Member::Tools) {
            if let Some(def) = self.definition.take() {
                self.definition_done(def);
            }
        } else if depth > 3
            && let Some(def) = &mut self.definition
        {
            def.close();
        }
        self.value_done();
    }

    /// A value ended (the stack no longer holds it, if it was a container).
    pub(super) fn value_done(&mut self) {
        self.lex.expect = if self.lex.stack.is_empty() {
            Expect::End
        } else {
            Expect::CommaOrClose
        };
        match self.lex.stack.len() {
            1 => {
                self.member = None;
                self.lex.text.on = false;
            }
            2 if self.member == Some(Member::Package) => self.package_field = None,
            _ => {}
        }
    }

    pub(super) fn literal_done(&mut self, word: &'static [u8]) {
        if self.in_definition() {
            let value = match word {
                b"true" => Value::Bool(true),
                b"false" => Value::Bool(false),
                _ => Value::Null,
            };
            let in_array = self.lex.stack.last() == Some(&Container::Array);
            if let Some(def) = &mut self.definition {
                def.scalar(value, word.len() as u64, in_array);
            }
        }
        self.scalar_done();
    }

    pub(super) fn number_done(&mut self) {
        if self.lex.number_on {
            self.lex.number_on = false;
            match self.lex.number.value() {
                Ok(n) => {
                    if self.in_definition() {
                        let in_array = self.lex.stack.last() == Some(&Container::Array);
                        if let Some(def) = &mut self.definition {
                            def.scalar(Value::Number(n), 1, in_array);
                        }
                    }
                }
                Err(e) => return self.fail(e),
            }
        }
        self.scalar_done();
    }

    pub(super) fn scalar_done(&mut self) {
        self.value_done();
    }

    pub(super) fn schema_done(&mut self) {
        self.schema = match self.lex.text.decode() {
            Some(Ok(s)) if s == REVISION_SCHEMA => Schema::Right,
            _ => Schema::Wrong(quote_bytes(&self.lex.text.bytes, self.lex.text.seen)),
        };
    }

    pub(super) fn string_done(&mut self, key: bool) {
        let depth = self.lex.stack.len();
        if key {
            self.lex.expect = Expect::Colon;
            if !self.lex.text.on {
                return;
            }
            self.lex.text.on = false;
            let name = match self.lex.text.decode() {
                Some(Ok(name)) => Some(name),
                Some(Err(e)) => return self.fail(e),
                None => None,
            };
            if depth == 1 {
                self.member = name.as_deref().and_then(Member::of);
                if let Some(m) = self.member {
                    if self.seen[m.index()] {
                        return self.fail(format_args!(
                            "duplicate member name {}",
                            quote(name.as_deref().unwrap_or_default())
                        ));
                    }
                    self.seen[m.index()] = true;
                }
            } else if depth == 2 && self.member == Some(Member::Package) {
                self.package_key(name.as_deref());
            } else if let Some(def) = &mut self.definition {
                if depth == 3
                    && let Some(name) = &name
                {
                    def.own_member(name);
                }
                match name {
                    Some(name) if !def.unbuilt => def.key(name),
                    None if !def.unbuilt => def.grow(MAX_DEFINITION_BYTES + 1),
                    _ => {}
                }
            }
            return;
        }
        // A string value.
        if depth == 1 && self.member == Some(Member::Schema) {
            self.schema_done();
        } else if depth == 2 && self.member == Some(Member::Package) {
            if let Some(slot) = self.package_field.take() {
                let field = match self.lex.text.decode() {
                    Some(Ok(s)) => Field::Str(s),
                    Some(Err(e)) => return self.fail(e),
                    None => Field::Long(
                        String::from_utf8_lossy(&self.lex.text.bytes).into_owned(),
                        self.lex.text.seen,
                    ),
                };
                self.set_field(slot, field);
            }
        } else if self.in_definition() {
            let decoded = if self.lex.text.on {
                self.lex.text.decode()
            } else {
                None
            };
            if let Some(def) = &mut self.definition
                && !def.unbuilt
            {
                match decoded {
                    Some(Ok(s)) => {
                        let len = s.len() as u64 + 2;
                        // The comma was counted when the string began.
                        def.grow(len);
                        if !def.unbuilt {
                            def.attach(Value::String(s));
                        }
                    }
                    Some(Err(e)) => return self.fail(e),
                    None => def.grow(MAX_DEFINITION_BYTES + 1),
                }
            }
        }
        self.lex.text.on = false;
        self.value_done();
    }

    /// A member name of `package` ended: `name` and `version` are read, the rest skipped.
    pub(super) fn package_key(&mut self, name: Option<&str>) {
        let (field, quoted) = match name {
            Some("name") => (PackageField::Name, "\"name\""),
            Some("version") => (PackageField::Version, "\"version\""),
            _ => return,
        };
        if let Package::Object { name, version } = &mut self.package
            && *field.of(name, version) != Field::Missing
        {
            return self.fail(format_args!("duplicate member name {quoted}"));
        }
        // Marked present (not a string) until its value says otherwise.
        self.set_field(field, Field::NotString);
        self.package_field = Some(field);
    }

    /// A definition closed: validate it now and keep what the snapshot needs of it.
    pub(super) fn definition_done(&mut self, def: Definition) {
        if self.error.is_some() || self.first_rejection.is_some() {
            return;
        }
        let Definition {
            index,
            mut frames,
            unbuilt,
            duplicate,
            forbidden,
            ..
        } = def;
        let checked = match (unbuilt, frames.pop()) {
            (false, Some(Frame::Object(map, _))) => {
                validate_definition(map, &self.package_name, index, &self.approved)
            }
            _ => Err(unbuilt_definition(
                &self.package_name,
                index,
                forbidden,
                duplicate.as_deref(),
            )),
        };
        match checked {
            Ok(mut d) => {
                self.valid += 1;
                self.body_bytes += d.canonical_len;
                if self.body_bytes > MAX_SNAPSHOT_BYTES && !self.bodies_dropped {
                    self.bodies_dropped = true;
                    for k in &mut self.kept {
                        k.body = None;
                    }
                }
                if self.bodies_dropped {
                    d.body = None;
                }
                if self.kept.len() < KEPT_DEFINITIONS {
                    self.kept.push(d);
                }
            }
            Err(r) => self.first_rejection = Some(r),
        }
    }

    pub(super) fn finish(mut self) -> Result<Contribution, Rejection> {
        if self.error.is_none()
            && !(self.lex.expect == Expect::End && self.lex.token == Token::None)
        {
            self.fail("EOF while parsing the document");
        }
        let package = self.package_name.as_str();
        if let Some(e) = &self.error {
            return Err(malformed(package, e));
        }
        match &self.schema {
            Schema::Right => {}
            Schema::Wrong(text) => {
                return Err(malformed(
                    package,
                    format_args!("schema is {text}, not {REVISION_SCHEMA:?}"),
                ));
            }
            Schema::Missing => return Err(malformed(package, "the schema member is missing")),
        }
        let Package::Object { name, version } = &self.package else {
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
        if self.tools == Tools::NotArray {
            return Err(malformed(package, "tools is not an array"));
        }
        if let Some(i) = self.not_object {
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
        if let Some(r) = self.first_rejection.take() {
            return Err(r);
        }
        Ok(Contribution {
            package_version,
            definitions: self.kept,
            definition_count: self.valid,
        })
    }
}
