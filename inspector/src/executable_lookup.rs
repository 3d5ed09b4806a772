//! Finding the file an image runs in its layers, without unpacking them (issue 49): the
//! config's command (entrypoint, else cmd; a bare name searched in its `PATH`), the
//! symbolic links of every layer merged as the runtime stacks them (whiteouts and opaque
//! directories honoured: a merged-usr image's `/bin` is `usr/bin`), and then, top layer
//! first, the first bytes of the file the path resolves to. Pure: every function reads a
//! layer's uncompressed tar stream once, front to back, keeps only links and the few paths
//! asked for, and stops at its bounds; the caller streams the layers and decides what
//! the bytes mean (`elf_facts`).

use std::{collections::BTreeMap, io::Read};

use serde::Deserialize;

/// Symbolic links followed while resolving one path (Linux's own limit).
const MAX_LINK_HOPS: usize = 40;
/// The search path a config without `PATH` runs with (the runtime's default).
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What a lookup may keep.
#[derive(Clone, Copy, Debug)]
pub struct LookupLimits {
    /// Symbolic links (and the files named like a bare command) kept over all layers.
    pub entries: usize,
    /// Their paths and targets, in bytes.
    pub path_bytes: usize,
}

impl Default for LookupLimits {
    /// A distribution's base image has a few thousand links; 64k links of 64 bytes
    /// each is about 8 MiB.
    fn default() -> Self {
        LookupLimits {
            entries: 65_536,
            path_bytes: 8 * 1024 * 1024,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    #[error("the image config names no command (no entrypoint and no cmd)")]
    NoCommand,
    #[error("the image config cannot be read: {0}")]
    Config(String),
    #[error("a layer is not a readable tar stream: {0}")]
    Tar(String),
    #[error("a zstd:chunked layer's table of contents cannot be read: {0}")]
    Toc(String),
    #[error("the layers hold more than {entries} links or {bytes} bytes of link paths")]
    TooManyLinks { entries: usize, bytes: usize },
    #[error("{0}: too many levels of symbolic links")]
    LinkLoop(String),
    #[error("{0} is not in the image")]
    NotFound(String),
}

/// The command an image's config runs: its program and where a bare name is searched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageCommand {
    /// `argv[0]`: a path (absolute, or relative to the working directory) or a bare name.
    pub program: String,
    /// The `PATH` a bare name is searched in.
    pub search_path: String,
    pub working_dir: String,
}

#[derive(Deserialize)]
struct RawConfig {
    config: Option<RawRunConfig>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RawRunConfig {
    entrypoint: Option<Vec<String>>,
    cmd: Option<Vec<String>>,
    env: Option<Vec<String>>,
    working_dir: Option<String>,
}

impl ImageCommand {
    /// The command of an image config blob (already bounded by the manifest limits):
    /// the entrypoint's first word, else the cmd's, as the runtime picks it for a pod
    /// that sets neither `command` nor `args`.
    pub fn of_config(config: &[u8]) -> Result<ImageCommand, LookupError> {
        let raw: RawConfig =
            serde_json::from_slice(config).map_err(|e| LookupError::Config(e.to_string()))?;
        let run = raw.config.ok_or(LookupError::NoCommand)?;
        let program = [&run.entrypoint, &run.cmd]
            .into_iter()
            .find_map(|words| words.as_ref().and_then(|w| w.first()).cloned())
            .filter(|p| !p.is_empty())
            .ok_or(LookupError::NoCommand)?;
        let search_path = run
            .env
            .iter()
            .flatten()
            .find_map(|e| e.strip_prefix("PATH="))
            .unwrap_or(DEFAULT_PATH)
            .to_owned();
        let working_dir = run
            .working_dir
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| "/".to_owned());
        Ok(ImageCommand {
            program,
            search_path,
            working_dir,
        })
    }

    /// A bare name (no `/`): searched in `search_path`.
    pub fn bare_name(&self) -> Option<&str> {
        (!self.program.contains('/')).then_some(self.program.as_str())
    }

    /// The absolute paths the program may be, in the order the runtime tries them.
    pub fn candidates(&self) -> Vec<String> {
        match self.bare_name() {
            Some(name) => self
                .search_path
                .split(':')
                .filter(|dir| !dir.is_empty())
                .map(|dir| join(dir, name))
                .collect(),
            None => vec![join(&self.working_dir, &self.program)],
        }
    }
}

/// `dir` joined with `path` (absolute `path` wins), `.` and `..` folded: an absolute,
/// normalised path without a trailing `/`.
pub fn join(dir: &str, path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    let whole = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("{dir}/{path}")
    };
    for part in whole.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    format!("/{}", parts.join("/"))
}

