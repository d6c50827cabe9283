//! Rules the test suite keeps, checked by reading its sources.
//!
//! - **No silent skips.** A test that needs root does not return early when the tests do not
//!   run as root, nor print that it "skipped": a developer's `cargo test` would then pass
//!   without it. It re-runs itself as root of a user namespace and requires that run to pass
//!   (`tests/executor.rs`, `tests/common/tmpfs.rs`), or fails saying how to run it. Checked in
//!   every file under `tests/`, and for the early return in the unit tests under `src/` too.
//! - **No part checked only as root.** Nor does a test keep some of its checks in an `if` on
//!   whether it runs as root (`is_root()`, or the effective uid compared with 0) with nothing
//!   in their place for another user: `cargo test` would pass without them. A test may choose
//!   a value by it (`let who = if is_root() { .. } else { .. };`), which both users then check.
//!   Checked in the tests under `tests/` and `src/`.
//! - **One module layout.** No `#[path]` attribute and no `mod.rs` in `src/`: a module `foo`
//!   is `foo.rs`, its children are in `foo/`, and its unit tests are `foo/tests.rs`, declared in
//!   `foo.rs` by `#[cfg(test)] mod tests;`. A module is then found where its name says, and its
//!   tests import what they use from where it is, not through a chain of test files.
//! - **Time the tests can move.** `clippy.toml` disallows reading the system clock outside
//!   `clock::Clock::now`; building the system clock, `Clock::system()`, is left to the outermost
//!   entry (`src/main.rs`, `src/cli.rs`, `src/cli/`), which hands it down, so that a test can
//!   hand the daemon, the HTTP server, the operator commands and the backends
//!   `Clock::tokio_paused` instead. Checked in `src/` but its tests (`tests.rs`, `*_tests.rs`,
//!   files under a `tests/` dir, a file's inline `#[cfg(test)]` module).
//!
//! This file is not scanned: its examples are offences on purpose. Each rule is shown able to
//! fail on them.

use std::path::{Path, PathBuf};

/// The `.rs` files under `dir`, recursively, in a stable order.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The places in `source` that break the module layout rule: each `#[path = ...]`
/// attribute (comments are no code), by line.
fn path_attributes(source: &str) -> Vec<usize> {
    let code = without_comments(source);
    let mut found = Vec::new();
    for (at, _) in code.match_indices('#') {
        let rest = code[at + 1..].trim_start();
        let Some(rest) = rest.strip_prefix('[') else {
            continue;
        };
        let rest = rest.trim_start();
        if rest
            .strip_prefix("path")
            .is_some_and(|after| after.trim_start().starts_with('='))
        {
            found.push(line_of(source, at));
        }
    }
    found
}

/// Which rules a file is checked against.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// A file of `tests/`: every rule.
    TestFile,
    /// A file of `src/`: only the rules about test functions (its own output may say "skip").
    SourceFile,
}

/// The silent skips in `source`: (line number, what is wrong).
fn silent_skips(source: &str, scope: Scope) -> Vec<(usize, &'static str)> {
    let mut found = Vec::new();
    if scope == Scope::TestFile {
        for at in print_of_a_skip(source) {
            found.push((line_of(source, at), "prints that it skipped"));
        }
    }
    // Comments are no code: blanked, so that positions and lines stay.
    let code = without_comments(source);
    for at in early_returns_on_is_root(&code) {
        found.push((line_of(source, at), "a test returns early on is_root()"));
    }
    for at in parts_only_as_root(&code) {
        found.push((
            line_of(source, at),
            "a test checks a part only as root (or not root)",
        ));
    }
    found.sort();
    found
}

