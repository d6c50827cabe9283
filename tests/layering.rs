//! The layering of `src/`, checked: a module imports only modules of a lower layer, and no two
//! sibling modules import each other, directly or around a cycle. And the map of `src/` kept:
//! every module of a file of its own is named in its parent's `//!` doc (`src/lib.rs`'s
//! `# Layout`, a parent file's list of its files), so that a doc cannot miss a new file.
//!
//! # The layers, lowest first
//! Modules on one line are independent of each other (none imports another); each may import
//! any module of an earlier line (a lower layer), never one of a later line (a layer above it).
//! A new child of an ordered level must be given its line here and in [`LAYERS`].
//!
//! The crate:
//! 1. `accounts`, `clock`, `diag`, `metrics`, `schedule`, `manual`
//! 2. `files`
//! 3. `task`
//! 4. `plan`, `executor`
//! 5. `coord`
//! 6. `firing`, `config`, `service`
//! 7. `logging`, `preflight`
//! 8. `ops`
//! 9. `daemon`
//! 10. `http`
//! 11. `cli`
//!
//! `coord`:
//! 1. `rank` (who leads: the ranking), `zkop` (a ZooKeeper operation, as data)
//! 2. `pool` (who owns a pool's items)
//! 3. `lease` (the lease rule, a pool's units included)
//! 4. `records` (the records in ZooKeeper and the state dir)
//! 5. `record` (the fire-record rules)
//! 6. `backfill` (backfill requests and their rules)
//! 7. `operator` (the operator's writes: pause, resume, drain, undrain, trigger, backfill, cancel)
//! 8. `node`, `local` (the cluster protocol; the embedded backend)
//! 9. `zk` (the driver of the node)
//!
//! `coord::local`:
//! 1. `errors`, `change`
//! 2. `queue`
//! 3. `journal`
//! 4. `state`
//! 5. `history`, `pause`, `requests`
//!
//! Below these levels (the node's submodules, `daemon`'s, `ops`'...) no order is written down,
//! but sibling modules may not form a cycle.
//!
//! # What counts as an import
//! Every path that starts with `crate::`, `super::` or `self::`, in a `use` item (trees
//! expanded) or in code, in every file of the module tree from `src/lib.rs` (test modules
//! included: a test of a lower layer that needs a higher one belongs to the higher one).
//! Comments and string literals are not code. A path names the longest module it reaches:
//! `crate::coord::records::FireRecord` is an import of `coord::records`. A module may use its
//! ancestors' items (`super::Leadership` from `coord::node`) and its descendants (a parent
//! assembles its children); both are outside the rule, which is between siblings.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// The layers of each level that has a written order: the parent module (`""` is the crate),
/// then its children's layers, lowest first.
const LAYERS: &[(&str, &[&[&str]])] = &[
    (
        "",
        &[
            &["accounts", "clock", "diag", "metrics", "schedule", "manual"],
            &["files"],
            &["task"],
            &["plan", "executor"],
            &["coord"],
            &["firing", "config", "service"],
            &["logging", "preflight"],
            &["ops"],
            &["daemon"],
            &["http"],
            &["cli"],
        ],
    ),
    (
        "coord",
        &[
            &["rank", "zkop"],
            &["pool"],
            &["lease"],
            &["records"],
            &["record"],
            &["backfill"],
            &["operator"],
            &["node", "local"],
            &["zk"],
        ],
    ),
    (
        "coord::local",
        &[
            &["errors", "change"],
            &["queue"],
            &["journal"],
            &["state"],
            &["history", "pause", "requests"],
        ],
    ),
];

#[test]
fn no_module_imports_a_higher_layer_and_siblings_form_no_cycle() {
    let src = std::env::var("LAYERING_SRC")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    // The scan sees the imports (a check that saw none would pass).
    let tree = scan(&src);
    let zk_drives_the_node = tree.imports.iter().any(|import| {
        import.from == ["coord", "zk"] && tree.resolve(&import.to) == ["coord", "node"]
    });
    assert!(
        zk_drives_the_node,
        "the scan misses coord::zk's import of coord::node"
    );
    let problems = check(&src, LAYERS);
    assert!(
        problems.is_empty(),
        "the layering of src/ is broken (see tests/layering.rs for the layers):\n{}",
        problems.join("\n")
    );
}

