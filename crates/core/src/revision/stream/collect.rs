//! The collector: what each event of the lexer means for the three kept members.

use super::*;

/// The lexer's listener: what the scanner builds of the three kept members as the events come.
/// Where the lexer is (its depth, the text it collects) stays the lexer's; each event lends it.
#[derive(Debug)]
pub(super) struct Collector {
    pub(super) package_name: String,
    pub(super) approved: Vec<String>,
    /// The kept member whose value comes next or is being read.
    pub(super) member: Option<Member>,
    /// Kept members seen, by [`Member::index`].
    pub(super) seen: [bool; 3],
    pub(super) schema: Schema,
    pub(super) package: Package,
    /// The `package` member whose value comes next (`name` or `version`).
    pub(super) package_field: Option<PackageField>,
    pub(super) tools: Tools,
    /// Items of `tools` started so far.
    pub(super) tool_items: usize,
    pub(super) not_object: Option<usize>,
    pub(super) definition: Option<Definition>,
    pub(super) kept: Vec<ValidatedDefinition>,
    pub(super) valid: usize,
    pub(super) body_bytes: u64,
    pub(super) bodies_dropped: bool,
    pub(super) first_rejection: Option<Rejection>,
}

impl Events for Collector {
    /// A member name starts: decide how much of it to collect.
    fn key_starts(&mut self, lex: &mut Lexer) {
        let depth = lex.stack.len();
        let cap = match self.region(lex) {
            _ if self.names_are_read(lex) => Some(NAME_BYTES),
            Some(Member::Tools) if self.in_definition(lex) => match &self.definition {
                Some(d) if !d.unbuilt => Some(6 * d.room() as usize + 8),
                Some(_) if depth == 3 => Some(NAME_BYTES),
                _ => None,
            },
            _ => None,
        };
        match cap {
            Some(cap) => lex.text.start(cap),
            None => lex.text.on = false,
        }
    }

    /// A value starts (the stack does not hold it yet): note what the kept members are.
    fn value_starts(&mut self, lex: &mut Lexer, kind: Kind) {
        let depth = lex.stack.len();
        lex.text.on = false;
        match (depth, self.member) {
            (1, Some(Member::Schema)) => {
                if kind == Kind::String {
                    lex.text.start(SMALL_TEXT_BYTES);
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
                        lex.text.start(SMALL_TEXT_BYTES);
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
                let in_array = lex.stack.last() == Some(&Container::Array);
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
                                lex.text.start(cap);
                            }
                        }
                    }
                    Kind::Number | Kind::Literal => {}
                }
            }
            _ => {}
        }
    }

    fn strict(&self, lex: &Lexer, key: bool) -> bool {
        (key && self.names_are_read(lex)) || self.region(lex).is_some()
    }

    fn collects_number(&self, lex: &Lexer) -> bool {
        self.region(lex).is_some()
    }

    /// A definition's string that cannot fit its definition's limit any more makes the
    /// definition oversized at once, so its text is never held past the limit.
    fn string_continues(&mut self, lex: &mut Lexer) {
        if self.in_definition(lex)
            && let Some(d) = &mut self.definition
            && !d.unbuilt
            && lex.text.on
            && !lex.text.complete()
        {
            d.grow(MAX_DEFINITION_BYTES + 1);
            lex.text.on = false;
        }
    }

    fn key_ends(&mut self, lex: &mut Lexer) {
        let depth = lex.stack.len();
        {
            if !lex.text.on {
                return;
            }
            lex.text.on = false;
            let name = match lex.text.decode() {
                Some(Ok(name)) => Some(name),
                Some(Err(e)) => return lex.fail(e),
                None => None,
            };
            if depth == 1 {
                self.member = name.as_deref().and_then(Member::of);
                if let Some(m) = self.member {
                    if self.seen[m.index()] {
                        return lex.fail(format_args!(
                            "duplicate member name {}",
                            quote(name.as_deref().unwrap_or_default())
                        ));
                    }
                    self.seen[m.index()] = true;
                }
            } else if depth == 2 && self.member == Some(Member::Package) {
                self.package_key(lex, name.as_deref());
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
        }
    }

    fn string_ends(&mut self, lex: &mut Lexer) {
        let depth = lex.stack.len();
        if depth == 1 && self.member == Some(Member::Schema) {
            self.schema_done(lex);
        } else if depth == 2 && self.member == Some(Member::Package) {
            if let Some(slot) = self.package_field.take() {
                let field = match lex.text.decode() {
                    Some(Ok(s)) => Field::Str(s),
                    Some(Err(e)) => return lex.fail(e),
                    None => Field::Long(
                        String::from_utf8_lossy(&lex.text.bytes).into_owned(),
                        lex.text.seen,
                    ),
                };
                self.set_field(slot, field);
            }
        } else if self.in_definition(lex) {
            let decoded = if lex.text.on { lex.text.decode() } else { None };
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
                    Some(Err(e)) => lex.fail(e),
                    None => def.grow(MAX_DEFINITION_BYTES + 1),
                }
            }
        }
    }

    fn number_ends(&mut self, lex: &mut Lexer, n: Number) {
        if self.in_definition(lex) {
            let in_array = lex.stack.last() == Some(&Container::Array);
            if let Some(def) = &mut self.definition {
                def.scalar(Value::Number(n), 1, in_array);
            }
        }
    }

    fn literal_ends(&mut self, lex: &mut Lexer, word: &'static [u8]) {
        if self.in_definition(lex) {
            let value = match word {
                b"true" => Value::Bool(true),
                b"false" => Value::Bool(false),
                _ => Value::Null,
            };
            let in_array = lex.stack.last() == Some(&Container::Array);
            if let Some(def) = &mut self.definition {
                def.scalar(value, word.len() as u64, in_array);
            }
        }
    }

    fn container_ends(&mut self, lex: &mut Lexer, depth: usize) {
        if depth == 3 && self.member == Some(Member::Tools) {
            if let Some(def) = self.definition.take() {
                self.definition_done(lex, def);
            }
        } else if depth > 3
            && let Some(def) = &mut self.definition
        {
            def.close();
        }
    }

    fn value_ends(&mut self, lex: &mut Lexer) {
        match lex.stack.len() {
            1 => {
                self.member = None;
                lex.text.on = false;
            }
            2 if self.member == Some(Member::Package) => self.package_field = None,
            _ => {}
        }
    }
}

