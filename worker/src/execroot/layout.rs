//! Where a sandboxed task may write in its exec root (issue 27): exactly its declared
//! outputs — and those as a build tool treats them: removed and made again
//! (`rm -rf dist && tsc`), replaced by a rename (`mv tmp info.json`), a file at the project's
//! root (`tsconfig.tsbuildinfo`) — while its sources, manifest and installed trees beside
//! them stay read-only and in place.
//!
//! A bind mount cannot be removed or renamed over, so an output is never a mount point of
//! its own. Instead the directory **holding** each output (its *slot*: a glob's literal root
//! such as `dist`, or a literal output) is bound writable — it is *open* — and every other
//! entry in it is bound read-only again on top (a source directory, `package.json`, the
//! installed tree's mount point). What the task creates in an open directory beside its
//! outputs lands in the exec root, is reported as an undeclared output by the trace, and is
//! never collected. A glob root that holds the task's own directory (`**/*.js`) cannot
//! separate outputs from inputs by directory: it is bound writable whole, its inputs copied.

use prova_protocol::globs::{GlobError, PathGlobs, is_within};

/// The writable arrangement of one task's outputs (workspace-relative directories).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutputLayout {
    /// Glob roots holding the task's directory, bound writable whole; none inside another.
    pub whole: Vec<String>,
    /// Directories holding an output slot, bound writable with their other entries bound
    /// read-only again (outside every `whole`), sorted.
    pub open: Vec<String>,
    /// The output slots outside every `whole`: glob roots (`true`: a directory, made empty
    /// in the root) and literal outputs (`false`: made by the task, file or directory).
    pub slots: Vec<(String, bool)>,
}

impl OutputLayout {
    /// The layout of outputs `outputs` of a task in `project_dir`.
    pub fn new(project_dir: &str, outputs: &[String]) -> Result<Self, GlobError> {
        let globs = PathGlobs::new(project_dir, outputs)?;
        let holds_task = |r: &str| r.is_empty() || is_within(project_dir, r);
        let mut whole: Vec<String> = Vec::new();
        let mut slots: Vec<(String, bool)> = Vec::new();
        for r in globs.roots() {
            let literal = globs.literals().contains(r);
            if !literal && holds_task(r) {
                whole.push(r.clone());
            } else {
                slots.push((r.clone(), !literal));
            }
        }
        slots.retain(|(s, _)| !whole.iter().any(|w| is_within(s, w)));
        let mut open: Vec<String> = slots.iter().map(|(s, _)| parent(s).to_owned()).collect();
        open.retain(|o| !whole.iter().any(|w| is_within(o, w)));
        // A directory between two open ones (`p` between `""` and `p/build`) is inside the
        // outer bind: opened too, so its other entries (`p/src`) are bound read-only again.
        let between: Vec<String> = open
            .iter()
            .flat_map(|o| ancestors(o))
            .filter(|a| open.iter().any(|outer| outer != a && is_within(a, outer)))
            .collect();
        open.extend(between);
        open.sort();
        open.dedup();
        Ok(Self { whole, open, slots })
    }

    /// The directories to bind writable: `whole` and `open`, none inside another (an outer
    /// bind already holds it).
    pub fn binds(&self) -> Vec<String> {
        let mut all: Vec<String> = self.whole.iter().chain(&self.open).cloned().collect();
        all.sort();
        all.dedup();
        let mut kept: Vec<String> = Vec::new();
        for d in all {
            if !kept.iter().any(|k| is_within(&d, k)) {
                kept.push(d);
            }
        }
        kept
    }

    /// Whether the task may write at `path`: inside a `whole` or a slot. An input there is
    /// copied into the root, never linked to the blob cache.
    pub fn writable(&self, path: &str) -> bool {
        self.whole.iter().any(|w| is_within(path, w))
            || self.slots.iter().any(|(s, _)| is_within(path, s))
    }

    /// The directories the root must hold: every `whole`, `open` and directory slot.
    pub fn dirs(&self) -> Vec<String> {
        let slots = self.slots.iter().filter(|(_, dir)| *dir).map(|(s, _)| s);
        self.whole.iter().chain(&self.open).chain(slots).cloned().collect()
    }

