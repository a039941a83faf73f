//! The files a weights list names: each path a file, or a directory walked
//! (sorted by name, depth first), every regular file once (by device and
//! inode, so a file named twice, or hard-linked, is read once). Runs on the
//! prefetch thread and the residency measurement's: it touches the disk.
//!
//! The walk is bounded, whatever the tree: it keeps its own stack (no
//! recursion, so no depth can overflow the thread's), reads no directory
//! more than [`MAX_DEPTH`] levels below a listed one, and examines at most
//! [`MAX_ENTRIES`] directory entries in all. Symbolic links to files are
//! followed; links to directories inside a directory are not, and no
//! directory is read twice (by device and inode), so neither a link loop
//! nor a bind-mount loop can make the walk endless.
//!
//! Every regular file found is opened once (and closed) to make sure it can
//! be read. What is left out, and why, is in [`Found::unusable`]: a path
//! that does not exist (a dangling link too), cannot be read (permission
//! denied on a file or a directory, a link loop), is neither a file nor a
//! directory (when listed itself: a FIFO or socket inside a directory is
//! not weights and is passed over), or where a bound stopped the walk;
//! [`Found::warn_unusable`] says each once per model and path.

use std::collections::HashSet;
use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::libc;
use strata_protocol::config::WeightsSource;

use super::Said;

/// Directories more than this many levels below a listed directory are not
/// read (a listed directory is level 0). Model weights are a file or a few
/// levels of directories; 64 is far beyond any layout seen, and small
/// enough that a pathological tree costs nothing.
pub const MAX_DEPTH: usize = 64;

/// The walk of one weights list examines at most this many directory
/// entries (files, directories and anything else, over all its listed
/// directories), then reads no further directory. A model's weights are a
/// few to a few hundred files; a list that names, say, a whole models
/// directory stops here instead of costing a walk of everything in it.
pub const MAX_ENTRIES: usize = 10_000;

/// One file to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightsFile {
    pub path: PathBuf,
    pub len: u64,
}

/// Why a path is left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    /// It does not exist (or is a link to nothing).
    Missing,
    /// It cannot be read: opening the file or reading the directory failed.
    Unreadable(io::ErrorKind),
    /// A listed path that is neither a regular file nor a directory.
    NotFileOrDirectory,
    /// A directory more than [`MAX_DEPTH`] levels below a listed one: it is
    /// not read.
    TooDeep,
    /// The directory being read when the walk reached [`MAX_ENTRIES`]
    /// entries: nothing after it is read.
    TooManyEntries,
}

impl Problem {
    /// The problem an error opening or reading a path means.
    pub fn of(err: &io::Error) -> Problem {
        match err.kind() {
            io::ErrorKind::NotFound => Problem::Missing,
            kind => Problem::Unreadable(kind),
        }
    }

    /// What is wrong and what follows, to come after the path's name
    /// ("a weights path ...").
    pub fn describe(self) -> String {
        match self {
            Problem::Missing => "does not exist; it is not prefetched".to_owned(),
            Problem::Unreadable(kind) => format!("cannot be read: {kind}; it is not prefetched"),
            Problem::NotFileOrDirectory => {
                "is not a regular file or directory; it is not prefetched".to_owned()
            }
            Problem::TooDeep => format!(
                "is a directory more than {MAX_DEPTH} levels below the listed one; it is not \
                 read or prefetched"
            ),
            Problem::TooManyEntries => format!(
                "is where the walk stopped after {MAX_ENTRIES} directory entries; nothing after \
                 it is prefetched"
            ),
        }
    }
}

/// The files found, and the paths that could not be used, with why.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Found {
    pub files: Vec<WeightsFile>,
    pub unusable: Vec<(PathBuf, Problem)>,
}

