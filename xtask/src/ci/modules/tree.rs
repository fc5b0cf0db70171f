//! A library crate's module tree, read with `syn` from its root file following `mod`
//! declarations, and the "uses" edges between its modules.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use proc_macro2::{Spacing, TokenStream, TokenTree};
use syn::visit::{self, Visit};
use syn::{Item, UseTree};

/// A module's path from the crate root (`[]` is the root, `["strategy", "cold"]` is
/// `crate::strategy::cold`).
pub(crate) type ModulePath = Vec<String>;

/// Reads a source file; `io::ErrorKind::NotFound` when it does not exist.
pub(crate) type ReadSource<'a> = &'a dyn Fn(&Path) -> io::Result<String>;

/// One module: where it is written, what it declares and imports, and the paths its
/// code names (nested modules excluded: they are modules of their own).
#[derive(Debug, Default)]
struct Module {
    /// The file that holds the module's body (for an inline module, the enclosing file).
    file: PathBuf,
    children: BTreeSet<String>,
    /// Names of the items it declares itself (types, functions, traits, macros, ...).
    declared: BTreeSet<String>,
    /// Names its module-level `use` declarations bring in, with the path as written.
    imports: BTreeMap<String, Vec<String>>,
    /// The paths of its module-level glob imports (`use a::b::*` gives `a::b`).
    globs: Vec<Vec<String>>,
    references: Vec<Reference>,
}

/// A path the code names, as written, with its line.
#[derive(Debug)]
struct Reference {
    segments: Vec<String>,
    line: usize,
}

/// A use of one module by another: `from`'s code names an item of `to` (or `to` itself)
/// at `file:line`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Edge {
    pub(crate) from: ModulePath,
    pub(crate) to: ModulePath,
    pub(crate) file: PathBuf,
    pub(crate) line: usize,
}

/// Where a path leads: the module it ends in, and whether every segment was a module
/// (`whole`) or it went on into an item declared there.
struct Resolved {
    module: ModulePath,
    whole: bool,
}

/// What a name means inside a module.
enum Step {
    Module(ModulePath),
    Item(ModulePath),
    Unknown,
}

/// How deep re-exports and globs are followed before giving up (a `use` that names
/// itself through a glob would loop otherwise).
const MAX_DEPTH: usize = 16;

/// A crate's modules, by path.
#[derive(Debug)]
pub(crate) struct ModuleTree {
    modules: BTreeMap<ModulePath, Module>,
}

impl ModuleTree {
    /// Reads the crate whose root file is `root` (its `lib.rs`).
    pub(crate) fn read(root: &Path, read: ReadSource<'_>) -> Result<Self> {
        let mut tree = ModuleTree {
            modules: BTreeMap::new(),
        };
        let children_dir = root.parent().unwrap_or(Path::new("")).to_path_buf();
        tree.load_file(Vec::new(), root, &children_dir, read)?;
        Ok(tree)
    }

    fn load_file(
        &mut self,
        path: ModulePath,
        file: &Path,
        children_dir: &Path,
        read: ReadSource<'_>,
    ) -> Result<()> {
        let text = read(file).with_context(|| format!("cannot read {}", file.display()))?;
        let ast = syn::parse_file(&text).map_err(|error| {
            let start = error.span().start();
            anyhow::anyhow!(
                "{}:{}:{}: cannot parse as Rust: {error}",
                file.display(),
                start.line,
                start.column + 1
            )
        })?;
        self.add_module(path, file, children_dir, &ast.items, false, read)
    }

