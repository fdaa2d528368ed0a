//! An in-memory [`NodeFs`] for unit tests that also records every access, so
//! tests can prove that nothing looks inside a mount point.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use crate::fs::{
    DirEntryInfo, EntryKind, NodeFs, entry_kind_from_parent_listing, sort_by_name_bytes,
};

#[derive(Debug, Clone)]
enum Node {
    Dir,
    File(Vec<u8>),
    Symlink,
    UnreadableDir,
}

/// Which operation touched a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    ReadDir,
    ReadFile,
}

#[derive(Debug, Default)]
pub(crate) struct MemFs {
    nodes: BTreeMap<PathBuf, Node>,
    accesses: RefCell<Vec<(Access, PathBuf)>>,
}

impl MemFs {
    pub(crate) fn new() -> Self {
        let mut fs = Self::default();
        fs.nodes.insert(PathBuf::from("/"), Node::Dir);
        fs
    }

    fn insert(&mut self, path: &Path, node: Node) {
        for ancestor in path.ancestors().skip(1) {
            self.nodes
                .entry(ancestor.to_path_buf())
                .or_insert(Node::Dir);
        }
        self.nodes.insert(path.to_path_buf(), node);
    }

    pub(crate) fn dir(&mut self, path: impl AsRef<Path>) -> &mut Self {
        self.insert(path.as_ref(), Node::Dir);
        self
    }

    pub(crate) fn file(&mut self, path: impl AsRef<Path>, content: impl AsRef<[u8]>) -> &mut Self {
        self.insert(path.as_ref(), Node::File(content.as_ref().to_vec()));
        self
    }

    pub(crate) fn symlink(&mut self, path: impl AsRef<Path>) -> &mut Self {
        self.insert(path.as_ref(), Node::Symlink);
        self
    }

    pub(crate) fn unreadable_dir(&mut self, path: impl AsRef<Path>) -> &mut Self {
        self.insert(path.as_ref(), Node::UnreadableDir);
        self
    }

    pub(crate) fn accesses(&self) -> Vec<(Access, PathBuf)> {
        self.accesses.borrow().clone()
    }
}

impl NodeFs for MemFs {
    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntryInfo>> {
        self.accesses
            .borrow_mut()
            .push((Access::ReadDir, path.to_path_buf()));
        match self.nodes.get(path) {
            None => return Err(io::Error::from(io::ErrorKind::NotFound)),
            Some(Node::UnreadableDir) => {
                return Err(io::Error::from(io::ErrorKind::PermissionDenied));
            }
            Some(Node::Dir) => {}
            Some(_) => return Err(io::Error::other("not a directory")),
        }
        let mut entries: Vec<DirEntryInfo> = self
            .nodes
            .iter()
            .filter(|(p, _)| p.parent() == Some(path))
            .map(|(p, node)| DirEntryInfo {
                name: p.file_name().map(ToOwned::to_owned).unwrap_or_default(),
                kind: match node {
                    Node::Dir | Node::UnreadableDir => EntryKind::Dir,
                    Node::File(_) => EntryKind::File,
                    Node::Symlink => EntryKind::Symlink,
                },
            })
            .collect();
        sort_by_name_bytes(&mut entries);
        Ok(entries)
    }

    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.accesses
            .borrow_mut()
            .push((Access::ReadFile, path.to_path_buf()));
        match self.nodes.get(path) {
            Some(Node::File(content)) => Ok(content.clone()),
            Some(_) => Err(io::Error::other("not a regular file")),
            None => Err(io::Error::from(io::ErrorKind::NotFound)),
        }
    }

    fn entry_kind(&self, path: &Path) -> io::Result<Option<EntryKind>> {
        entry_kind_from_parent_listing(self, path)
    }
}