#[test]
fn an_import_of_a_higher_layer_is_reported_with_its_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "lib.rs", "pub mod low;\npub mod high;\n");
    write(dir.path(), "high.rs", "");
    write(
        dir.path(),
        "low.rs",
        "// crate::high in a comment is no import\npub struct Thing;\n\nfn f() {\n    \
         let _ = \"crate::high\";\n    crate::high::g();\n}\n",
    );
    let layers: &[(&str, &[&[&str]])] = &[("", &[&["low"], &["high"]])];
    let problems = check(dir.path(), layers);
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(problems[0].starts_with("low.rs:6: "), "{}", problems[0]);
    assert!(
        problems[0].contains("`low` imports `high`"),
        "{}",
        problems[0]
    );
}

#[test]
fn a_cycle_between_nested_siblings_is_reported_with_each_import() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "lib.rs", "pub mod outer;\n");
    write(dir.path(), "outer/mod.rs", "mod a;\nmod b;\nmod c;\n");
    write(
        dir.path(),
        "outer/a.rs",
        "use super::b::B;\npub struct A;\n",
    );
    write(
        dir.path(),
        "outer/b.rs",
        "use crate::outer::{c::{self, C}};\npub struct B;\n",
    );
    write(
        dir.path(),
        "outer/c.rs",
        "pub struct C;\n#[cfg(test)]\nmod tests {\n    use super::super::a::A;\n}\n",
    );
    let problems = check(dir.path(), &[]);
    assert_eq!(problems.len(), 1, "{problems:#?}");
    let cycle = &problems[0];
    assert!(cycle.contains("`outer`: a, b, c"), "{cycle}");
    for import in ["outer/a.rs:1", "outer/b.rs:1", "outer/c.rs:4"] {
        assert!(cycle.contains(import), "{import} missing from {cycle}");
    }
}

#[test]
fn a_module_missing_from_the_written_order_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "lib.rs", "pub mod low;\npub mod new;\n");
    write(dir.path(), "low.rs", "");
    write(dir.path(), "new.rs", "use crate::low;\n");
    let layers: &[(&str, &[&[&str]])] = &[("", &[&["low"]])];
    let problems = check(dir.path(), layers);
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(problems[0].contains("`new`"), "{}", problems[0]);
}

#[test]
fn every_module_is_named_in_its_parent_s_doc() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    // The scan sees the crate's files (a check that saw none would pass).
    assert!(
        scan(&src).files.len() > 100,
        "the scan misses the files of src/"
    );
    let problems = undocumented(&src);
    assert!(
        problems.is_empty(),
        "modules missing from the file list in their parent's doc:\n{}",
        problems.join("\n")
    );
}

#[test]
fn a_module_missing_from_its_parent_s_doc_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "lib.rs",
        "//! # Layout\n//! - [`outer`]: the outer module.\n\npub mod outer;\nmod hidden;\n",
    );
    write(dir.path(), "hidden.rs", "");
    write(
        dir.path(),
        "outer/mod.rs",
        "//! Files: `a.rs`, `b::B`; `c` once.\nmod a;\nmod b;\nmod c;\nmod d;\n\
         #[cfg(test)]\nmod tests;\n",
    );
    for file in ["a", "b", "c", "d", "tests"] {
        write(dir.path(), &format!("outer/{file}.rs"), "");
    }
    let problems = undocumented(dir.path());
    assert_eq!(
        problems,
        [
            "lib.rs:5: `hidden` is not named in the `//!` doc of lib.rs: add it to the list of \
             its files there, with what it holds",
            "outer/mod.rs:5: `outer::d` is not named in the `//!` doc of outer/mod.rs: add it \
             to the list of its files there, with what it holds",
        ]
    );
}