    /// Adds the module `path` whose items are `items` (in `file`), and its children.
    /// `children_dir` is where `mod x;` finds `x.rs` or `x/mod.rs`; `inline` says
    /// whether this is an inline `mod x { }` (for `#[path]`, which is relative to the
    /// file's directory outside inline modules and to `children_dir` inside them).
    fn add_module(
        &mut self,
        path: ModulePath,
        file: &Path,
        children_dir: &Path,
        items: &[Item],
        inline: bool,
        read: ReadSource<'_>,
    ) -> Result<()> {
        let mut module = Module {
            file: file.to_path_buf(),
            ..Module::default()
        };
        let mut collector = ReferenceCollector {
            references: &mut module.references,
        };
        for item in items {
            collector.visit_item(item);
        }
        let mut nested = Vec::new();
        for item in items {
            match item {
                Item::Mod(declaration) => {
                    let name = declaration.ident.to_string();
                    module.children.insert(name.clone());
                    nested.push((name, declaration));
                }
                Item::Use(declaration) => {
                    collect_imports(&declaration.tree, &mut Vec::new(), &mut module)
                }
                other => {
                    if let Some(name) = declared_name(other) {
                        module.declared.insert(name);
                    }
                }
            }
        }
        self.modules.insert(path.clone(), module);
        for (name, declaration) in nested {
            let mut child = path.clone();
            child.push(name.clone());
            let child_dir = children_dir.join(&name);
            if let Some((_, items)) = &declaration.content {
                self.add_module(child, file, &child_dir, items, true, read)?;
                continue;
            }
            let (child_file, grandchildren_dir) = match path_attribute(&declaration.attrs) {
                Some(relative) => {
                    let base = if inline {
                        children_dir.to_path_buf()
                    } else {
                        file.parent().unwrap_or(Path::new("")).to_path_buf()
                    };
                    let child_file = base.join(relative);
                    // A file named by #[path] holds its children beside it, as a mod.rs.
                    let dir = child_file.parent().unwrap_or(Path::new("")).to_path_buf();
                    (child_file, dir)
                }
                None => (
                    find_module_file(children_dir, &name, file, &declaration.ident, read)?,
                    child_dir,
                ),
            };
            self.load_file(child, &child_file, &grandchildren_dir, read)?;
        }
        Ok(())
    }

    /// Every "uses" edge between two different modules of the crate, in module order
    /// and then in source order.
    pub(crate) fn edges(&self) -> Vec<Edge> {
        let mut edges = Vec::new();
        for (path, module) in &self.modules {
            for reference in &module.references {
                let Some(resolved) = self.resolve(path, &reference.segments, 0) else {
                    continue;
                };
                if resolved.module != *path {
                    edges.push(Edge {
                        from: path.clone(),
                        to: resolved.module,
                        file: module.file.clone(),
                        line: reference.line,
                    });
                }
            }
        }
        edges
    }

    /// Where `segments`, written in `module`, lead inside the crate; `None` for a path
    /// outside it (another crate, the standard library, a local name).
    fn resolve(&self, module: &[String], segments: &[String], depth: usize) -> Option<Resolved> {
        if depth > MAX_DEPTH {
            return None;
        }
        let (first, rest) = segments.split_first()?;
        let (mut current, rest) = match first.as_str() {
            "crate" => (Vec::new(), rest),
            "self" => (module.to_vec(), rest),
            "super" => {
                let mut current = module.to_vec();
                current.pop()?;
                let mut rest = rest;
                while let Some(("super", after)) =
                    rest.split_first().map(|(s, after)| (s.as_str(), after))
                {
                    current.pop()?;
                    rest = after;
                }
                (current, rest)
            }
            name => match self.step(module, name, depth) {
                Step::Module(path) => (path, rest),
                Step::Item(path) => {
                    return Some(Resolved {
                        module: path,
                        whole: false,
                    })
                }
                Step::Unknown => return None,
            },
        };
        for segment in rest {
            match self.step(&current, segment, depth) {
                Step::Module(path) => current = path,
                Step::Item(path) => {
                    return Some(Resolved {
                        module: path,
                        whole: false,
                    })
                }
                // An item the analysis cannot see (made by a macro, say): it is here.
                Step::Unknown => {
                    return Some(Resolved {
                        module: current,
                        whole: false,
                    })
                }
            }
        }
        Some(Resolved {
            module: current,
            whole: true,
        })
    }