impl Found {
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|file| file.len).sum()
    }

    /// Says once per model and path (whoever says it first: the prefetch
    /// thread or a residency measurement) why a path is left out. A path
    /// from the profile, or inside it, is not named (profiles are not
    /// logged).
    pub fn warn_unusable(&self, model: &str, source: &WeightsSource, said: &Said) {
        for (path, problem) in &self.unusable {
            warn_unusable(model, source, said, path, *problem);
        }
    }
}

/// Says once per model and path why `path` is left out (see
/// [`Found::warn_unusable`]).
pub fn warn_unusable(
    model: &str,
    source: &WeightsSource,
    said: &Said,
    path: &Path,
    problem: Problem,
) {
    if !said.first_time(model, &format!("unusable {}", path.display())) {
        return;
    }
    let what = problem.describe();
    match source {
        WeightsSource::FromProfile(derived) if derived.path == path => tracing::warn!(
            model,
            "the weights the profile's args name ({}) {what}",
            derived.flag
        ),
        WeightsSource::FromProfile(derived) => tracing::warn!(
            model,
            "a path inside the weights the profile's args name ({}) {what}",
            derived.flag
        ),
        _ => tracing::warn!(
            model,
            path = %path.display(),
            "a weights path {what}"
        ),
    }
}

/// Expands `paths` into the files they name, in order (a directory's
/// entries sorted by name, each subdirectory's files where it sorts).
pub fn expand(paths: &[PathBuf]) -> Found {
    let mut walk = Walk::default();
    for path in paths {
        match fs::metadata(path) {
            Ok(meta) if meta.is_file() => walk.add(path, &meta),
            Ok(meta) if meta.is_dir() => walk.directory(path, &meta),
            Ok(_) => walk.unusable(path, Problem::NotFileOrDirectory),
            Err(err) => walk.unusable(path, Problem::of(&err)),
        }
    }
    walk.found
}

/// One expansion in progress.
#[derive(Default)]
struct Walk {
    found: Found,
    /// Files and directories met, by (device, inode).
    seen_files: HashSet<(u64, u64)>,
    seen_directories: HashSet<(u64, u64)>,
    /// Directory entries examined so far.
    entries: usize,
    /// The walk reached [`MAX_ENTRIES`] (and said where).
    stopped: bool,
}

impl Walk {
    fn unusable(&mut self, path: &Path, problem: Problem) {
        self.found.unusable.push((path.to_path_buf(), problem));
    }

    /// The walk is over its bound of entries at `dir`: said the first time.
    fn stop_at(&mut self, dir: &Path) {
        if !self.stopped {
            self.stopped = true;
            self.unusable(dir, Problem::TooManyEntries);
        }
    }