/// Where a test's code asks whether it runs as root: `is_root()`, and the effective or real
/// uid compared with 0 (`geteuid().as_raw() == 0`, or a name bound to a uid, `me != 0`).
fn root_checks(source: &str) -> Vec<usize> {
    let mut found: Vec<usize> = source
        .match_indices("is_root()")
        .map(|(at, _)| at)
        .collect();
    let mut uids = vec![".as_raw()".to_string()];
    for (at, _) in source.match_indices("let ") {
        let statement = &source[at..source[at..].find(';').map_or(source.len(), |end| at + end)];
        let binds_a_uid = [
            "geteuid()",
            "getuid()",
            "Uid::effective()",
            "Uid::current()",
        ]
        .iter()
        .any(|call| statement.contains(call));
        let name = statement["let ".len()..]
            .split(|c: char| !c.is_alphanumeric() && c != '_')
            .next()
            .unwrap_or_default();
        if binds_a_uid && !name.is_empty() {
            uids.push(name.to_string());
        }
    }
    for uid in &uids {
        for compared in [" == 0", " != 0"] {
            let text = format!("{uid}{compared}");
            for (at, _) in source.match_indices(&text) {
                let before = source[..at].chars().next_back();
                let a_word = before.is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
                let after = source[at + text.len()..].chars().next();
                let whole = after.is_none_or(|c| !c.is_alphanumeric() && c != '_');
                if (a_word || uid.starts_with('.')) && whole {
                    found.push(at);
                }
            }
        }
    }
    found.sort();
    found
}

/// Where an `if` statement (not a value: `let x = if ..`) on a [`root_checks`] condition inside
/// a test function keeps a part of the test from running as root or as another user, without
/// returning (that is [`early_returns_on_is_root`]).
fn parts_only_as_root(source: &str) -> Vec<usize> {
    root_checks(source)
        .into_iter()
        .filter(|&at| {
            let statement_start = source[..at]
                .rfind([';', '{', '}'])
                .map_or(0, |start| start + 1);
            let head = source[statement_start..at].trim_start();
            let statement = head.starts_with("if ") || head.starts_with("else if ");
            statement
                && in_a_test(source, at)
                && !branches(source, at).iter().any(|branch| returns(branch))
        })
        .collect()
}

/// `source` with each `//` comment blanked to the end of its line (spaces for its characters).
fn without_comments(source: &str) -> String {
    source
        .split_inclusive('\n')
        .map(|line| match line.find("//") {
            Some(start) => {
                let comment = line[start..].trim_end_matches('\n');
                let blank = " ".repeat(comment.len());
                format!(
                    "{}{blank}{}",
                    &line[..start],
                    &line[start + comment.len()..]
                )
            }
            None => line.to_string(),
        })
        .collect()
}

fn line_of(source: &str, at: usize) -> usize {
    source[..at].matches('\n').count() + 1
}

/// Where a `print!`, `println!`, `eprint!` or `eprintln!` whose message starts with "skip"
/// (in any case) begins.
fn print_of_a_skip(source: &str) -> Vec<usize> {
    let mut found = Vec::new();
    for macro_call in ["print!(", "println!("] {
        for (at, _) in source.match_indices(macro_call) {
            let message = source[at + macro_call.len()..].trim_start();
            if message
                .strip_prefix('"')
                .is_some_and(|text| text.to_lowercase().starts_with("skip"))
            {
                found.push(at);
            }
        }
    }
    found
}

/// Where an `if` on `is_root()` inside a test function has a `return` in one of its branches.
fn early_returns_on_is_root(source: &str) -> Vec<usize> {
    let mut found = Vec::new();
    for at in root_checks(source) {
        let statement_start = source[..at]
            .rfind([';', '{', '}'])
            .map_or(0, |start| start + 1);
        let condition = &source[statement_start..at];
        if !condition
            .split(|c: char| !c.is_alphanumeric() && c != '_')
            .any(|word| word == "if")
        {
            continue;
        }
        if branches(source, at).iter().any(|branch| returns(branch)) && in_a_test(source, at) {
            found.push(at);
        }
    }
    found
}

/// The block of the `if` whose condition holds `at`, and its `else` block if it has one.
fn branches(source: &str, at: usize) -> Vec<&str> {
    let mut branches = Vec::new();
    let Some(open) = source[at..].find('{').map(|i| at + i) else {
        return branches;
    };
    let Some(close) = matching_brace(source, open) else {
        return branches;
    };
    branches.push(&source[open..=close]);
    let after = source[close + 1..].trim_start();
    if let Some(rest) = after.strip_prefix("else")
        && rest.trim_start().starts_with('{')
    {
        let open = source.len() - rest.trim_start().len();
        if let Some(close) = matching_brace(source, open) {
            branches.push(&source[open..=close]);
        }
    }
    branches
}

/// The `}` that closes the `{` at `open`.
fn matching_brace(source: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in source[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + i);
                }
            }
            _ => {}
        }
    }
    None
}