    /// What `name` means inside `module`: a child module, an import (followed to where
    /// it leads), an item declared there, or a name a glob import brings in.
    fn step(&self, module: &[String], name: &str, depth: usize) -> Step {
        let Some(current) = self.modules.get(module) else {
            return Step::Unknown;
        };
        if current.children.contains(name) {
            let mut child = module.to_vec();
            child.push(name.to_string());
            return Step::Module(child);
        }
        if let Some(imported) = current.imports.get(name) {
            return match self.resolve(module, imported, depth + 1) {
                Some(Resolved {
                    module,
                    whole: true,
                }) => Step::Module(module),
                Some(Resolved { module, .. }) => Step::Item(module),
                None => Step::Unknown,
            };
        }
        if current.declared.contains(name) {
            return Step::Item(module.to_vec());
        }
        for glob in &current.globs {
            if let Some(Resolved {
                module: source,
                whole: true,
            }) = self.resolve(module, glob, depth + 1)
            {
                if source != module {
                    match self.step(&source, name, depth + 1) {
                        Step::Unknown => {}
                        found => return found,
                    }
                }
            }
        }
        Step::Unknown
    }
}

/// `x.rs` or `x/mod.rs` under `dir` for `mod x;` declared in `file`.
fn find_module_file(
    dir: &Path,
    name: &str,
    file: &Path,
    ident: &syn::Ident,
    read: ReadSource<'_>,
) -> Result<PathBuf> {
    let candidates = [
        dir.join(format!("{name}.rs")),
        dir.join(name).join("mod.rs"),
    ];
    for candidate in &candidates {
        match read(candidate) {
            Ok(_) => return Ok(candidate.clone()),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => {
                return Err(error).with_context(|| format!("cannot read {}", candidate.display()))
            }
        }
    }
    bail!(
        "{}:{}: `mod {name};` but neither {} nor {} exists",
        file.display(),
        ident.span().start().line,
        candidates[0].display(),
        candidates[1].display()
    )
}

/// The value of a `#[path = "..."]` attribute.
fn path_attribute(attributes: &[syn::Attribute]) -> Option<String> {
    attributes.iter().find_map(|attribute| {
        let syn::Meta::NameValue(pair) = &attribute.meta else {
            return None;
        };
        if !pair.path.is_ident("path") {
            return None;
        }
        match &pair.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(text),
                ..
            }) => Some(text.value()),
            _ => None,
        }
    })
}

/// The name an item declares in its module's namespace, when it has one.
fn declared_name(item: &Item) -> Option<String> {
    let ident = match item {
        Item::Const(item) => &item.ident,
        Item::Enum(item) => &item.ident,
        Item::Fn(item) => &item.sig.ident,
        Item::Macro(item) => item.ident.as_ref()?,
        Item::Static(item) => &item.ident,
        Item::Struct(item) => &item.ident,
        Item::Trait(item) => &item.ident,
        Item::TraitAlias(item) => &item.ident,
        Item::Type(item) => &item.ident,
        Item::Union(item) => &item.ident,
        _ => return None,
    };
    Some(ident.to_string())
}

/// Adds a module-level `use` tree's names to `module.imports` and its globs to
/// `module.globs`; `prefix` is the path above `tree`.
fn collect_imports(tree: &UseTree, prefix: &mut Vec<String>, module: &mut Module) {
    match tree {
        UseTree::Path(path) => {
            prefix.push(path.ident.to_string());
            collect_imports(&path.tree, prefix, module);
            prefix.pop();
        }
        UseTree::Name(name) => {
            if name.ident == "self" {
                if let Some(last) = prefix.last() {
                    module.imports.insert(last.clone(), prefix.clone());
                }
            } else {
                let mut full = prefix.clone();
                full.push(name.ident.to_string());
                module.imports.insert(name.ident.to_string(), full);
            }
        }
        UseTree::Rename(rename) => {
            if rename.rename != "_" {
                let mut full = prefix.clone();
                if rename.ident != "self" {
                    full.push(rename.ident.to_string());
                }
                module.imports.insert(rename.rename.to_string(), full);
            }
        }
        UseTree::Glob(_) => module.globs.push(prefix.clone()),
        UseTree::Group(group) => {
            for tree in &group.items {
                collect_imports(tree, prefix, module);
            }
        }
    }
}

