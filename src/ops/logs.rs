//! `zkcron logs TASK [FIRE_ID] [--follow]`: a run's output as the node that ran it keeps it
//! ([`crate::executor::kept`]). On the node's own host it is read from the state dir (as the
//! daemon's user or root); in a cluster from the node that ran it, found in the task's history
//! or fire record, over that node's HTTP endpoint (`/api/runs/<fire id>/output`, with the
//! token of `[http] read_token_file` or `admin_token_file`). When that node cannot be reached,
//! the last 4 KiB stored with a failed run's result are shown instead, said as such.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use chrono::{DateTime, Utc};
use futures::{Stream, StreamExt};
use hyper::body::Bytes;

use super::cluster::ClusterClient;
use crate::coord::records::{FireRecord, HistoryEntry, MemberRecord};
use crate::executor::OutputStore;
use crate::executor::kept::{self, OutputFile, Record, Standing};

/// What `zkcron logs` was asked, with what it needs of the node's config.
#[derive(Debug, Clone)]
pub struct LogsCommand {
    pub task: String,
    pub fire_id: Option<String>,
    pub follow: bool,
    pub timestamps: bool,
    /// Where this host's node keeps output (`None`: `[log] output_limit = 0`).
    pub store: Option<OutputStore>,
    /// This host's node id.
    pub node_id: String,
    /// The token file to read another node's output with.
    pub token_file: Option<PathBuf>,
}

/// How often a followed run's file is read again.
const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// How long a node's endpoint may take to answer.
const HTTP_DEADLINE: Duration = Duration::from_secs(10);

/// Prints a kept output's records as they come: the lines' text (with `--timestamps`, the
/// time and stream first), the markers on standard error.
struct Printer {
    timestamps: bool,
    partial: Vec<u8>,
    standing: Option<Standing>,
    fire_id: String,
    node: String,
    unknown: usize,
    /// Standard output's reader went away (`zkcron logs -f | head`): stop.
    gone: bool,
}

impl Printer {
    /// Writes `text` to standard output; a reader that went away ends the printing quietly.
    fn emit(&mut self, text: &str) -> anyhow::Result<()> {
        use std::io::Write;
        if self.gone || text.is_empty() {
            return Ok(());
        }
        let mut stdout = std::io::stdout().lock();
        match stdout
            .write_all(text.as_bytes())
            .and_then(|()| stdout.flush())
        {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                self.gone = true;
                Ok(())
            }
            other => other.context("cannot write to standard output"),
        }
    }

    fn new(timestamps: bool) -> Printer {
        Printer {
            timestamps,
            partial: Vec::new(),
            standing: None,
            fire_id: String::new(),
            node: String::new(),
            unknown: 0,
            gone: false,
        }
    }

    fn feed(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        self.partial.extend_from_slice(bytes);
        let whole = self
            .partial
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |i| i + 1);
        let rest = self.partial.split_off(whole);
        let lines = std::mem::replace(&mut self.partial, rest);
        let mut out = String::new();
        for line in lines.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let line = String::from_utf8_lossy(line);
            self.record(&line, &mut out)?;
        }
        self.emit(&out)
    }

    fn record(&mut self, line: &str, out: &mut String) -> anyhow::Result<()> {
        let time = |at_ms: i64| {
            DateTime::<Utc>::from_timestamp_millis(at_ms)
                .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
                .unwrap_or_default()
        };
        match kept::parse_record(line) {
            Some(Record::Header { fire_id, node }) => {
                self.fire_id = fire_id.to_string();
                self.node = node.to_string();
            }
            Some(Record::Line {
                at_ms,
                stderr,
                text,
            }) if self.timestamps => {
                let stream = if stderr { "stderr" } else { "stdout" };
                out.push_str(&format!("{} {stream} {text}\n", time(at_ms)));
            }
            Some(Record::Line { text, .. }) => {
                out.push_str(text);
                out.push('\n');
            }
            Some(Record::Attempt { attempt, .. }) if attempt != "1" => {
                self.emit(out)?;
                out.clear();
                eprintln!("zkcron: --- attempt {attempt} ---");
            }
            Some(Record::Attempt { .. }) => {}
            Some(Record::Cut { lines, bytes, .. }) => {
                self.emit(out)?;
                out.clear();
                eprintln!(
                    "zkcron: …[{lines} lines, {bytes} bytes of output cut here: past [log] \
                     output_limit, the head and the tail are kept]"
                );
            }
            Some(Record::End { at_ms, exit }) => {
                self.standing = Some(Standing::Ended);
                self.emit(out)?;
                out.clear();
                eprintln!(
                    "zkcron: run {} on node {} ended at {}: {exit}",
                    self.fire_id,
                    self.node,
                    time(at_ms)
                );
            }
            Some(Record::Incomplete { .. }) => {
                self.standing = Some(Standing::Incomplete);
                self.emit(out)?;
                out.clear();
                eprintln!(
                    "zkcron: incomplete: node {} stopped before run {} ended; this is what it \
                     wrote up to then",
                    self.node, self.fire_id
                );
            }
            None => {
                self.unknown += 1;
                if self.unknown == 1 {
                    eprintln!(
                        "zkcron: warning: a line of run {}'s output is not a record of \"{}\" \
                         (written by another release?); such lines are left out",
                        self.fire_id,
                        kept::HEADER
                    );
                }
            }
        }
        Ok(())
    }
}

