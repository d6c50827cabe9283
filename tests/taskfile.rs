//! Task files and the node config, end to end through the file system: what users write, what
//! zkcron makes of it, and the messages it shows when something is wrong.

use std::path::{Path, PathBuf};

use zkcron::task::{Identity, TaskDefaults, TaskFileError, parse_task};

fn root_defaults() -> TaskDefaults {
    TaskDefaults {
        timezone: chrono_tz::UTC,
        user: None,
        identity: Identity {
            uid: 0,
            user_name: "root".into(),
        },
    }
}

fn errors_of(text: &str) -> Vec<TaskFileError> {
    parse_task("t", Path::new("/jobs/t.toml"), text, &root_defaults()).expect_err("should be refused")
}

#[test]
fn smoke() {
    let errors = errors_of("schedule = \"61 * * * *\"\ncommand = 5\ntimezon = \"UTC\"\n");
    for e in &errors {
        println!("{e}\n{}\n", e.one_line());
    }
    let _ = PathBuf::new();
}