/// Collects the paths a module's code names: every leaf of its `use` trees (at any
/// depth, in function bodies too), every path of two segments or more in expressions,
/// types, patterns and macro paths, and such paths found in macro arguments' tokens.
/// Nested modules, attributes (doc links included) and `pub(in ...)` visibilities are
/// left out. One-segment paths are left out too: a name brought in by a `use` already
/// counted at the `use`, and a local variable may bear a module's name.
struct ReferenceCollector<'a> {
    references: &'a mut Vec<Reference>,
}

impl ReferenceCollector<'_> {
    fn push(&mut self, segments: Vec<String>, line: usize) {
        self.references.push(Reference { segments, line });
    }

    fn use_leaves(&mut self, tree: &UseTree, prefix: &mut Vec<String>) {
        match tree {
            UseTree::Path(path) => {
                prefix.push(path.ident.to_string());
                self.use_leaves(&path.tree, prefix);
                prefix.pop();
            }
            UseTree::Name(syn::UseName { ident })
            | UseTree::Rename(syn::UseRename { ident, .. }) => {
                let mut full = prefix.clone();
                if ident != "self" {
                    full.push(ident.to_string());
                }
                self.push(full, ident.span().start().line);
            }
            UseTree::Glob(glob) => self.push(prefix.clone(), glob.star_token.spans[0].start().line),
            UseTree::Group(group) => {
                for tree in &group.items {
                    self.use_leaves(tree, prefix);
                }
            }
        }
    }

    /// Paths (`a::b`, `crate::x`, `super::y`) in a macro's tokens.
    fn scan_tokens(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let mut index = 0;
        while index < tokens.len() {
            match &tokens[index] {
                TokenTree::Group(group) => {
                    self.scan_tokens(group.stream());
                    index += 1;
                }
                TokenTree::Ident(first) if !follows_path_separator(&tokens, index) => {
                    let mut segments = vec![first.to_string()];
                    let mut next = index + 1;
                    while let Some(TokenTree::Ident(ident)) = path_separator_then(&tokens, next) {
                        segments.push(ident.to_string());
                        next += 3;
                    }
                    if segments.len() >= 2 {
                        self.push(segments, first.span().start().line);
                    }
                    index = next;
                }
                _ => index += 1,
            }
        }
    }
}

/// Whether the tokens before `index` are `::` (then the ident there is not a path's
/// first segment).
fn follows_path_separator(tokens: &[TokenTree], index: usize) -> bool {
    index >= 2 && is_path_separator(&tokens[index - 2], &tokens[index - 1])
}

/// The token after a `::` starting at `index`, if there is one.
fn path_separator_then(tokens: &[TokenTree], index: usize) -> Option<&TokenTree> {
    let (first, second) = (tokens.get(index)?, tokens.get(index + 1)?);
    is_path_separator(first, second)
        .then(|| tokens.get(index + 2))
        .flatten()
}

fn is_path_separator(first: &TokenTree, second: &TokenTree) -> bool {
    matches!(
        (first, second),
        (TokenTree::Punct(a), TokenTree::Punct(b))
            if a.as_char() == ':' && a.spacing() == Spacing::Joint && b.as_char() == ':'
    )
}

impl<'ast> Visit<'ast> for ReferenceCollector<'_> {
    fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {}

    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {}

    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_item_use(&mut self, declaration: &'ast syn::ItemUse) {
        self.use_leaves(&declaration.tree, &mut Vec::new());
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() && path.segments.len() >= 2 {
            let segments = path.segments.iter().map(|s| s.ident.to_string()).collect();
            self.push(segments, path.segments[0].ident.span().start().line);
        }
        visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        self.scan_tokens(mac.tokens.clone());
    }
}