/// A tar entry's path as an absolute normalised path (`./usr/bin/` → `/usr/bin`).
fn entry_path(raw: &str) -> String {
    join("/", raw)
}

/// What the merged layers hold at a path, as far as a lookup needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Kept {
    /// A symbolic link, and the layer it came from.
    Link { target: String, layer: usize },
    /// A regular file named like the bare command, and its layer.
    Named { layer: usize },
}

impl Kept {
    fn layer(&self) -> usize {
        match self {
            Kept::Link { layer, .. } | Kept::Named { layer } => *layer,
        }
    }
}

/// The merged view of every layer's symbolic links (and of the files named like a bare
/// command), built bottom layer first.
#[derive(Debug)]
pub struct MergedLinks {
    limits: LookupLimits,
    bare_name: Option<String>,
    kept: BTreeMap<String, Kept>,
    path_bytes: usize,
    layers: usize,
}

impl MergedLinks {
    /// `bare_name`: the command's name when it has no `/` (its files are kept too, so
    /// that its `PATH` search needs no other pass).
    pub fn new(limits: LookupLimits, bare_name: Option<&str>) -> Self {
        MergedLinks {
            limits,
            bare_name: bare_name.map(str::to_owned),
            kept: BTreeMap::new(),
            path_bytes: 0,
            layers: 0,
        }
    }

    /// Applies the next layer up (its uncompressed tar stream, read to its end).
    pub fn add_layer(&mut self, tar: impl Read) -> Result<(), LookupError> {
        let layer = self.next_layer();
        let mut archive = tar::Archive::new(tar);
        for entry in archive.entries().map_err(tar_error)? {
            let entry = entry.map_err(tar_error)?;
            self.add_entry(layer, &LayerEntry::of_tar(&entry)?)?;
        }
        Ok(())
    }

    /// Starts the next layer up; its entries are then given to [`MergedLinks::add_entry`]
    /// in their order (a layer read from its table of contents, `chunked_toc`).
    pub fn next_layer(&mut self) -> usize {
        self.layers += 1;
        self.layers - 1
    }

    /// Applies one entry of `layer` (from [`MergedLinks::next_layer`]).
    pub fn add_entry(&mut self, layer: usize, entry: &LayerEntry) -> Result<(), LookupError> {
        let path = entry_path(&entry.name);
        let (dir, name) = split(&path);
        if name == ".wh..wh..opq" {
            // Everything the layers below had in `dir` is hidden.
            self.remove_lower(dir, layer, Removed::Contents);
            return Ok(());
        }
        if let Some(hidden) = name.strip_prefix(".wh.") {
            self.remove_lower(&join(dir, hidden), layer, Removed::PathAndContents);
            return Ok(());
        }
        // What this layer puts at `path` replaces what lower layers had there: a
        // directory keeps a directory's contents, a file or a link does not.
        let removed = if entry.kind == EntryKind::Dir {
            Removed::Path
        } else {
            Removed::PathAndContents
        };
        self.remove_lower(&path, layer, removed);
        match entry.kind {
            EntryKind::Symlink => {
                let target = entry.link.clone().unwrap_or_default();
                self.keep(path, Kept::Link { target, layer })?;
            }
            EntryKind::File | EntryKind::HardLink if self.bare_name.as_deref() == Some(name) => {
                self.keep(path, Kept::Named { layer })?;
            }
            _ => {}
        }
        Ok(())
    }

    fn keep(&mut self, path: String, kept: Kept) -> Result<(), LookupError> {
        // The same path twice in one layer: the later entry wins.
        if let Some(old) = self.kept.remove(&path) {
            self.path_bytes = self.path_bytes.saturating_sub(cost(&path, &old));
        }
        let cost = cost(&path, &kept);
        if self.kept.len() >= self.limits.entries || self.path_bytes + cost > self.limits.path_bytes
        {
            return Err(LookupError::TooManyLinks {
                entries: self.limits.entries,
                bytes: self.limits.path_bytes,
            });
        }
        self.path_bytes += cost;
        self.kept.insert(path, kept);
        Ok(())
    }