/// `zkcron logs` on this host's kept output.
pub fn local(command: &LogsCommand) -> anyhow::Result<ExitCode> {
    let Some(store) = &command.store else {
        bail!("this node keeps no runs' output: [log] output_limit is 0");
    };
    let fire_id = match &command.fire_id {
        Some(fire_id) => fire_id.clone(),
        None => newest(store, &command.task)?,
    };
    check_task(&command.task, &fire_id)?;
    let path = store.path(&fire_id);
    let Some(file) = OutputFile::open(&path).map_err(anyhow::Error::msg)? else {
        bail!(
            "no output of run {fire_id} is kept on this host ({}): it ran elsewhere, or it is \
             older than the [scheduler] history_runs kept",
            path.display()
        );
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(print_file(file, command))
}

/// Prints `file`, following it while it is live when asked (until standard output's reader
/// goes away).
async fn print_file(mut file: OutputFile, command: &LogsCommand) -> anyhow::Result<ExitCode> {
    let mut printer = Printer::new(command.timestamps);
    loop {
        let polled = file.poll().context("cannot read the kept output")?;
        printer.feed(&polled.bytes)?;
        if printer.gone {
            return Ok(ExitCode::SUCCESS);
        }
        match polled.standing {
            Standing::Live if polled.more => {}
            Standing::Live if command.follow => tokio::time::sleep(FOLLOW_POLL).await,
            Standing::Live => {
                eprintln!(
                    "zkcron: run {} is still going (--follow streams it)",
                    printer.fire_id
                );
                return Ok(ExitCode::SUCCESS);
            }
            Standing::Ended => return Ok(ExitCode::SUCCESS),
            Standing::Incomplete => {
                // The record's time is not printed.
                printer.feed(kept::incomplete_record(0).as_bytes())?;
                return Ok(ExitCode::SUCCESS);
            }
        }
    }
}

/// The fire id of `task`'s newest kept run on this host.
fn newest(store: &OutputStore, task: &str) -> anyhow::Result<String> {
    let dir = store.task_dir(task);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!(
                "no output of task {task} is kept on this host ({}): it has not run here",
                dir.display()
            )
        }
        Err(e) => bail!("cannot read {}: {e}", dir.display()),
    };
    let newest = entries
        .filter_map(Result::ok)
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .max();
    let Some((_, path)) = newest else {
        bail!(
            "no output of task {task} is kept on this host ({})",
            dir.display()
        );
    };
    let file = OutputFile::open(&path).map_err(anyhow::Error::msg)?;
    let mut file = file.with_context(|| format!("{} went away", path.display()))?;
    let head = file.poll()?.bytes;
    let first = String::from_utf8_lossy(head.split(|b| *b == b'\n').next().unwrap_or_default())
        .into_owned();
    match kept::parse_record(&first) {
        Some(Record::Header { fire_id, .. }) => Ok(fire_id.to_string()),
        _ => bail!("{} is not a kept output of this release", path.display()),
    }
}

/// Refuses a fire id of another task.
fn check_task(task: &str, fire_id: &str) -> anyhow::Result<()> {
    if kept::task_of(fire_id) != task {
        bail!("{fire_id} is not a run of task {task} (a fire id starts with its task and @)");
    }
    Ok(())
}

