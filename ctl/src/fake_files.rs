//! The fake Strata backend (`tests/fake_strata`), carried inside the binary
//! so `strata-ctl demo` works from any install. The list is
//! `tests/fake_strata/FILES.txt`; a unit test keeps the two in step.

/// `(relative path, contents)` of every runtime file, in FILES.txt order.
pub const FILES: &[(&str, &str)] = &[
    (
        "serve/__init__.py",
        include_str!("../../tests/fake_strata/serve/__init__.py"),
    ),
    (
        "serve/frames.py",
        include_str!("../../tests/fake_strata/serve/frames.py"),
    ),
    (
        "serve/script.py",
        include_str!("../../tests/fake_strata/serve/script.py"),
    ),
    (
        "serve/server.py",
        include_str!("../../tests/fake_strata/serve/server.py"),
    ),
];

#[cfg(test)]
mod tests {
    use super::FILES;
    use strata_test_support::fake_strata_dir as fake_dir;

    #[test]
    fn embedded_list_matches_files_txt() {
        let listed = std::fs::read_to_string(fake_dir().join("FILES.txt")).expect("FILES.txt");
        let listed: Vec<&str> = listed
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
            .collect();
        let embedded: Vec<&str> = FILES.iter().map(|(name, _)| *name).collect();
        assert_eq!(
            embedded, listed,
            "ctl/src/fake_files.rs must embed exactly the files of tests/fake_strata/FILES.txt"
        );
    }

    #[test]
    fn embedded_files_match_the_files_on_disk() {
        for (name, contents) in FILES {
            let on_disk = std::fs::read(fake_dir().join(name)).expect(name);
            assert!(
                on_disk == contents.as_bytes(),
                "embedded {name} differs from tests/fake_strata/{name}"
            );
        }
    }
}