    /// Removes what layers below `layer` kept at `path` and/or under it.
    fn remove_lower(&mut self, path: &str, layer: usize, removed: Removed) {
        let path = path.trim_end_matches('/');
        let prefix = format!("{path}/");
        let mut doomed: Vec<String> = Vec::new();
        if removed != Removed::Path {
            doomed.extend(
                self.kept
                    .range(prefix.clone()..)
                    .take_while(|(p, _)| p.starts_with(&prefix))
                    .filter(|(_, k)| k.layer() < layer)
                    .map(|(p, _)| p.clone()),
            );
        }
        if removed != Removed::Contents && self.kept.get(path).is_some_and(|k| k.layer() < layer) {
            doomed.push(path.to_owned());
        }
        for path in doomed {
            if let Some(old) = self.kept.remove(&path) {
                self.path_bytes = self.path_bytes.saturating_sub(cost(&path, &old));
            }
        }
    }

    /// `path` with every symbolic link in it followed (an absolute link from the image's
    /// root, a relative one from its directory): the path the runtime would open.
    pub fn resolve(&self, path: &str) -> Result<String, LookupError> {
        // The parts still to walk, the next one last; `..` is taken where the walk is
        // (after a link, in the link's real directory), as the kernel does.
        fn parts(path: &str) -> impl Iterator<Item = String> + '_ {
            path.split('/')
                .filter(|p| !p.is_empty() && *p != ".")
                .rev()
                .map(str::to_owned)
        }
        let mut hops = 0;
        let mut pending: Vec<String> = parts(path).collect();
        // The real path walked so far.
        let mut done = String::from("/");
        while let Some(part) = pending.pop() {
            let here = join(&done, &part);
            match self.kept.get(&here) {
                Some(Kept::Link { target, .. }) => {
                    hops += 1;
                    if hops > MAX_LINK_HOPS {
                        return Err(LookupError::LinkLoop(path.to_owned()));
                    }
                    // The link's target, then the rest of the path; a relative target
                    // from the link's directory (`done`), an absolute one from the root.
                    if target.starts_with('/') {
                        done = String::from("/");
                    }
                    pending.extend(parts(target));
                }
                _ => done = here,
            }
        }
        Ok(done)
    }

    /// The command's file: its path resolved, or for a bare name the first directory of
    /// its `PATH` that holds a file or a link of that name.
    pub fn find(&self, command: &ImageCommand) -> Result<String, LookupError> {
        let Some(name) = command.bare_name() else {
            return self.resolve(&join(&command.working_dir, &command.program));
        };
        for candidate in command.candidates() {
            let (dir, _) = split(&candidate);
            let entry = join(&self.resolve(dir)?, name);
            match self.kept.get(&entry) {
                Some(Kept::Named { .. }) => return Ok(entry),
                // Busybox's applets: `/bin/ls -> busybox`.
                Some(Kept::Link { .. }) => return self.resolve(&entry),
                None => {}
            }
        }
        Err(LookupError::NotFound(name.to_owned()))
    }
}

/// What a layer's entry hides of the layers below.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Removed {
    /// What was at the path (a directory over a link).
    Path,
    /// What was inside the directory (an opaque directory).
    Contents,
    /// Both (a whiteout; a file or a link over a directory).
    PathAndContents,
}

fn cost(path: &str, kept: &Kept) -> usize {
    path.len()
        + match kept {
            Kept::Link { target, .. } => target.len(),
            Kept::Named { .. } => 0,
        }
}

fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

fn tar_error(e: std::io::Error) -> LookupError {
    LookupError::Tar(e.to_string())
}

/// What one layer says about a resolved path, read top layer first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InLayer {
    /// The file's first bytes (at most the bytes asked for).
    Head(Vec<u8>),
    /// A hard link to another path of the same layer: read this layer again for it.
    HardLink(String),
    /// Removed here (a whiteout of it or of a directory above it, which hides the
    /// layers below, not this one), or not a regular file: the image has no such file.
    Gone,
    /// Not here, and a directory above it is opaque: the layers below do not count.
    Opaque,
    /// Not here: look in the layer below.
    Absent,
}