    /// Whether the entry `rel` of an open directory is bound read-only again: everything but
    /// a slot, a directory on the way to one (or to another open directory), and an
    /// installed tree's mount point (`trees`: mounted read-only on its own).
    pub fn readonly_entry(&self, rel: &str, trees: &[String]) -> bool {
        let on_the_way = |d: &str| is_within(d, rel);
        !(self.slots.iter().any(|(s, _)| on_the_way(s))
            || self.open.iter().any(|o| on_the_way(o))
            || self.whole.iter().any(|w| on_the_way(w))
            || trees.iter().any(|t| t == rel))
    }
}

/// The directory holding `path` (`""`: the workspace root).
fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(d, _)| d)
}

/// The directories above `path`, nearest first, down to `""` (none for `""`).
fn ancestors(path: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut p = path;
    while !p.is_empty() {
        p = parent(p);
        out.push(p.to_owned());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(dir: &str, outputs: &[&str]) -> OutputLayout {
        let outputs: Vec<String> = outputs.iter().map(|o| (*o).to_owned()).collect();
        OutputLayout::new(dir, &outputs).unwrap()
    }

    #[test]
    fn an_output_directory_is_a_slot_in_its_open_parent() {
        let l = layout("p", &["dist/**"]);
        assert_eq!(l.open, ["p"]);
        assert_eq!(l.slots, [("p/dist".to_owned(), true)]);
        assert!(l.whole.is_empty());
        assert_eq!(l.binds(), ["p"]);
        assert!(l.writable("p/dist/a.js") && !l.writable("p/src/a.ts"));
        for ro in ["p/src", "p/package.json", "p/tsconfig.json"] {
            assert!(l.readonly_entry(ro, &[]), "{ro}");
        }
        assert!(!l.readonly_entry("p/dist", &[]));
        assert!(!l.readonly_entry("p/node_modules", &["p/node_modules".to_owned()]));
    }

    #[test]
    fn a_file_at_the_project_root_opens_the_project_and_nothing_else() {
        let l = layout("p", &["dist/**", "tsconfig.tsbuildinfo"]);
        assert_eq!(l.open, ["p"]);
        assert_eq!(
            l.slots,
            [("p/dist".to_owned(), true), ("p/tsconfig.tsbuildinfo".to_owned(), false)]
        );
        assert_eq!(l.dirs(), ["p", "p/dist"]);
        assert!(l.readonly_entry("p/src", &[]));
        assert!(!l.readonly_entry("p/tsconfig.tsbuildinfo", &[]));
    }

    #[test]
    fn nested_and_workspace_level_outputs_open_their_own_parents() {
        let l = layout("p", &["build/out/**", "//gen/**"]);
        assert_eq!(l.open, ["", "p", "p/build"], "p lies between two open directories");
        assert_eq!(l.binds(), [""], "the root's bind holds p/build");
        assert!(!l.readonly_entry("p", &[]), "on the way to p/build");
        assert!(!l.readonly_entry("p/build", &[]));
        assert!(l.readonly_entry("p/build/keep.txt", &[]));
        // Its sources are read-only again, under the root's writable bind.
        assert!(l.readonly_entry("p/src", &[]) && l.readonly_entry("p/package.json", &[]));
        assert!(!l.writable("p/src/a.ts"), "an input there is hardlinked: never writable");
        assert!(!l.readonly_entry("gen", &[]));
        assert!(l.readonly_entry("package.json", &[]));
    }

    #[test]
    fn a_glob_over_the_whole_project_binds_it_whole() {
        let l = layout("p", &["**/*.js", "//p/extra.txt"]);
        assert_eq!(l.whole, ["p"]);
        assert!(l.slots.is_empty() && l.open.is_empty(), "{l:?}");
        assert!(l.writable("p/src/a.js") && l.writable("p/src/a.ts"));
        let root = layout("", &["dist/**"]);
        assert_eq!(
            (root.open.as_slice(), root.binds()),
            (&["".to_owned()][..], vec![String::new()])
        );
    }
}
