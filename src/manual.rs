//! The manual page `zkcron(1)` and the shell completions, both generated from the clap
//! definition in [`crate::cli`], so they cannot drift from what the binary accepts. `cli` hands
//! its `clap::Command` in, so this module does not import the command line that calls it.
//!
//! The packages ship what `zkcron man` and `zkcron completions SHELL` print (see
//! `scripts/package`). This module only renders text; it reads no config and starts nothing.

use std::io::{self, Write};

use clap_complete::Shell;

/// Writes `zkcron(1)`, from `command` (`Cli::command()`), in roff: clap_mangen's title, name, synopsis, description and options,
/// then one subsection per visible subcommand with its own options (clap_mangen alone would
/// point at `zkcron-run(1)` and friends, which are not shipped), then files, signals and exit
/// status.
pub fn write_man_page(command: clap::Command, out: &mut dyn Write) -> io::Result<()> {
    let man = clap_mangen::Man::new(command.clone())
        .section("1")
        .manual("zkcron manual")
        .source(format!("zkcron {}", env!("CARGO_PKG_VERSION")));
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    man.render_options_section(out)?;

    writeln!(out, ".SH COMMANDS")?;
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = sub.get_name();
        writeln!(out, ".SS \"zkcron {}\"", escape(name))?;
        if let Some(about) = sub.get_long_about().or_else(|| sub.get_about()) {
            writeln!(out, "{}", escape(&about.to_string()))?;
        }
        for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
            let id = arg.get_id().as_str();
            if id == "help" || id == "version" {
                continue;
            }
            writeln!(out, ".TP")?;
            writeln!(out, "{}", arg_heading(arg))?;
            if let Some(help) = arg.get_long_help().or_else(|| arg.get_help()) {
                writeln!(out, "{}", escape(&help.to_string()))?;
            }
            let defaults: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            if !defaults.is_empty() {
                writeln!(out, "[default: {}]", escape(&defaults.join(", ")))?;
            }
            let values: Vec<String> = arg
                .get_possible_values()
                .iter()
                .filter(|v| !v.is_hide_set())
                .map(|v| v.get_name().to_string())
                .collect();
            if !values.is_empty() {
                writeln!(out, ".br")?;
                writeln!(out, "One of: {}.", escape(&values.join(", ")))?;
            }
        }
    }
    out.write_all(EXTRA_SECTIONS.as_bytes())?;
    man.render_version_section(out)?;
    Ok(())
}

/// `--long-flag VALUE`, `-s`, or `VALUE` for a positional, in roff bold/italic.
fn arg_heading(arg: &clap::Arg) -> String {
    let value = arg
        .get_value_names()
        .and_then(|names| names.first())
        .map(|name| name.to_string())
        .unwrap_or_else(|| arg.get_id().as_str().to_uppercase());
    let takes_value = arg.get_action().takes_values();
    let mut flags = Vec::new();
    if let Some(short) = arg.get_short() {
        flags.push(format!("\\fB\\-{}\\fR", escape(&short.to_string())));
    }
    if let Some(long) = arg.get_long() {
        flags.push(format!("\\fB\\-\\-{}\\fR", escape(long)));
    }
    if flags.is_empty() {
        return format!("\\fI{}\\fR", escape(&value));
    }
    let mut heading = flags.join(", ");
    if takes_value {
        heading.push_str(&format!(" \\fI{}\\fR", escape(&value)));
    }
    heading
}

/// Escapes text for roff: backslashes, hyphens (so they stay ASCII hyphens, which man page
/// linters ask for), and a leading `.` or `'` that would read as a request.
fn escape(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    escaped
        .lines()
        .map(|line| {
            if line.starts_with('.') || line.starts_with('\'') {
                format!("\\&{line}")
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What a packaged daemon's manual page should also say: what it guarantees, where things are,
/// how to signal it, what the exit codes mean.
const EXTRA_SECTIONS: &str = r#".SH GUARANTEES
A tick never runs twice. A tick nobody claimed is caught up per \fBcatch_up\fR. A tick claimed by a node that dies before or during its run is not run again by default (\fBon_node_loss = "skip"\fR: at most once) and is run again with \fBrerun\fR (at least once); the fire id (\fBZKCRON_FIRE_ID\fR in the job's environment) lets a job make itself idempotent.
.SH FILES
.TP
\fI/etc/zkcron/zkcron.toml\fR
The node configuration, read by \fBrun\fR, \fBvalidate\fR, \fBnext\fR and the operator commands (\fBstatus\fR, \fBexplain\fR, \fBhistory\fR, \fBtrigger\fR, \fBpause\fR, \fBresume\fR, \fBdrain\fR, \fBundrain\fR) when \fB\-\-config\fR is not given.
.TP
\fI/etc/zkcron/jobs.d/\fR
Task files, one task per \fINAME\fR.toml; the default jobs dir beside the configuration.
.TP
\fI/var/lib/zkcron/\fR
The state dir of the packaged service (systemd's \fBStateDirectory=\fR): fire records of the local backend and the lock that keeps a second daemon out.
.TP
\fI/var/lib/zkcron/zkcron.sock\fR
The local backend's control socket (mode 0600): the operator commands reach the daemon of a single host through it.
.SH SIGNALS
.TP
\fBSIGHUP\fR
Re\-read the jobs dir (\fBsystemctl reload zkcron\fR). A change in the jobs dir is also picked up by itself.
.TP
\fBSIGTERM\fR, \fBSIGINT\fR
Graceful stop: fire nothing new and start no retry, release every lease at once, let running jobs finish for up to \fBshutdown_grace\fR, then kill their process groups.
.SH "EXIT STATUS"
0 on success, 1 for invalid input or a failed check (for the operator commands also: ZooKeeper or the local daemon unreachable, an unknown task, a triggered run that failed or could not run), 2 for a usage error.
.SH "SEE ALSO"
\fBsystemctl\fR(1), \fBcrontab\fR(5), \fBsystemd.service\fR(5)
"#;

/// The completion script of `command` (`Cli::command()`) for `shell`, to be installed where the shell looks for it. Rendered
/// into memory first: clap_complete panics on a failed write, and stdout may be full or closed.
pub fn completions(mut command: clap::Command, shell: Shell) -> Vec<u8> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "zkcron", &mut script);
    script
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_protects_hyphens_backslashes_and_leading_dots() {
        assert_eq!(escape("--config"), "\\-\\-config");
        assert_eq!(escape("a\\b"), "a\\eb");
        assert_eq!(escape(".hidden\n'quoted"), "\\&.hidden\n\\&'quoted");
    }
}