/// Looks for the regular file `path` (resolved, absolute) in one layer's uncompressed tar
/// stream, keeping at most `max_head` of its bytes. The stream is read to the file, or
/// to its end.
pub fn read_in_layer(tar: impl Read, path: &str, max_head: u64) -> Result<InLayer, LookupError> {
    let mut archive = tar::Archive::new(tar);
    let mut locator = PathLocator::new(path);
    for entry in archive.entries().map_err(tar_error)? {
        let entry = entry.map_err(tar_error)?;
        match locator.see(&LayerEntry::of_tar(&entry)?) {
            Some(Located::File) => {
                let mut head = Vec::new();
                entry
                    .take(max_head)
                    .read_to_end(&mut head)
                    .map_err(tar_error)?;
                return Ok(InLayer::Head(head));
            }
            Some(Located::HardLink(target)) => return Ok(InLayer::HardLink(target)),
            Some(Located::Gone) => return Ok(InLayer::Gone),
            None => {}
        }
    }
    Ok(locator.end())
}

/// One entry of a layer as a lookup reads it: from a tar header, or from a layer's
/// table of contents (`chunked_toc`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerEntry {
    /// As the layer writes it (`./usr/bin/`, `usr/bin/app`).
    pub name: String,
    pub kind: EntryKind,
    /// A link's target as written (a hard link's: a path of the same layer).
    pub link: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    Dir,
    File,
    HardLink,
    Symlink,
    /// Devices, fifos: never a program.
    Other,
}

impl LayerEntry {
    fn of_tar<R: Read>(entry: &tar::Entry<'_, R>) -> Result<LayerEntry, LookupError> {
        let kind = entry.header().entry_type();
        let kind = if kind.is_dir() {
            EntryKind::Dir
        } else if kind.is_symlink() {
            EntryKind::Symlink
        } else if kind.is_hard_link() {
            EntryKind::HardLink
        } else if kind.is_file() {
            EntryKind::File
        } else {
            EntryKind::Other
        };
        let link = match kind {
            EntryKind::Symlink | EntryKind::HardLink => entry
                .link_name()
                .map_err(tar_error)?
                .map(|t| t.to_string_lossy().into_owned()),
            _ => None,
        };
        Ok(LayerEntry {
            name: entry
                .path()
                .map_err(tar_error)?
                .to_string_lossy()
                .into_owned(),
            kind,
            link,
        })
    }
}

/// What an entry of the layer says of the path looked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Located {
    /// This entry is the regular file: its bytes are the answer.
    File,
    /// A hard link to another path of the same layer ([`InLayer::HardLink`]).
    HardLink(String),
    /// Not a regular file ([`InLayer::Gone`]).
    Gone,
}

/// Looks for one path among a layer's entries, in their order: what the entry at the
/// path is, and, when the layer has none, whether whiteouts or an opaque directory hide
/// the layers below ([`PathLocator::end`]).
pub struct PathLocator<'a> {
    path: &'a str,
    opaque: bool,
    hidden_below: bool,
}

impl<'a> PathLocator<'a> {
    pub fn new(path: &'a str) -> Self {
        PathLocator {
            path,
            opaque: false,
            hidden_below: false,
        }
    }

    /// The answer, if `entry` is at the path.
    pub fn see(&mut self, entry: &LayerEntry) -> Option<Located> {
        let here = entry_path(&entry.name);
        let (dir, name) = split(&here);
        if name == ".wh..wh..opq" && is_within(self.path, dir) {
            self.opaque = true;
            return None;
        }
        if let Some(hidden) = name.strip_prefix(".wh.") {
            let hidden = join(dir, hidden);
            // Hides the layers below; this layer may still hold the file itself.
            self.hidden_below |= hidden == self.path || is_within(self.path, &hidden);
            return None;
        }
        if here != self.path {
            return None;
        }
        Some(match entry.kind {
            EntryKind::HardLink => {
                Located::HardLink(entry.link.as_deref().map(entry_path).unwrap_or_default())
            }
            EntryKind::File => Located::File,
            _ => Located::Gone,
        })
    }

    /// What the layer says once every entry was seen and none is at the path.
    pub fn end(self) -> InLayer {
        if self.hidden_below {
            InLayer::Gone
        } else if self.opaque {
            InLayer::Opaque
        } else {
            InLayer::Absent
        }
    }
}

/// `path` lies strictly inside directory `dir`.
fn is_within(path: &str, dir: &str) -> bool {
    let dir = dir.trim_end_matches('/');
    path.len() > dir.len() + 1 && path.starts_with(dir) && path.as_bytes()[dir.len()] == b'/'
}

#[cfg(test)]
#[path = "executable_lookup_tests.rs"]
mod tests;