fn returns(block: &str) -> bool {
    block
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .any(|word| word == "return")
}

/// Whether the function around `at` (the last `fn` before it) is a test: `#[test]` or
/// `#[tokio::test...]` among the attributes above its line.
fn in_a_test(source: &str, at: usize) -> bool {
    let Some(fn_at) = source[..at].rfind("fn ") else {
        return false;
    };
    let fn_line_start = source[..fn_at].rfind('\n').map_or(0, |i| i + 1);
    source[..fn_line_start]
        .lines()
        .rev()
        .map(str::trim)
        .take_while(|line| line.starts_with("#[") || line.starts_with("//") || line.is_empty())
        .any(|line| line.starts_with("#[test]") || line.starts_with("#[tokio::test"))
}

#[test]
fn no_test_skips_itself_silently_when_not_root() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let this_file = root.join(file!());
    let mut offences = Vec::new();
    for (dir, scope) in [("tests", Scope::TestFile), ("src", Scope::SourceFile)] {
        for path in rust_files(&root.join(dir)) {
            if path == this_file {
                continue;
            }
            let source = std::fs::read_to_string(&path).unwrap();
            for (line, what) in silent_skips(&source, scope) {
                let shown = path.strip_prefix(root).unwrap().display();
                offences.push(format!("{shown}:{line}: {what}"));
            }
        }
    }
    assert!(
        offences.is_empty(),
        "tests that pass without running when not root; re-run them as root of a user namespace \
         (as tests/executor.rs does) or fail saying how to run them:\n{}",
        offences.join("\n")
    );
}

#[test]
fn the_silent_skip_rule_finds_a_skip_that_returns_and_says_so() {
    let source = r#"
#[tokio::test(flavor = "multi_thread")]
async fn switches_users() {
    if !is_root() {
        eprintln!("skipped: switching users needs root");
        return;
    }
    run().await;
}

/// Says nothing.
#[test]
#[allow(unused)]
fn switches_groups() {
    if nix::unistd::geteuid().is_root() {
        check();
    } else {
        return;
    }
}

fn helper() {
    println!("Skipping the rest");
}
"#;
    assert_eq!(
        silent_skips(source, Scope::TestFile),
        [
            (4, "a test returns early on is_root()"),
            (5, "prints that it skipped"),
            (15, "a test returns early on is_root()"),
            (23, "prints that it skipped"),
        ]
    );
    assert_eq!(
        silent_skips(source, Scope::SourceFile),
        [
            (4, "a test returns early on is_root()"),
            (15, "a test returns early on is_root()"),
        ]
    );
}

#[test]
fn the_root_only_rule_finds_checks_kept_from_other_users_and_a_uid_compared_with_0() {
    let source = r#"
#[test]
fn refuses_a_foreign_file() {
    let me = nix::unistd::geteuid().as_raw();
    if me != 0 {
        assert!(read(&path).is_ok());
        return;
    }
    assert!(read(&foreign).is_err());
}

#[test]
fn loads_the_owner_s_link() {
    check(&link);
    // Only root can; as another user the link is the user's own.
    if nix::unistd::geteuid().is_root() {
        load(&link).unwrap();
    }
}

#[test]
fn refuses_an_unknown_user() {
    if nix::unistd::geteuid().as_raw() == 0 {
        refuses();
    } else if is_root() {
        other();
    } else {
        passes();
    }
}

#[test]
fn counts_time() {
    let time = 3;
    if time != 0 {
        check();
    }
}
"#;
    assert_eq!(
        silent_skips(source, Scope::SourceFile),
        [
            (5, "a test returns early on is_root()"),
            (16, "a test checks a part only as root (or not root)"),
            (23, "a test checks a part only as root (or not root)"),
            (25, "a test checks a part only as root (or not root)"),
        ]
    );
}

#[test]
fn the_silent_skip_rule_lets_a_rerun_a_loud_failure_and_a_choice_of_user_pass() {
    let source = r#"
/// Returns false as root: the test goes on.
fn rerun_as_root(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return false;
    }
    true
}

#[test]
fn needs_root() {
    if rerun_as_root("needs_root") {
        return;
    }
    assert!(is_root(), "run it with sudo");
    let who = if is_root() { "nobody" } else { "me" };
    println!("ran as {who}");
}
"#;
    assert_eq!(silent_skips(source, Scope::TestFile), []);
}