/// `zkcron logs` in a cluster: this host's file when this node ran it, else the node's
/// endpoint.
pub async fn cluster(client: &ClusterClient, command: &LogsCommand) -> anyhow::Result<ExitCode> {
    let task = &command.task;
    // A run this host's node ran is read here, whatever the records say (its node may be
    // gone, and with it the records of a run it did not end).
    if let (Some(fire_id), Some(store)) = (&command.fire_id, &command.store) {
        check_task(task, fire_id)?;
        if let Some(file) = OutputFile::open(&store.path(fire_id)).map_err(anyhow::Error::msg)? {
            return print_file(file, command).await;
        }
    }
    // Two reads and one more for the node's member record, whatever the cluster's size.
    let history = client.history(task).await?;
    let record = client
        .get::<FireRecord>(&client.paths.record(task))
        .await?
        .map(|read| read.value);
    let (fire_id, node) = match locate(command, &history, record.as_ref())? {
        Some(found) => found,
        None => {
            super::defined_in_cluster(client, task).await?;
            bail!("task {task} has no recorded runs yet");
        }
    };
    let Some(node) = node else {
        bail!(
            "no record names the node that ran {fire_id}: it is not in task {task}'s history (it \
             did not end, or is older than the history_runs kept) nor in its fire record (a newer \
             tick was claimed since); if its node stopped before the run ended, its output stays \
             in that node's state dir: run `zkcron logs` on its host"
        );
    };
    if node == command.node_id
        && let Some(store) = &command.store
        && let Some(file) = OutputFile::open(&store.path(&fire_id)).map_err(anyhow::Error::msg)?
    {
        return print_file(file, command).await;
    }
    let member = client
        .get::<MemberRecord>(&client.paths.member(&node))
        .await?
        .map(|read| read.value);
    if let Some(why) = member.as_ref().and_then(loopback_elsewhere) {
        return stored_tail(
            history.iter().rev().find(|run| run.fire_id == fire_id),
            &why,
        );
    }
    let address = member.and_then(|member| member.http);
    let stored = history.iter().rev().find(|run| run.fire_id == fire_id);
    let Some(address) = address else {
        return stored_tail(
            stored,
            &format!("node {node}, which ran {fire_id}, is not live or serves no HTTP endpoint"),
        );
    };
    let token = token(command, &node)?;
    match request(&address, &fire_id, None, command.follow, &token).await {
        Ok((200, _, body)) => print_stream(body, command, &fire_id).await,
        Ok((status, _, body)) => {
            let message = error_of(body).await;
            stored_tail(
                stored,
                &format!("node {node} at {address} answered {status}: {message}"),
            )
        }
        Err(e) => stored_tail(
            stored,
            &format!("cannot reach node {node} at {address} ({e:#})"),
        ),
    }
}

/// The run `command` asks for, and the node that ran it as the records say (`None`: no record
/// names it); `None` when the task has no runs at all. The newest run is the fire record's
/// claimed tick while it is not in the history yet (it goes on), else the history's last.
fn locate(
    command: &LogsCommand,
    history: &[HistoryEntry],
    record: Option<&FireRecord>,
) -> anyhow::Result<Option<(String, Option<String>)>> {
    let task = &command.task;
    let claimed = record.and_then(|record| {
        let tick = record.tick.filter(|_| record.run)?;
        Some((
            format!("{task}@{}", tick.timestamp()),
            tick,
            record.node.clone(),
        ))
    });
    let in_history = |id: &str| history.iter().rev().find(|run| run.fire_id == id);
    if let Some(fire_id) = &command.fire_id {
        check_task(task, fire_id)?;
        let node = in_history(fire_id).map(|run| run.node.clone()).or_else(|| {
            let (id, _, node) = claimed.as_ref()?;
            (id == fire_id).then(|| node.clone())
        });
        return Ok(Some((fire_id.clone(), node)));
    }
    let last = history.last();
    Ok(match claimed {
        Some((id, tick, node))
            if in_history(&id).is_none() && last.is_none_or(|run| run.tick <= tick) =>
        {
            Some((id, Some(node)))
        }
        _ => last.map(|run| (run.fire_id.clone(), Some(run.node.clone()))),
    })
}

/// Prints a node's answer as it streams in.
async fn print_stream(
    body: impl Stream<Item = anyhow::Result<Bytes>>,
    command: &LogsCommand,
    fire_id: &str,
) -> anyhow::Result<ExitCode> {
    let mut printer = Printer::new(command.timestamps);
    let mut body = std::pin::pin!(body);
    while let Some(chunk) = body.next().await {
        printer.feed(&chunk.context("the node's answer broke off")?)?;
        if printer.gone {
            return Ok(ExitCode::SUCCESS);
        }
    }
    if printer.standing.is_none() && !command.follow {
        eprintln!("zkcron: run {fire_id} is still going (--follow streams it)");
    }
    Ok(ExitCode::SUCCESS)
}

