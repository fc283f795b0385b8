//! The module graph of this crate has no circles: a test that reads `src/` and fails on any.
//!
//! Why not `cargo modules dependencies --acyclic` (cargo-modules), as issue 20 suggested:
//! measured here, `cargo install cargo-modules --locked` first fails — its current release
//! (0.28) needs rustc 1.98 and the toolchain is 1.95 — and the release that builds (0.27)
//! compiles 214 crates, rust-analyzer's `ra_ap_*` among them: after 30 minutes on this shared
//! two-core machine it had compiled 63. `make test` would pay that on every fresh CI machine
//! (and break whenever cargo-modules outruns the toolchain) to answer what a scan of `src/`
//! answers in under a second. The rules of this crate make the scan exact enough: every module
//! is a file (`a.rs` or `a/mod.rs`, no `#[path]`), and every reference to another module of
//! the crate is spelled from `crate::`, `super::` or `self::` (a `use` or an inline path);
//! comments and string literals are skipped.
//!
//! What counts as a circle: take any module `M` and its children (each child together with
//! everything below it, one unit). A reference from a file in one child's unit to a module in
//! another's is an edge between the two children; the children of every `M` must form a graph
//! without cycles. References to `M` itself or to an ancestor (a child using what its parent
//! defines or re-exports) are not edges at that level: a parent that declares its children is
//! not a layer above them. So `http::asgi` → `http::conn` → `http::asgi` is a circle at the
//! `http` level, however deep inside `conn/` the references sit.
//!
//! `KNOWN` lists circles allowed while they are being taken apart: a circle not inside one of
//! them fails the test, and so does a `KNOWN` entry that is no longer a circle. It is empty:
//! the last one, `http::conn` <-> `http::websocket`, went when the WebSocket session came to
//! run over a `websocket::Channel` the driver implements (issue 20).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Circles allowed for now, each the set of sibling units (module paths) it may span (none).
const KNOWN: &[&[&str]] = &[];

/// One module's path from the crate root (`[]` is the crate).
type ModPath = Vec<String>;

struct Edge {
    from: ModPath,
    to: ModPath,
    /// Where: `file:line`.
    at: String,
}