fn write(root: &Path, path: &str, text: &str) {
    let path = root.join(path);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

/// The imports between the children of one module: importer -> imported -> where.
type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

/// One import: from a module to the module a path names, where it is written.
#[derive(Debug, Clone)]
struct Import {
    from: Vec<String>,
    to: Vec<String>,
    file: String,
    line: usize,
}

/// Every problem with the layering of the crate rooted at `src/lib.rs`: imports of a higher
/// layer (or of a module of the same layer), children of an ordered level missing from its
/// order, and cycles between siblings.
fn check(src: &Path, layers: &[(&str, &[&[&str]])]) -> Vec<String> {
    let tree = scan(src);
    let mut problems = Vec::new();
    // Sibling imports, by parent module: child -> child -> where.
    let mut levels: BTreeMap<Vec<String>, Graph> = BTreeMap::new();
    for import in &tree.imports {
        let to = tree.resolve(&import.to);
        let common = import
            .from
            .iter()
            .zip(&to)
            .take_while(|(a, b)| a == b)
            .count();
        if common == import.from.len() || common == to.len() {
            continue; // an ancestor or a descendant
        }
        let parent = import.from[..common].to_vec();
        let (a, b) = (&import.from[common], &to[common]);
        let place = format!("{}:{}", import.file, import.line);
        if let Some((_, order)) = layers.iter().find(|(p, _)| *p == parent.join("::")) {
            let rank = |m: &str| order.iter().position(|layer| layer.contains(&m));
            match (rank(a), rank(b)) {
                (Some(ra), Some(rb)) if ra <= rb => problems.push(format!(
                    "{place}: `{}` imports `{}`, which is {} (`{}`)",
                    name(&parent, a),
                    name(&parent, b),
                    if ra == rb {
                        "in its own layer"
                    } else {
                        "in a layer above it"
                    },
                    to.join("::"),
                )),
                _ => {}
            }
        }
        levels
            .entry(parent)
            .or_default()
            .entry(a.clone())
            .or_default()
            .entry(b.clone())
            .or_default()
            .insert(place);
    }
    for (parent, order) in layers {
        let parent: Vec<String> = split(parent);
        for child in tree.children(&parent) {
            if !order.iter().any(|layer| layer.contains(&child.as_str())) {
                problems.push(format!(
                    "`{}` is in no layer: add it to LAYERS in tests/layering.rs (and to the \
                     layers in its doc)",
                    name(&parent, &child)
                ));
            }
        }
    }
    for (parent, graph) in &levels {
        for cycle in cycles(graph) {
            let mut links = Vec::new();
            for a in &cycle {
                for b in &cycle {
                    if let Some(places) = graph.get(a).and_then(|to| to.get(b)) {
                        let places: Vec<&str> = places.iter().map(String::as_str).collect();
                        links.push(format!("  {a} -> {b}: {}", places.join(", ")));
                    }
                }
            }
            problems.push(format!(
                "a cycle between the children of `{}`: {}\n{}",
                if parent.is_empty() {
                    "crate".to_string()
                } else {
                    parent.join("::")
                },
                cycle.join(", "),
                links.join("\n")
            ));
        }
    }
    // A `use` of several items of one module is one problem.
    problems.dedup();
    problems
}

/// The modules of a file of their own that their parent's `//!` doc does not name: each
/// parent lists its files (`src/lib.rs` under `# Layout`, `coord/node.rs` under `# Files`,
/// others in a sentence), so a module added without a word there is reported. Test modules
/// (`#[cfg(test)]`, and those inside them) need no word. A doc names a module `x` with a code
/// span of `x`, `x.rs`, `x/...`, `x::...` or `...::x`.
fn undocumented(src: &Path) -> Vec<String> {
    let tree = scan(src);
    let mut problems = Vec::new();
    for (module, file, line) in &tree.files {
        let in_a_test = (1..=module.len()).any(|n| tree.tests.contains(&module[..n]));
        let (child, parent) = module.split_last().unwrap();
        if in_a_test || names(&tree.docs[parent], child) {
            continue;
        }
        problems.push(format!(
            "{file}:{line}: `{}` is not named in the `//!` doc of {file}: add it to the list of \
             its files there, with what it holds",
            module.join("::")
        ));
    }
    problems.sort();
    problems
}

/// Whether `doc` has a code span naming the module `child` (see [`undocumented`]).
fn names(doc: &str, child: &str) -> bool {
    doc.split('`').skip(1).step_by(2).any(|span| {
        span == child
            || span == format!("{child}.rs")
            || span.starts_with(&format!("{child}/"))
            || span.starts_with(&format!("{child}::"))
            || span.ends_with(&format!("::{child}"))
    })
}

/// The module tree from `src/lib.rs` and its imports.
fn scan(src: &Path) -> Tree {
    let mut tree = Tree::default();
    tree.read(src, &src.join("lib.rs"), Vec::new());
    tree
}

fn split(path: &str) -> Vec<String> {
    path.split("::")
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn name(parent: &[String], child: &str) -> String {
    let mut path = parent.to_vec();
    path.push(child.to_string());
    path.join("::")
}

/// The strongly connected components of more than one module (Tarjan), each sorted.
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            for w in self.graph.get(v).into_iter().flat_map(|to| to.keys()) {
                if !self.index.contains_key(w.as_str()) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w.as_str()]);
                    self.low.insert(v, low);
                } else if self.stack.contains(&w.as_str()) {
                    let low = self.low[v].min(self.index[w.as_str()]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let at = self.stack.iter().rposition(|m| *m == v).unwrap();
                let mut component: Vec<String> =
                    self.stack.drain(at..).map(str::to_string).collect();
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    let nodes: BTreeSet<&str> = graph
        .iter()
        .flat_map(|(a, to)| std::iter::once(a.as_str()).chain(to.keys().map(String::as_str)))
        .collect();
    for v in nodes {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.found
}

/// The module tree read from the files, and every import in it.
#[derive(Default)]
struct Tree {
    modules: BTreeSet<Vec<String>>,
    /// The modules declared `#[cfg(test)]`: they are in no layer (they test their siblings).
    tests: BTreeSet<Vec<String>>,
    imports: Vec<Import>,
    /// Each file read: its module's `//!` doc, by module.
    docs: BTreeMap<Vec<String>, String>,
    /// Each module of a file of its own (`mod x;`), with the file and line declaring it.
    files: Vec<(Vec<String>, String, usize)>,
}

impl Tree {
    /// Reads the module `module` from `file` (under `src`), then the files of its children.
    fn read(&mut self, src: &Path, file: &Path, module: Vec<String>) {
        let text = fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        let shown = file.strip_prefix(src).unwrap_or(file).display().to_string();
        let tokens = tokenize(&text);
        self.modules.insert(module.clone());
        let doc: Vec<&str> = text
            .lines()
            .filter_map(|line| line.trim_start().strip_prefix("//!"))
            .collect();
        self.docs.insert(module.clone(), doc.join("\n"));
        // Where a child declared `mod x;` is looked for: beside `mod.rs`/`lib.rs`, else in the
        // directory named after the file.
        let base = file.parent().unwrap().to_path_buf();
        let stem = file.file_stem().unwrap().to_str().unwrap();
        let children_dir = if matches!(stem, "mod" | "lib") {
            base.clone()
        } else {
            base.join(stem)
        };
        let mut inline: Vec<(String, usize)> = Vec::new(); // inline `mod x {` and its depth
        let mut depth = 0;
        // The attributes seen since the last `;`, `{` or `}`: they belong to the next item.
        let mut path_attr: Option<String> = None;
        let mut cfg_test = false;
        let mut i = 0;
        while i < tokens.len() {
            let here = |inline: &[(String, usize)]| {
                let mut m = module.clone();
                m.extend(inline.iter().map(|(n, _)| n.clone()));
                m
            };
            if matches!(tokens[i].kind, Kind::Punct(';' | '{' | '}')) {
                path_attr = None;
                cfg_test = false;
            }
            match &tokens[i].kind {
                Kind::Punct('{') => depth += 1,
                Kind::Punct('}') => {
                    depth -= 1;
                    if inline.last().is_some_and(|(_, d)| *d == depth) {
                        inline.pop();
                    }
                }
                Kind::Punct('#') => {
                    let attribute: Vec<&Kind> =
                        tokens[i + 1..].iter().take(6).map(|t| &t.kind).collect();
                    let ident = |s: &str| Kind::Ident(s.to_string());
                    if attribute
                        == [
                            &Kind::Punct('['),
                            &ident("cfg"),
                            &Kind::Punct('('),
                            &ident("test"),
                            &Kind::Punct(')'),
                            &Kind::Punct(']'),
                        ]
                    {
                        cfg_test = true;
                    }
                    // `#[path = "file.rs"]` applies to the next `mod x;`.
                    if let [
                        Token {
                            kind: Kind::Punct('['),
                            ..
                        },
                        Token {
                            kind: Kind::Ident(path),
                            ..
                        },
                        Token {
                            kind: Kind::Punct('='),
                            ..
                        },
                        Token {
                            kind: Kind::Str(value),
                            ..
                        },
                        ..,
                    ] = &tokens[i + 1..]
                        && path == "path"
                    {
                        path_attr = Some(value.clone());
                    }
                }
                Kind::Ident(word) if word == "mod" => {
                    if let (Some(Kind::Ident(child)), Some(next)) = (
                        tokens.get(i + 1).map(|t| &t.kind),
                        tokens.get(i + 2).map(|t| &t.kind),
                    ) {
                        let mut child_module = here(&inline);
                        child_module.push(child.clone());
                        if std::mem::take(&mut cfg_test) {
                            self.tests.insert(child_module.clone());
                        }
                        match next {
                            Kind::Punct('{') => {
                                self.modules.insert(child_module);
                                inline.push((child.clone(), depth));
                                depth += 1;
                                i += 3;
                                continue;
                            }
                            Kind::Punct(';') => {
                                if inline.is_empty() {
                                    let line = tokens[i].line;
                                    self.files.push((child_module.clone(), shown.clone(), line));
                                }
                                let mut dir = children_dir.clone();
                                for (n, _) in &inline {
                                    dir = dir.join(n);
                                }
                                let child_file = match path_attr.take() {
                                    Some(path) => base.join(path),
                                    None if dir.join(format!("{child}.rs")).exists() => {
                                        dir.join(format!("{child}.rs"))
                                    }
                                    None => dir.join(child).join("mod.rs"),
                                };
                                self.read(src, &child_file, child_module);
                            }
                            _ => {}
                        }
                    }
                }
                Kind::Ident(word) if word == "use" => {
                    let end = tokens[i..]
                        .iter()
                        .position(|t| t.kind == Kind::Punct(';'))
                        .map_or(tokens.len(), |n| i + n);
                    let mut paths = Vec::new();
                    expand(&tokens[i + 1..end], &[], &mut paths);
                    for (path, line) in paths {
                        self.import(&here(&inline), path, &shown, line);
                    }
                    i = end + 1;
                    continue;
                }
                Kind::Ident(word)
                    if matches!(word.as_str(), "crate" | "super" | "self")
                        && i.checked_sub(1)
                            .is_none_or(|p| tokens[p].kind != Kind::PathSep) =>
                {
                    let line = tokens[i].line;
                    let mut path = vec![word.clone()];
                    let mut j = i + 1;
                    while let (Some(Kind::PathSep), Some(Kind::Ident(next))) = (
                        tokens.get(j).map(|t| &t.kind),
                        tokens.get(j + 1).map(|t| &t.kind),
                    ) {
                        path.push(next.clone());
                        j += 2;
                    }
                    if path.len() > 1 {
                        self.import(&here(&inline), path, &shown, line);
                    }
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }

    /// Records an import of `path` (as written) from `module`.
    fn import(&mut self, module: &[String], path: Vec<String>, file: &str, line: usize) {
        let mut to = match path.first().map(String::as_str) {
            Some("crate") => Vec::new(),
            Some("self") => module.to_vec(),
            Some("super") => module.to_vec(),
            _ => return, // another crate, or a name imported by a `use` seen already
        };
        let mut rest = &path[1..];
        if path[0] == "super" {
            to.pop();
            while rest.first().is_some_and(|s| s == "super") {
                to.pop();
                rest = &rest[1..];
            }
        }
        to.extend(rest.iter().filter(|s| *s != "self").cloned());
        self.imports.push(Import {
            from: module.to_vec(),
            to,
            file: file.to_string(),
            line,
        });
    }

    /// The longest module `path` reaches.
    fn resolve(&self, path: &[String]) -> Vec<String> {
        (0..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|m| self.modules.contains(m))
            .unwrap_or_default()
    }

    fn children(&self, parent: &[String]) -> Vec<String> {
        self.modules
            .iter()
            .filter(|m| m.len() == parent.len() + 1 && m.starts_with(parent))
            .filter(|m| !self.tests.contains(*m))
            .map(|m| m[parent.len()].clone())
            .collect()
    }
}

/// Expands a `use` tree (after `use`, before `;`) into its paths, each with its line.
fn expand(tokens: &[Token], prefix: &[String], out: &mut Vec<(Vec<String>, usize)>) {
    let mut path = prefix.to_vec();
    let mut line = tokens.first().map_or(0, |t| t.line);
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i].kind {
            Kind::Ident(word) if word == "as" => {
                i += 2; // the alias
                continue;
            }
            Kind::Ident(word) => {
                if path.len() == prefix.len() {
                    line = tokens[i].line;
                }
                path.push(word.clone());
            }
            Kind::Punct('{') => {
                // The group runs to its matching brace; its items are split at top-level commas.
                let mut depth = 0;
                let mut start = i + 1;
                let mut j = i;
                loop {
                    match tokens[j].kind {
                        Kind::Punct('{') => depth += 1,
                        Kind::Punct('}') => {
                            depth -= 1;
                            if depth == 0 {
                                expand(&tokens[start..j], &path, out);
                                break;
                            }
                        }
                        Kind::Punct(',') if depth == 1 => {
                            expand(&tokens[start..j], &path, out);
                            start = j + 1;
                        }
                        _ => {}
                    }
                    j += 1;
                }
                return;
            }
            _ => {}
        }
        i += 1;
    }
    if path.len() > prefix.len() {
        out.push((path, line));
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Ident(String),
    /// A string literal's contents (only `#[path = "..."]` reads them).
    Str(String),
    PathSep,
    Punct(char),
}

#[derive(Debug, Clone)]
struct Token {
    kind: Kind,
    line: usize,
}

/// The identifiers, `::`, string literals and punctuation of Rust source; comments, numbers,
/// lifetimes and character literals are left out.
fn tokenize(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(chars[i] == '\n');
                    i += 1;
                }
            }
        } else if c == '"'
            || (matches!(c, 'r' | 'b')
                && (at(i + 1) == '"' || (at(i + 1) == '#' && c == 'r'))
                && i.checked_sub(1)
                    .is_none_or(|p| !(chars[p].is_alphanumeric() || chars[p] == '_')))
            || (c == 'b' && at(i + 1) == 'r' && matches!(at(i + 2), '"' | '#'))
        {
            // A string: "...", b"...", r"...", r#"..."#, br#"..."#.
            let start_line = line;
            let mut j = i;
            while chars[j] != '"' && chars[j] != '#' {
                j += 1;
            }
            let raw = chars[i..j].contains(&'r');
            let mut hashes = 0;
            while chars[j] == '#' {
                hashes += 1;
                j += 1;
            }
            j += 1; // the opening quote
            let mut value = String::new();
            loop {
                let d = chars[j];
                if d == '\\' && !raw {
                    value.push(d);
                    value.push(chars[j + 1]);
                    line += usize::from(chars[j + 1] == '\n');
                    j += 2;
                    continue;
                }
                if d == '"' && (0..hashes).all(|h| at(j + 1 + h) == '#') {
                    j += 1 + hashes;
                    break;
                }
                line += usize::from(d == '\n');
                value.push(d);
                j += 1;
            }
            tokens.push(Token {
                kind: Kind::Str(value),
                line: start_line,
            });
            i = j;
        } else if c == '\'' {
            // A character literal ('a', '\n', '\'', '\u{..}') or a lifetime ('a).
            if at(i + 1) == '\\' {
                let mut j = i + 2;
                while chars[j] != '\'' || chars[j - 1] == '\\' && j == i + 2 {
                    j += 1;
                }
                i = j + 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1; // a lifetime: its name follows as an identifier
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(Token {
                kind: Kind::Ident(chars[start..i].iter().collect()),
                line,
            });
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
        } else if c == ':' && at(i + 1) == ':' {
            tokens.push(Token {
                kind: Kind::PathSep,
                line,
            });
            i += 2;
        } else if c.is_whitespace() {
            i += 1;
        } else {
            tokens.push(Token {
                kind: Kind::Punct(c),
                line,
            });
            i += 1;
        }
    }
    tokens
}