#[test]
fn src_has_one_module_layout_without_path_attributes_or_mod_rs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = rust_files(&root.join("src"));
    // The walk sees the crate's files (a rule that saw none would pass).
    assert!(files.len() > 100, "the walk misses the files of src/");
    let mut offences = Vec::new();
    for path in files {
        let shown = path.strip_prefix(root).unwrap().display().to_string();
        if path.file_name().is_some_and(|name| name == "mod.rs") {
            offences.push(format!(
                "{shown}: a mod.rs (name it after its module, beside its folder)"
            ));
        }
        let source = std::fs::read_to_string(&path).unwrap();
        for line in path_attributes(&source) {
            offences.push(format!("{shown}:{line}: a #[path] attribute"));
        }
    }
    assert!(
        offences.is_empty(),
        "src/ keeps one module layout: `foo.rs` beside `foo/`, a module's tests in \
         `foo/tests.rs` declared by `#[cfg(test)] mod tests;`:\n{}",
        offences.join("\n")
    );
}

/// Where the system clock may be built: the outermost entry, and the module that defines it.
const CLOCK_ENTRY: &[&str] = &["src/main.rs", "src/cli.rs", "src/cli/", "src/clock.rs"];

/// What builds the system clock.
const SYSTEM_CLOCK: &str = "Clock::system(";

/// Whether `path` (relative to the crate, with `/`) holds only tests.
fn is_test_file(path: &str) -> bool {
    path.ends_with("/tests.rs") || path.ends_with("_tests.rs") || path.contains("/tests/")
}

/// The places, as `path:line`, where `text` (the file at `path`) builds the system clock
/// outside the entry and outside tests.
fn clock_builds(path: &str, text: &str) -> Vec<String> {
    if is_test_file(path) || CLOCK_ENTRY.iter().any(|entry| path.starts_with(entry)) {
        return Vec::new();
    }
    let lines: Vec<&str> = text.lines().collect();
    // The inline test module: `#[cfg(test)]` over `mod name {` (not over `mod name;`).
    let tests_start = lines
        .windows(2)
        .position(|w| w[0].trim() == "#[cfg(test)]" && w[1].trim().ends_with('{'))
        .unwrap_or(lines.len());
    lines[..tests_start]
        .iter()
        .enumerate()
        .filter(|(_, line)| line.contains(SYSTEM_CLOCK) && !line.trim_start().starts_with("//"))
        .map(|(i, _)| format!("{path}:{}", i + 1))
        .collect()
}

#[test]
fn only_the_outermost_entry_builds_the_system_clock() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for file in rust_files(&root.join("src")) {
        let relative = file
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let text = std::fs::read_to_string(&file).unwrap();
        found.extend(clock_builds(&relative, &text));
    }
    assert!(
        found.is_empty(),
        "the system clock is built outside the outermost entry (src/cli.rs): take the clock the \
         caller hands down (DaemonConfig::clock, LocalCoordinator::clock, ClusterClient::clock, \
         the HTTP source's) instead, at:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_layout_rule_finds_a_path_attribute_however_spaced_and_not_one_in_a_comment() {
    let source = r#"
#[cfg(test)]
#[path = "control_tests.rs"]
mod tests;
# [ path="chain_tests.rs" ]
mod chain;
// #[path = "commented.rs"] is no attribute
#[pathological]
fn f() {}
"#;
    assert_eq!(path_attributes(source), [3, 5]);
}

#[test]
fn a_shell_module_that_builds_the_system_clock_is_reported_but_not_its_tests() {
    let text = "#[cfg(test)]\nmod tests;\nfn now() -> DateTime<Utc> {\n    Clock::system().now()\n}\n\n#[cfg(test)]\nmod tests {\n    fn t() { Clock::system(); }\n}\n";

    assert_eq!(
        clock_builds("src/daemon/runs.rs", text),
        ["src/daemon/runs.rs:4"]
    );
    assert!(clock_builds("src/cli.rs", text).is_empty());
    assert!(clock_builds("src/daemon/tests.rs", text).is_empty());
    assert!(clock_builds("src/coord/local/journal_tests.rs", text).is_empty());
}