impl Collector {
    pub(super) fn new(package_name: &str, approved: &[String]) -> Self {
        Self {
            package_name: package_name.to_owned(),
            approved: approved.to_vec(),
            member: None,
            seen: [false; 3],
            schema: Schema::default(),
            package: Package::default(),
            package_field: None,
            tools: Tools::default(),
            tool_items: 0,
            not_object: None,
            definition: None,
            kept: Vec::new(),
            valid: 0,
            body_bytes: 0,
            bodies_dropped: false,
            first_rejection: None,
        }
    }

    /// The kept member being read, when the scanner is inside its value. Of `package` only
    /// `name` and `version` are kept: its other members are ignored like the document's
    /// (contract section 3), so inside them nothing is strict.
    fn region(&self, lex: &Lexer) -> Option<Member> {
        if !(lex.stack.len() >= 2 || lex.text.on || lex.number_on) {
            return None;
        }
        match self.member {
            Some(Member::Package) if lex.stack.len() != 2 || self.package_field.is_none() => None,
            kept => kept,
        }
    }

    /// A member name is read here whatever it names: the document's own, and `package`'s.
    fn names_are_read(&self, lex: &Lexer) -> bool {
        let depth = lex.stack.len();
        depth == 1 || (depth == 2 && self.member == Some(Member::Package))
    }

    fn in_definition(&self, lex: &Lexer) -> bool {
        self.definition.is_some() && lex.stack.len() >= 3
    }

    fn set_field(&mut self, field: PackageField, value: Field) {
        if let Package::Object { name, version } = &mut self.package {
            *field.of(name, version) = value;
        }
    }

    fn schema_done(&mut self, lex: &Lexer) {
        self.schema = match lex.text.decode() {
            Some(Ok(s)) if s == REVISION_SCHEMA => Schema::Right,
            _ => Schema::Wrong(quote_bytes(&lex.text.bytes, lex.text.seen)),
        };
    }

    /// A member name of `package` ended: `name` and `version` are read, the rest skipped.
    fn package_key(&mut self, lex: &mut Lexer, name: Option<&str>) {
        let (field, quoted) = match name {
            Some("name") => (PackageField::Name, "\"name\""),
            Some("version") => (PackageField::Version, "\"version\""),
            _ => return,
        };
        if let Package::Object { name, version } = &mut self.package
            && *field.of(name, version) != Field::Missing
        {
            return lex.fail(format_args!("duplicate member name {quoted}"));
        }
        // Marked present (not a string) until its value says otherwise.
        self.set_field(field, Field::NotString);
        self.package_field = Some(field);
    }

    /// A definition closed: validate it now and keep what the snapshot needs of it.
    fn definition_done(&mut self, lex: &Lexer, def: Definition) {
        if lex.error.is_some() || self.first_rejection.is_some() {
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
}
