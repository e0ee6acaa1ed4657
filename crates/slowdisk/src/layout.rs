//! Where files sit on the imaginary platter.
//!
//! At start the backing directory is walked depth first, names sorted, and each regular
//! file is given the next free extent, as a fresh ext file system fills a disk written
//! in that order: siblings sit next to each other, and reading a directory's files in
//! name order is nearly sequential. The platter is exactly as large as the data set, so
//! that random reads over it cost the mean seek of the model whatever its size. Files
//! created after the walk get a position hashed from their inode number.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use anyhow::{Context, Result};

use crate::model::MIN_PLATTER_BYTES;

/// Most files the walk lays out; files beyond get hashed positions.
pub const MAX_LAYOUT_FILES: usize = 4_000_000;
/// Most directories the walk enters.
pub const MAX_LAYOUT_DIRS: usize = 1_000_000;
/// Allocation unit of the imaginary file system.
pub const BLOCK: u64 = 4096;

/// File positions keyed by (device, inode).
#[derive(Debug, Default)]
pub struct Layout {
    start: HashMap<(u64, u64), u64>,
    platter: u64,
    files: usize,
    truncated: bool,
}

impl Layout {
    /// Walks `root` and lays out its regular files.
    pub fn walk(root: &Path) -> Result<Layout> {
        let mut layout = Layout::default();
        let mut next = 0u64;
        let mut stack = vec![root.to_path_buf()];
        let mut dirs = 0usize;
        while let Some(dir) = stack.pop() {
            dirs += 1;
            if dirs > MAX_LAYOUT_DIRS {
                layout.truncated = true;
                break;
            }
            let rd = match std::fs::read_dir(&dir) {
                Ok(rd) => rd,
                Err(e) if dir == root => {
                    return Err(e).with_context(|| format!("reading {}", root.display()))
                }
                Err(_) => continue,
            };
            let mut entries: Vec<_> = rd.filter_map(|e| e.ok()).collect();
            entries.sort_by_key(|e| e.file_name());
            let mut subdirs = Vec::new();
            for e in entries {
                let Ok(md) = e.metadata() else { continue };
                if md.is_dir() {
                    subdirs.push(e.path());
                } else if md.is_file() {
                    if layout.files >= MAX_LAYOUT_FILES {
                        layout.truncated = true;
                        continue;
                    }
                    let key = (md.dev(), md.ino());
                    if let std::collections::hash_map::Entry::Vacant(v) = layout.start.entry(key) {
                        v.insert(next);
                        next += md.len().max(1).div_ceil(BLOCK) * BLOCK;
                        layout.files += 1;
                    }
                }
            }
            // Depth first in name order: push in reverse so the first name pops first.
            stack.extend(subdirs.into_iter().rev());
        }
        layout.platter = next.max(MIN_PLATTER_BYTES);
        Ok(layout)
    }

    /// Size of the platter in bytes.
    pub fn platter_bytes(&self) -> u64 {
        self.platter.max(MIN_PLATTER_BYTES)
    }

    /// Number of files laid out.
    pub fn files(&self) -> usize {
        self.files
    }

    /// Whether the walk stopped at one of its limits.
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// Platter position of the file with this device and inode number.
    pub fn position(&self, dev: u64, ino: u64) -> u64 {
        if let Some(&p) = self.start.get(&(dev, ino)) {
            return p;
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (dev, ino).hash(&mut h);
        (h.finish() % self.platter_bytes()) / BLOCK * BLOCK
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siblings_are_contiguous_in_name_order() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("b")).unwrap();
        std::fs::create_dir(d.path().join("a")).unwrap();
        std::fs::write(d.path().join("a/2"), vec![0u8; 5000]).unwrap();
        std::fs::write(d.path().join("a/1"), vec![0u8; 100]).unwrap();
        std::fs::write(d.path().join("b/1"), vec![0u8; 8192]).unwrap();
        std::fs::write(d.path().join("z"), b"x").unwrap();
        let l = Layout::walk(d.path()).unwrap();
        let pos = |p: &str| {
            let md = std::fs::metadata(d.path().join(p)).unwrap();
            l.position(md.dev(), md.ino())
        };
        // Files of the top directory come first, then a/ and b/ in order.
        assert_eq!(pos("z"), 0);
        assert_eq!(pos("a/1"), 4096);
        assert_eq!(pos("a/2"), 8192);
        assert_eq!(pos("b/1"), 16384);
        assert_eq!(l.files(), 4);
        assert_eq!(l.platter_bytes(), MIN_PLATTER_BYTES);
        assert!(!l.truncated());
        // Unknown inodes land somewhere on the platter, block aligned, stably.
        let p = l.position(1, 123456789);
        assert_eq!(p, l.position(1, 123456789));
        assert!(p < l.platter_bytes() && p / BLOCK * BLOCK == p);
    }
}
