//! The one test binary per folder (`tests/NAME/main.rs` declaring a module per file): a file
//! of the folder that `main.rs` does not declare is never compiled nor run, and nothing else
//! would say so. Each such binary calls [`undeclared_modules`] from a test of its own.

use std::path::Path;

/// The `.rs` files of `dir` (other than `main.rs`) that its `main.rs` does not declare with a
/// `mod NAME;` line of its own.
pub fn undeclared_modules(dir: &Path) -> Vec<String> {
    let main = std::fs::read_to_string(dir.join("main.rs"))
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.join("main.rs").display()));
    let mut undeclared = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
        let name = entry.expect("a directory entry").file_name();
        let name = name.to_string_lossy();
        if let Some(module) = name.strip_suffix(".rs")
            && module != "main"
            && !main.lines().any(|line| line == format!("mod {module};"))
        {
            undeclared.push(name.into_owned());
        }
    }
    undeclared.sort();
    undeclared
}