fn module_of(src: &Path, file: &Path) -> ModPath {
    let rel = file.strip_prefix(src).expect("under src/");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().expect("a file name");
    match last.as_str() {
        "lib.rs" | "mod.rs" => {}
        name => parts.push(name.trim_end_matches(".rs").to_owned()),
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable src/") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The source without comments (doc comments name paths that are not references); line
/// breaks are kept so positions still tell the line.
fn strip_comments(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if b[i] == b'\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
        } else if b[i] == b'"' {
            // A string literal: skipped (a message may name a path), its line breaks kept.
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                } else if b[i] == b'\n' {
                    out.push('\n');
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && i + 2 < b.len() && (b[i + 2] == b'\'' || b[i + 1] == b'\\') {
            // A char literal such as '"' or '\'' (a lifetime has no closing quote).
            let end = text[i + 1..].find('\'').map_or(b.len(), |e| i + 1 + e + 1);
            let end = if b[i + 1] == b'\\' { text[i + 3..].find('\'').map_or(b.len(), |e| i + 3 + e + 1) } else { end };
            out.push_str("' '");
            i = end;
        } else {
            let ch = text[i..].chars().next().expect("in bounds");
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Every path spelled in `code`, from `crate`, `super` or `self`, with its line: inline ones
/// (`super::cycle::end(...)`) and each leaf of a `use` tree (`use super::{a, b::{c, d}}`).
fn paths(code: &str) -> Vec<(Vec<String>, usize)> {
    let b = code.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let starts = (i == 0 || !(is_ident(b[i - 1]) || b[i - 1] == b'$' || b[i - 1] == b':'))
            && ["crate", "super", "self"].iter().any(|k| b[i..].starts_with(k.as_bytes()) && b.get(i + k.len()).is_some_and(|&c| !is_ident(c)));
        if !starts {
            i += 1;
            continue;
        }
        let line = code[..i].matches('\n').count() + 1;
        let (tree, end) = use_tree(code, i);
        for p in tree {
            found.push((p, line));
        }
        i = end.max(i + 1);
    }
    found
}

/// The paths of the (use) tree at `i` and where it ends: `a::b`, `a::{b, c::d}`, `a::*`.
fn use_tree(code: &str, mut i: usize) -> (Vec<Vec<String>>, usize) {
    let b = code.as_bytes();
    let skip_ws = |mut i: usize| {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    let mut prefix = Vec::new();
    loop {
        i = skip_ws(i);
        let start = i;
        while i < b.len() && is_ident(b[i]) {
            i += 1;
        }
        if i > start {
            prefix.push(code[start..i].to_owned());
        }
        let j = skip_ws(i);
        if !b[j..].starts_with(b"::") {
            return (vec![prefix], i);
        }
        i = skip_ws(j + 2);
        if i < b.len() && b[i] == b'{' {
            let mut all = Vec::new();
            i += 1;
            loop {
                i = skip_ws(i);
                if i >= b.len() || b[i] == b'}' {
                    return (if all.is_empty() { vec![prefix] } else { all }, i + 1);
                }
                if b[i] == b',' {
                    i += 1;
                    continue;
                }
                let (subs, end) = use_tree(code, i);
                for s in subs {
                    let mut p = prefix.clone();
                    p.extend(s);
                    all.push(p);
                }
                // `self` inside braces, `x as y`, `*`: move on to the next item.
                i = end.max(i + 1);
                while i < b.len() && b[i] != b',' && b[i] != b'}' {
                    i += 1;
                }
            }
        }
        if i < b.len() && !is_ident(b[i]) {
            return (vec![prefix], i);
        }
    }
}

/// The module `path` (spelled in module `at`) names: its longest prefix that is a module.
fn resolve(at: &ModPath, path: &[String], modules: &BTreeSet<ModPath>) -> Option<ModPath> {
    let mut base = at.clone();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => base.clear(),
        Some("self") => {}
        Some("super") => {}
        _ => return None,
    }
    if rest[0] != "super" {
        rest = &rest[1..];
    }
    while rest.first().is_some_and(|s| s == "super") {
        base.pop()?;
        rest = &rest[1..];
    }
    for seg in rest {
        let mut next = base.clone();
        next.push(seg.clone());
        if !modules.contains(&next) {
            break;
        }
        base = next;
    }
    Some(base)
}

fn graph() -> (BTreeSet<ModPath>, Vec<Edge>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let modules: BTreeSet<ModPath> = files.iter().map(|f| module_of(&src, f)).collect();
    let mut edges = Vec::new();
    for file in &files {
        let at = module_of(&src, file);
        let code = strip_comments(&std::fs::read_to_string(file).expect("a readable source file"));
        for (path, line) in paths(&code) {
            if let Some(to) = resolve(&at, &path, &modules) {
                let rel = file.strip_prefix(&src).expect("under src/").display();
                edges.push(Edge { from: at.clone(), to, at: format!("src/{rel}:{line}") });
            }
        }
    }
    (modules, edges)
}

/// An edge between two sibling units: the level (their parent) and the two children.
fn sibling_edge(e: &Edge) -> Option<(ModPath, String, String)> {
    let common = e.from.iter().zip(&e.to).take_while(|(a, b)| a == b).count();
    if common == e.from.len() || common == e.to.len() {
        return None; // to an ancestor or into its own subtree
    }
    Some((e.from[..common].to_vec(), e.from[common].clone(), e.to[common].clone()))
}

/// Strongly connected components with more than one member (Tarjan).
fn circles(nodes: &BTreeSet<String>, adj: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    struct T<'a> {
        adj: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        if let Some(ws) = t.adj.get(v) {
            for w in ws {
                if !t.index.contains_key(w.as_str()) {
                    visit(t, w);
                    let lw = t.low[w.as_str()];
                    let lv = t.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if t.on.contains(w.as_str()) {
                    let iw = t.index[w.as_str()];
                    let lv = t.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = BTreeSet::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.insert(w.to_owned());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                t.out.push(comp);
            }
        }
    }
    let mut t = T { adj, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), on: BTreeSet::new(), out: Vec::new() };
    for v in nodes {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

/// Every circle in the crate: its members as full module paths, with one reference per edge.
fn all_circles() -> Vec<(BTreeSet<String>, Vec<String>)> {
    let (_, edges) = graph();
    let mut levels: BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    let mut example: BTreeMap<(ModPath, String, String), &str> = BTreeMap::new();
    for e in &edges {
        if let Some((level, a, b)) = sibling_edge(e) {
            levels.entry(level.clone()).or_default().entry(a.clone()).or_default().insert(b.clone());
            example.entry((level, a, b)).or_insert(&e.at);
        }
    }
    let mut found = Vec::new();
    for (level, adj) in &levels {
        let nodes: BTreeSet<String> = adj.iter().flat_map(|(a, bs)| std::iter::once(a.clone()).chain(bs.iter().cloned())).collect();
        for comp in circles(&nodes, adj) {
            let name = |m: &str| level.iter().map(String::as_str).chain([m]).collect::<Vec<_>>().join("::");
            let mut why = Vec::new();
            for a in &comp {
                for b in adj[a].iter().filter(|b| comp.contains(*b)) {
                    why.push(format!("{} -> {} ({})", name(a), name(b), example[&(level.clone(), a.clone(), b.clone())]));
                }
            }
            found.push((comp.iter().map(|m| name(m)).collect(), why));
        }
    }
    found
}

#[test]
fn no_module_circles_beyond_the_known_ones() {
    let known: Vec<BTreeSet<String>> = KNOWN.iter().map(|k| k.iter().map(|s| (*s).to_owned()).collect()).collect();
    let found = all_circles();
    let mut problems = Vec::new();
    for (members, why) in &found {
        if !known.iter().any(|k| members.is_subset(k)) {
            problems.push(format!("a circle among {members:?}:\n    {}", why.join("\n    ")));
        }
    }
    for k in &known {
        if !found.iter().any(|(members, _)| members.is_subset(k) && members.len() > 1) {
            problems.push(format!("KNOWN lists {k:?}, which is no longer a circle: take it off the list"));
        }
    }
    assert!(problems.is_empty(), "module circles (see src/module_graph.rs):\n{}", problems.join("\n"));
}

#[test]
fn the_scan_sees_use_trees_and_inline_paths() {
    let code = strip_comments("use super::{a, b::{c, d as e}, f::*};\n// crate::x\nfn g() { crate::y::z(\"super::w\"); }\n");
    let got: Vec<(String, usize)> = paths(&code).into_iter().map(|(p, l)| (p.join("::"), l)).collect();
    let want = [("super::a", 1), ("super::b::c", 1), ("super::b::d", 1), ("super::f", 1), ("crate::y::z", 3)];
    assert_eq!(got, want.iter().map(|(p, l)| (p.to_string(), *l)).collect::<Vec<_>>());
}

#[test]
fn a_circle_of_three_is_found() {
    let nodes: BTreeSet<String> = ["a", "b", "c", "d"].iter().map(|s| s.to_string()).collect();
    let mut adj: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (x, y) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        adj.entry(x.into()).or_default().insert(y.into());
    }
    let got = circles(&nodes, &adj);
    assert_eq!(got, vec![["a", "b", "c"].iter().map(|s| s.to_string()).collect::<BTreeSet<_>>()]);
}