/// The message of an error answer (`{"error": ...}`, else its text).
pub async fn error_of(body: impl Stream<Item = anyhow::Result<Bytes>>) -> String {
    let bytes: Vec<u8> = body
        .filter_map(|c| async move { c.ok() })
        .flat_map(|c| futures::stream::iter(c.to_vec()))
        .collect()
        .await;
    serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned())
}

/// Why a member's endpoint cannot be reached from here: it listens on loopback on another host.
fn loopback_elsewhere(member: &MemberRecord) -> Option<String> {
    let address: std::net::SocketAddr = member.http.as_deref()?.parse().ok()?;
    let here = nix::unistd::gethostname().ok()?;
    (address.ip().is_loopback() && here.to_string_lossy() != member.host).then(|| {
        format!(
            "node {} (host {}) serves HTTP on loopback only ({address}): other hosts cannot read \
             its runs' output; set [http] listen there to an address they reach",
            member.id, member.host
        )
    })
}

/// The token `zkcron logs` reads another node's output with.
fn token(command: &LogsCommand, node: &str) -> anyhow::Result<String> {
    let Some(path) = &command.token_file else {
        bail!(
            "run {} ran on node {node}: reading it over HTTP needs a token; set [http] \
             read_token_file in this host's zkcron.toml to a file holding the read token that \
             node accepts (the admin token is never sent), or run `zkcron logs` on its host",
            command.fire_id.as_deref().unwrap_or("(the newest)")
        );
    };
    crate::config::read_token(path, "token file").map_err(anyhow::Error::msg)
}

/// When the node that ran a run cannot be asked: the tail stored with its failure, or why
/// there is nothing.
fn stored_tail(stored: Option<&HistoryEntry>, why: &str) -> anyhow::Result<ExitCode> {
    match stored.and_then(|run| run.output_tail.as_ref().map(|tail| (run, tail))) {
        Some((run, tail)) => {
            eprintln!(
                "zkcron: {why}; the last lines stored with run {}'s failure follow (at most 4 KiB)",
                run.fire_id
            );
            super::emit(&format!("{tail}\n"))?;
            Ok(ExitCode::SUCCESS)
        }
        None => {
            bail!("{why}; its output stays in that node's state dir: run `zkcron logs` on its host")
        }
    }
}

/// A node's answer as it streams in.
pub type Body = std::pin::Pin<Box<dyn Stream<Item = anyhow::Result<Bytes>> + Send>>;

/// `GET /api/runs/<fire id>/output` of the endpoint at `address` (`host:port`): its status,
/// its `X-Zkcron-Run` and its body as it comes.
pub async fn request(
    address: &str,
    fire_id: &str,
    node: Option<&str>,
    follow: bool,
    token: &str,
) -> anyhow::Result<(u16, Option<String>, Body)> {
    use http_body_util::BodyExt;
    let stream = tokio::time::timeout(HTTP_DEADLINE, tokio::net::TcpStream::connect(address))
        .await
        .context("no answer within 10 s")??;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let mut path = format!("/api/runs/{}/output", percent(fire_id));
    let mut query = Vec::new();
    if let Some(node) = node {
        query.push(format!("node={}", percent(node)));
    }
    if follow {
        query.push("follow=1".to_string());
    }
    if !query.is_empty() {
        path = format!("{path}?{}", query.join("&"));
    }
    let request = hyper::Request::get(path)
        .header(hyper::header::HOST, address)
        .header(hyper::header::AUTHORIZATION, format!("Bearer {token}"))
        .body(http_body_util::Empty::<Bytes>::new())?;
    let response = tokio::time::timeout(HTTP_DEADLINE, sender.send_request(request))
        .await
        .context("no answer within 10 s")??;
    let status = response.status().as_u16();
    let standing = response
        .headers()
        .get(kept::RUN_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body: Body = Box::pin(
        response
            .into_body()
            .into_data_stream()
            .map(|chunk| chunk.map_err(anyhow::Error::from)),
    );
    Ok((status, standing, body))
}

/// `text` as one percent-encoded path segment or query value (unreserved bytes as they are).
pub fn percent(text: &str) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}