    /// Adds a regular file, once, if it can be opened for reading.
    fn add(&mut self, path: &Path, meta: &fs::Metadata) {
        if !self.seen_files.insert((meta.dev(), meta.ino())) {
            return;
        }
        // Non-blocking: should the file have become a FIFO since it was
        // looked at, the open returns instead of waiting for a writer.
        let opened = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path);
        match opened {
            Ok(_) => self.found.files.push(WeightsFile {
                path: path.to_path_buf(),
                len: meta.len(),
            }),
            Err(err) => self.unusable(path, Problem::of(&err)),
        }
    }

    /// Walks the listed directory `top`: an explicit stack of the entries
    /// still to look at, each with its level, so the order is a recursive
    /// walk's and the thread's stack stays as it is.
    fn directory(&mut self, top: &Path, meta: &fs::Metadata) {
        let mut pending: Vec<(PathBuf, usize)> = Vec::new();
        self.read_directory(top, meta, 0, &mut pending);
        while let Some((path, level)) = pending.pop() {
            let link_meta = match fs::symlink_metadata(&path) {
                Ok(meta) => meta,
                Err(err) => {
                    self.unusable(&path, Problem::of(&err));
                    continue;
                }
            };
            if link_meta.is_dir() {
                if level > MAX_DEPTH {
                    self.unusable(&path, Problem::TooDeep);
                } else {
                    self.read_directory(&path, &link_meta, level, &mut pending);
                }
            } else if link_meta.is_file() {
                self.add(&path, &link_meta);
            } else if link_meta.file_type().is_symlink() {
                match fs::metadata(&path) {
                    Ok(meta) if meta.is_file() => self.add(&path, &meta),
                    // A link to a directory (not followed) or to neither.
                    Ok(_) => {}
                    // A link to nothing, or a loop of links.
                    Err(err) => self.unusable(&path, Problem::of(&err)),
                }
            }
        }
    }

    /// Pushes the entries of `dir` (at `level`) onto `pending`, so that they
    /// come off it sorted by name, each one level deeper; unless `dir` was
    /// read already or the walk is over its bound of entries.
    fn read_directory(
        &mut self,
        dir: &Path,
        meta: &fs::Metadata,
        level: usize,
        pending: &mut Vec<(PathBuf, usize)>,
    ) {
        if !self.seen_directories.insert((meta.dev(), meta.ino())) {
            return;
        }
        if self.entries >= MAX_ENTRIES {
            self.stop_at(dir);
            return;
        }
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(err) => {
                self.unusable(dir, Problem::of(&err));
                return;
            }
        };
        let mut paths = Vec::new();
        for entry in entries {
            if self.entries >= MAX_ENTRIES {
                self.stop_at(dir);
                break;
            }
            match entry {
                Ok(entry) => {
                    self.entries += 1;
                    paths.push(entry.path());
                }
                Err(err) => {
                    self.unusable(dir, Problem::of(&err));
                    break;
                }
            }
        }
        paths.sort();
        pending.extend(paths.into_iter().rev().map(|path| (path, level + 1)));
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;

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
        fs::write(shards.join("deep/4.bin"), "4444").unwrap();
        fs::write(shards.join("z.bin"), "z").unwrap();
        std::os::unix::fs::symlink(&a, shards.join("link-to-a")).unwrap();
        std::os::unix::fs::symlink(dir.path(), shards.join("loop")).unwrap();
        let missing = dir.path().join("missing.bin");

        let found = expand(&[
            a.clone(),
            shards.clone(),
            missing.clone(),
            a.clone(),
            shards.join("deep"),
        ]);
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
                (shards.join("deep/4.bin"), 4),
                (shards.join("z.bin"), 1),
            ],
            "in a recursive walk's order; the link to a is a.bin again; the link to a \
             directory is not followed; deep/, listed again, is not read again"
        );
        assert_eq!(found.total_bytes(), 15);
        assert_eq!(found.unusable, [(missing, Problem::Missing)]);
    }

    /// A chain of 2,000 directories (the old recursive walk overflowed the
    /// stack of the thread it ran on, here and in the supervisor, and took
    /// the process down): the walk reads the first 64 levels, finds the
    /// file on the 64th, and says once that the 65th is not read.
    #[test]
    fn a_directory_chain_2000_deep_is_read_to_the_depth_bound_and_said() {
        // On a tmpfs where there is one: 2,000 nested mkdirs (and their
        // removal) take seconds on a busy disk.
        let dir = TempDir::fast("weights-deep");
        let mut path = dir.path().to_path_buf();
        let mut levels = Vec::new();
        for _ in 0..2000 {
            path.push("d");
            levels.push(path.clone());
        }
        fs::create_dir_all(&path).unwrap();
        fs::write(path.join("bottom.bin"), "b").unwrap();
        let at_bound = &levels[MAX_DEPTH - 1];
        fs::write(at_bound.join("w.bin"), "ww").unwrap();

        let found = expand(&[dir.path().to_path_buf()]);
        let paths: Vec<&Path> = found.files.iter().map(|file| file.path.as_path()).collect();
        assert_eq!(paths, [at_bound.join("w.bin")]);
        assert_eq!(
            found.unusable,
            [(levels[MAX_DEPTH].clone(), Problem::TooDeep)]
        );
    }

    /// The walk examines [`MAX_ENTRIES`] entries, then says once where it
    /// stopped: at the next directory when the bound was reached exactly,
    /// inside a directory that has more. Listed files are still read.
    #[test]
    fn the_walk_stops_after_max_entries_and_says_where() {
        let dir = TempDir::fast("weights-many"); // 10,000 files: a tmpfs if any
        let many = dir.path().join("many");
        fs::create_dir(&many).unwrap();
        for index in 0..MAX_ENTRIES - 1 {
            fs::File::create(many.join(index.to_string())).unwrap();
        }
        // The bound's last entry, sorted last: a directory, not read.
        let last = many.join("z");
        fs::create_dir(&last).unwrap();
        fs::write(last.join("z.bin"), "z").unwrap();
        let listed = dir.write("listed.bin", "l");
        let other = dir.path().join("other");
        fs::create_dir(&other).unwrap();
        fs::write(other.join("o.bin"), "o").unwrap();

        let found = expand(&[many.clone(), listed.clone(), other.clone()]);
        assert_eq!(
            found.files.len(),
            MAX_ENTRIES,
            "many's files, and listed.bin"
        );
        assert_eq!(found.files.last().unwrap().path, listed);
        assert_eq!(found.unusable, [(last, Problem::TooManyEntries)]);

        // One entry more: the walk stops inside many (which entries it read
        // first is the file system's order).
        fs::File::create(many.join("one-more")).unwrap();
        let found = expand(&[many.clone(), other]);
        assert!(found.files.len() < MAX_ENTRIES, "{}", found.files.len());
        assert_eq!(found.unusable, [(many, Problem::TooManyEntries)]);
    }

    /// Links inside a directory that lead nowhere are said, not passed over
    /// in silence; a loop of links does not hang the walk; a FIFO is never
    /// opened (a read open would wait for a writer).
    #[test]
    fn dangling_links_and_link_loops_are_said_and_fifos_passed_over() {
        let dir = TempDir::new("weights-links");
        let shards = dir.path().join("shards");
        fs::create_dir(&shards).unwrap();
        fs::write(shards.join("a.bin"), "a").unwrap();
        std::os::unix::fs::symlink(dir.join("gone"), shards.join("dangling")).unwrap();
        std::os::unix::fs::symlink(shards.join("self"), shards.join("self")).unwrap();
        nix::unistd::mkfifo(&shards.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let listed_loop = dir.path().join("loop");
        std::os::unix::fs::symlink(&listed_loop, &listed_loop).unwrap();

        let found = expand(&[shards.clone(), listed_loop.clone(), shards.join("fifo")]);
        let paths: Vec<&Path> = found.files.iter().map(|file| file.path.as_path()).collect();
        assert_eq!(paths, [shards.join("a.bin")]);
        let looped = Problem::Unreadable(io::Error::from_raw_os_error(libc::ELOOP).kind());
        assert_eq!(
            found.unusable,
            [
                (shards.join("dangling"), Problem::Missing),
                (shards.join("self"), looped),
                (listed_loop, looped),
                (shards.join("fifo"), Problem::NotFileOrDirectory),
            ]
        );
    }

    const UNPRIVILEGED_DIR: &str = "STRATA_TEST_WEIGHTS_UNPRIVILEGED_DIR";

    /// A file and a directory the supervisor's user may not read (mode 0)
    /// are said, not passed over in silence. Root reads them anyway, so as
    /// root the test runs itself again as `nobody` (65534), the files still
    /// root's.
    #[test]
    fn unreadable_files_and_directories_are_said() {
        if let Some(dir) = std::env::var_os(UNPRIVILEGED_DIR) {
            check_unreadable(Path::new(&dir));
            return;
        }
        let dir = TempDir::new("weights-perm");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let shards = dir.path().join("shards");
        fs::create_dir(&shards).unwrap();
        fs::write(shards.join("a.bin"), "a").unwrap();
        fs::write(shards.join("b.bin"), "b").unwrap();
        fs::set_permissions(shards.join("b.bin"), fs::Permissions::from_mode(0o000)).unwrap();
        fs::create_dir(shards.join("closed")).unwrap();
        fs::write(shards.join("closed/c.bin"), "c").unwrap();
        fs::set_permissions(shards.join("closed"), fs::Permissions::from_mode(0o000)).unwrap();
        fs::write(dir.join("listed.bin"), "l").unwrap();
        fs::set_permissions(dir.join("listed.bin"), fs::Permissions::from_mode(0o000)).unwrap();

        if !nix::unistd::geteuid().is_root() {
            check_unreadable(dir.path());
            return;
        }
        let name = format!(
            "{}::unreadable_files_and_directories_are_said",
            module_path!().split_once("::").unwrap().1
        );
        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .args([name.as_str(), "--exact", "--test-threads=1"])
            .env(UNPRIVILEGED_DIR, dir.path())
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "as nobody:\n{stdout}{stderr}");
        assert!(stdout.contains("1 passed"), "as nobody:\n{stdout}{stderr}");
    }

    fn check_unreadable(dir: &Path) {
        let shards = dir.join("shards");
        let found = expand(&[shards.clone(), dir.join("listed.bin")]);
        let paths: Vec<&Path> = found.files.iter().map(|file| file.path.as_path()).collect();
        assert_eq!(paths, [shards.join("a.bin")]);
        let denied = Problem::Unreadable(io::ErrorKind::PermissionDenied);
        assert_eq!(
            found.unusable,
            [
                (shards.join("b.bin"), denied),
                (shards.join("closed"), denied),
                (dir.join("listed.bin"), denied),
            ]
        );
    }

    /// What the log says, once per model and path, for a configured list
    /// and for one derived from a profile (which names no path).
    #[test]
    fn each_unusable_path_is_said_once_per_model() {
        let said = Said::default();
        let found = Found {
            files: Vec::new(),
            unusable: vec![
                (PathBuf::from("/w/a"), Problem::Missing),
                (PathBuf::from("/w/a"), Problem::Missing),
                (PathBuf::from("/w/d/65"), Problem::TooDeep),
            ],
        };
        let source = WeightsSource::Configured(vec![PathBuf::from("/w")]);
        let lines = logged(|| {
            found.warn_unusable("m", &source, &said);
            found.warn_unusable("m", &source, &said);
            found.warn_unusable("n", &source, &said);
        });
        assert_eq!(lines.matches("a weights path does not exist").count(), 2);
        assert_eq!(
            lines
                .matches("a weights path is a directory more than 64 levels below")
                .count(),
            2,
            "{lines}"
        );
        assert!(lines.contains("path=/w/a"), "{lines}");

        let derived = WeightsSource::FromProfile(strata_protocol::config::EngineWeights {
            flag: "--native",
            path: PathBuf::from("/secret/w"),
        });
        let found = Found {
            files: Vec::new(),
            unusable: vec![
                (PathBuf::from("/secret/w"), Problem::Missing),
                (
                    PathBuf::from("/secret/w/x"),
                    Problem::Unreadable(io::ErrorKind::PermissionDenied),
                ),
            ],
        };
        let lines = logged(|| found.warn_unusable("m", &derived, &said));
        assert!(
            lines.contains(
                "the weights the profile's args name (--native) does not exist; it is not \
                 prefetched"
            ),
            "{lines}"
        );
        assert!(
            lines.contains(
                "a path inside the weights the profile's args name (--native) cannot be read: \
                 permission denied; it is not prefetched"
            ),
            "{lines}"
        );
        assert!(!lines.contains("secret"), "{lines}");
    }

    /// What `run` logs on this thread.
    fn logged(run: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Buffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl io::Write for Buffer {
            fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, run);
        String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap()
    }
}
