//! The files a weights list names: each path a file, or a directory read
//! recursively, every regular file once (by device and inode, so a file
//! named twice, or hard-linked, is read once). Symbolic links to files are
//! followed; links to directories inside a directory are not (a link loop
//! cannot make the walk endless). Runs on the prefetch thread: it touches
//! the disk.

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// One file to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightsFile {
    pub path: PathBuf,
    pub len: u64,
}

/// The files found, and the listed paths that could not be used (missing,
/// unreadable, or neither a file nor a directory), with why.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Found {
    pub files: Vec<WeightsFile>,
    pub unusable: Vec<(PathBuf, String)>,
}

impl Found {
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|file| file.len).sum()
    }
}

/// Expands `paths` into the files they name, in order (a directory's
/// entries sorted by name).
pub fn expand(paths: &[PathBuf]) -> Found {
    let mut found = Found::default();
    let mut seen = HashSet::new();
    for path in paths {
        match fs::metadata(path) {
            Ok(meta) if meta.is_file() => add(&mut found, &mut seen, path, &meta),
            Ok(meta) if meta.is_dir() => walk(&mut found, &mut seen, path),
            Ok(_) => found
                .unusable
                .push((path.clone(), "not a regular file or directory".into())),
            Err(err) => found.unusable.push((path.clone(), describe(&err))),
        }
    }
    found
}

fn describe(err: &std::io::Error) -> String {
    match err.kind() {
        std::io::ErrorKind::NotFound => "does not exist".into(),
        kind => format!("cannot be read: {kind}"),
    }
}

fn add(found: &mut Found, seen: &mut HashSet<(u64, u64)>, path: &Path, meta: &fs::Metadata) {
    if seen.insert((meta.dev(), meta.ino())) {
        found.files.push(WeightsFile {
            path: path.to_path_buf(),
            len: meta.len(),
        });
    }
}

fn walk(found: &mut Found, seen: &mut HashSet<(u64, u64)>, dir: &Path) {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) => {
            found.unusable.push((dir.to_path_buf(), describe(&err)));
            return;
        }
    };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|entry| entry.path()).collect();
    paths.sort();
    for path in paths {
        let Ok(link_meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        if link_meta.is_dir() {
            walk(found, seen, &path);
        } else if link_meta.is_file() {
            add(found, seen, &path, &link_meta);
        } else if link_meta.file_type().is_symlink()
            && let Ok(meta) = fs::metadata(&path)
            && meta.is_file()
        {
            add(found, seen, &path, &meta);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_test_support::TempDir;

    #[test]
    fn files_and_directories_expand_to_each_file_once() {
        let dir = TempDir::new("weights-files");
        let a = dir.write("a.bin", "aaaa");
        let shards = dir.path().join("shards");
        fs::create_dir_all(shards.join("deep")).unwrap();
        fs::write(shards.join("2.bin"), "22").unwrap();
        fs::write(shards.join("1.bin"), "1").unwrap();
        fs::write(shards.join("deep/3.bin"), "333").unwrap();
        std::os::unix::fs::symlink(&a, shards.join("link-to-a")).unwrap();
        std::os::unix::fs::symlink(dir.path(), shards.join("loop")).unwrap();
        let missing = dir.path().join("missing.bin");

        let found = expand(&[a.clone(), shards.clone(), missing.clone(), a.clone()]);
        let names: Vec<(PathBuf, u64)> = found
            .files
            .iter()
            .map(|file| (file.path.clone(), file.len))
            .collect();
        assert_eq!(
            names,
            [
                (a.clone(), 4),
                (shards.join("1.bin"), 1),
                (shards.join("2.bin"), 2),
                (shards.join("deep/3.bin"), 3),
            ],
            "the link to a is a.bin again; the link to a directory is not followed"
        );
        assert_eq!(found.total_bytes(), 10);
        assert_eq!(found.unusable, [(missing, "does not exist".to_owned())]);
    }
}
