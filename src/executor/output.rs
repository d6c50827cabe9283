//! An attempt's output: read line by line from both pipes, cut at [`MAX_LINE_BYTES`], logged
//! within the attempt's [`OutputBudget`] (head as it comes, tail when it ends), drained for at
//! most [`OUTPUT_DRAIN_LIMIT`] after the main process exits.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::task::JoinHandle;
use tracing::instrument::WithSubscriber;

use super::kept::KeptOutput;
use super::{MAX_LINE_BYTES, OUTPUT_DRAIN_LIMIT, OUTPUT_TAIL_BYTES, RunRequest};

/// Waits up to [`OUTPUT_DRAIN_LIMIT`] for the reader to reach end of file on both pipes, then
/// leaves it running on its own.
pub(super) async fn drain_output(reader: JoinHandle<()>, task: &str, fire_id: &str) {
    let all = async {
        if let Err(e) = reader.await {
            tracing::warn!(task = %task, fire_id = %fire_id, "an output reader failed: {e}");
        }
    };
    if tokio::time::timeout(OUTPUT_DRAIN_LIMIT, all).await.is_err() {
        tracing::debug!(
            task = %task,
            fire_id = %fire_id,
            "output still open after the process exited (a background process holds it); \
             it keeps being logged until it closes"
        );
    }
}

/// How long a run's end waits for the last lines of its output (the pipes' end of file), so
/// that the tail stored with its result has them. A background process that holds the pipes
/// open delays the end by no more than this.
const TAIL_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// The last lines of a failed attempt's output once its pipes closed (at most [`TAIL_WAIT`]
/// later); nothing for a success, whose tail is not stored and which does not wait.
pub(super) async fn output_tail(budget: Option<&OutputBudget>, failed: bool) -> String {
    let Some(budget) = budget.filter(|_| failed) else {
        return String::new();
    };
    let _ = tokio::time::timeout(TAIL_WAIT, budget.closed()).await;
    budget.output_tail()
}

/// `tail` as it is stored with a failed run's result: terminal escape sequences (colours,
/// cursor moves) and other control characters but tab and line feed left out, so that its 4 KiB
/// are text (in JSON, `\u001b` alone takes 6 bytes).
pub fn printable_tail(tail: &str) -> String {
    let mut out = String::with_capacity(tail.len());
    let mut chars = tail.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            // CSI: ESC [ parameters, then a final byte in @..~.
            '\u{1b}' if chars.peek() == Some(&'[') => {
                chars.next();
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            '\n' | '\t' => out.push(c),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// How many lines of one attempt's output are logged: stdout and stderr draw from one budget of
/// [`RunRequest::output_lines`]. The first half of it (rounded down) is logged as the lines
/// arrive; of the lines after those, the latest are kept, so that when the output ends the last
/// of them (where a failing job says why) are logged too, in the order they were read. What is
/// not kept is counted, and the reader that closes last says how much, between the head and the
/// tail. The pipes are read to their end whatever the budget, so the child never blocks on a
/// full pipe.
///
/// The tail is kept per stream and shared out when the output ends: each stream gets up to half
/// of it, and what one leaves unused goes to the other. The order between two pipes is only the
/// order in which their readers got to the lines, and a reader still working through a flood of
/// stdout would otherwise push out the stderr line that was written after it. Each stream holds
/// at most the tail's size in lines of at most [`MAX_LINE_BYTES`].
#[derive(Debug)]
pub(super) struct OutputBudget {
    task: String,
    fire_id: String,
    attempt: u32,
    limit: usize,
    /// Lines logged as they arrive.
    head: usize,
    /// Lines logged when the output ends.
    tail: usize,
    state: std::sync::Mutex<BudgetState>,
    /// Where every line is also kept, when the run's output is kept on disk.
    kept: Option<std::sync::Arc<KeptOutput>>,
    /// The streams not yet at end of file, for [`OutputBudget::closed`].
    open: tokio::sync::watch::Sender<usize>,
}

#[derive(Debug)]
struct BudgetState {
    logged: usize,
    /// Lines read so far, past the head: the order of the tail.
    read: u64,
    /// The latest lines of stdout and of stderr past the head, each at most `tail` long.
    tails: [std::collections::VecDeque<TailLine>; 2],
    left_out_lines: u64,
    left_out_bytes: u64,
    /// Streams not yet at end of file.
    open: usize,
    /// The last lines of the output, both streams, at most [`OUTPUT_TAIL_BYTES`] of text in
    /// all: stored with the run's result, and given to its `on_failure` hook.
    last: Option<std::collections::VecDeque<String>>,
    last_bytes: usize,
}

/// A line past the head of the output, kept until the output ends.
#[derive(Debug)]
struct TailLine {
    /// Its place in the order of reading.
    read: u64,
    stream: &'static str,
    text: String,
    /// What the line took in the stream, line ending included.
    bytes: usize,
}

impl OutputBudget {
    /// A budget for attempt `attempt` of `request`, whose streams are open as `open` says.
    pub(super) fn new(
        request: &RunRequest,
        attempt: u32,
        open: [bool; 2],
        kept: Option<std::sync::Arc<KeptOutput>>,
    ) -> OutputBudget {
        let limit = request.output_lines;
        let head = limit / 2;
        let streams = open.iter().filter(|o| **o).count();
        OutputBudget {
            task: request.task.clone(),
            fire_id: request.fire_id.clone(),
            attempt,
            limit,
            head,
            tail: limit - head,
            state: std::sync::Mutex::new(BudgetState {
                logged: 0,
                read: 0,
                tails: Default::default(),
                left_out_lines: 0,
                left_out_bytes: 0,
                open: streams,
                last: Some(Default::default()),
                last_bytes: 0,
            }),
            kept,
            open: tokio::sync::watch::Sender::new(streams),
        }
    }

    /// Returns once both streams reached their end.
    pub(super) async fn closed(&self) {
        let _ = self.open.subscribe().wait_for(|open| *open == 0).await;
    }

    /// Takes a line of `stream` that took `bytes` of it: logs it if the head has room, else
    /// keeps it for the tail, counting the line of that stream it pushes out (if any) as left
    /// out.
    fn line(&self, stream: &'static str, text: &str, bytes: usize) {
        if let Some(kept) = &self.kept {
            kept.line(stream, text);
        }
        {
            let mut state = self.state.lock().expect("output budget poisoned");
            state.keep_last(text);
            if state.logged >= self.head {
                let read = state.read;
                state.read += 1;
                let tail = &mut state.tails[usize::from(stream == "stderr")];
                tail.push_back(TailLine {
                    read,
                    stream,
                    text: text.to_owned(),
                    bytes,
                });
                let out = (tail.len() > self.tail).then(|| tail.pop_front()).flatten();
                if let Some(out) = out {
                    state.left_out_lines += 1;
                    state.left_out_bytes += out.bytes as u64;
                }
                return;
            }
            state.logged += 1;
        }
        self.log(stream, text);
    }

    /// The last lines of the output read so far, joined by newlines, at most
    /// [`OUTPUT_TAIL_BYTES`] (the oldest line cut at its start when needed); empty when not kept.
    pub(super) fn output_tail(&self) -> String {
        let state = self.state.lock().expect("output budget poisoned");
        let Some(last) = &state.last else {
            return String::new();
        };
        let joined = last
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join("\n");
        let mut start = joined.len().saturating_sub(OUTPUT_TAIL_BYTES);
        while !joined.is_char_boundary(start) {
            start += 1;
        }
        joined[start..].to_string()
    }

    /// Logs one line of the job's output.
    fn log(&self, stream: &'static str, text: &str) {
        tracing::info!(target: "zkcron::job", task = %self.task, fire_id = %self.fire_id, stream, "{text}");
    }

    /// One stream reached its end (or failed); after the last, says what was left out and logs
    /// the tail.
    fn close(&self) {
        let (tails, mut lines, mut bytes) = {
            let mut state = self.state.lock().expect("output budget poisoned");
            state.open = state.open.saturating_sub(1);
            self.open.send_replace(state.open);
            if state.open > 0 {
                return;
            }
            (
                std::mem::take(&mut state.tails),
                state.left_out_lines,
                state.left_out_bytes,
            )
        };
        let [stdout, stderr] = tails;
        // Each stream gets up to half the tail (stderr the larger half), and the rest if the
        // other needs less.
        let keep_stdout = stdout
            .len()
            .min((self.tail / 2).max(self.tail.saturating_sub(stderr.len())));
        let keep_stderr = stderr.len().min(self.tail - keep_stdout);
        let mut tail = Vec::with_capacity(keep_stdout + keep_stderr);
        for (lines_of_stream, keep) in [(stdout, keep_stdout), (stderr, keep_stderr)] {
            let skip = lines_of_stream.len() - keep;
            for (i, line) in lines_of_stream.into_iter().enumerate() {
                if i < skip {
                    lines += 1;
                    bytes += line.bytes as u64;
                } else {
                    tail.push(line);
                }
            }
        }
        tail.sort_unstable_by_key(|line| line.read);
        if lines > 0 {
            tracing::info!(
                task = %self.task,
                fire_id = %self.fire_id,
                attempt = self.attempt,
                job_output_lines = self.limit,
                lines_left_out = lines,
                bytes_left_out = bytes,
                tail_lines = tail.len(),
                "output not logged past [log] job_output_lines; the last tail_lines lines follow"
            );
        }
        for line in tail {
            self.log(line.stream, &line.text);
        }
    }
}

impl BudgetState {
    /// Keeps `text` among the last lines, if they are kept, dropping the oldest beyond
    /// [`OUTPUT_TAIL_BYTES`]: at most that much text (plus the one line being added) is held.
    fn keep_last(&mut self, text: &str) {
        let Some(last) = &mut self.last else { return };
        last.push_back(text.to_owned());
        self.last_bytes += text.len() + 1;
        while self.last_bytes > OUTPUT_TAIL_BYTES + 1 && last.len() > 1 {
            let out = last.pop_front().expect("more than one line");
            self.last_bytes -= out.len() + 1;
        }
    }
}

/// Logs both output streams line by line, within `budget`, on one task (one per attempt, not
/// one per stream: a task costs a spawn and wake-ups on every fire), which carries the caller's
/// tracing subscriber. The two streams are read concurrently, each to its end.
pub(super) fn spawn_output_reader<O, E>(
    stdout: Option<O>,
    stderr: Option<E>,
    request: &RunRequest,
    budget: std::sync::Arc<OutputBudget>,
) -> JoinHandle<()>
where
    O: AsyncRead + Unpin + Send + 'static,
    E: AsyncRead + Unpin + Send + 'static,
{
    let task = request.task.clone();
    let fire_id = request.fire_id.clone();
    tokio::spawn(
        async move {
            if let Some(kept) = &budget.kept {
                // Written at once: a run that has printed nothing yet has its file (and lock).
                kept.attempt(budget.attempt);
                kept.flush();
            }
            let (budget, task, fire_id) = (&budget, &task, &fire_id);
            tokio::join!(
                read_stream(stdout, "stdout", budget, task, fire_id),
                read_stream(stderr, "stderr", budget, task, fire_id)
            );
        }
        .with_current_subscriber(),
    )
}

/// Logs one stream, if it is open, to its end within `budget`, then closes it in the budget.
async fn read_stream<R: AsyncRead + Unpin>(
    reader: Option<R>,
    stream: &'static str,
    budget: &OutputBudget,
    task: &str,
    fire_id: &str,
) {
    let Some(reader) = reader else { return };
    let log = |line: &str, bytes: usize| budget.line(stream, line, bytes);
    // What one read brought is written to the kept output at once, in one write.
    let read = || {
        if let Some(kept) = &budget.kept {
            kept.flush();
        }
    };
    if let Err(e) = for_each_line(reader, READ_BYTES, MAX_LINE_BYTES, log, read).await {
        tracing::warn!(task = %task, fire_id = %fire_id, stream, "cannot read output: {e}");
    }
    budget.close();
}

/// How much of a pipe one read takes at most (a pipe holds 64 KiB).
const READ_BYTES: usize = 8192;

/// Calls `emit` with every line of `reader`, read `read_bytes` at a time at most, without its
/// line ending, and the number of bytes the line took in the stream (line ending included), and
/// `read` after the lines of each read (and at the end, after the last line's). A
/// line longer than `max_bytes` is cut to that many bytes (less when the cut would split a
/// UTF-8 character) and gets a " …[cut N bytes]" marker; at most `max_bytes` of a line are ever
/// held. Invalid UTF-8 is replaced.
///
/// The reads go into a buffer that is allocated and never zeroed (`read_buf` fills its spare
/// capacity), where tokio's `BufReader` zeroes its whole buffer first: two of them cost a
/// 16 KiB `memset` on every run, most of whose output is empty.
pub(super) async fn for_each_line<R, F, G>(
    mut reader: R,
    read_bytes: usize,
    max_bytes: usize,
    mut emit: F,
    mut read: G,
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    F: FnMut(&str, usize),
    G: FnMut(),
{
    let mut buffer: Vec<u8> = Vec::with_capacity(read_bytes);
    let mut line: Vec<u8> = Vec::new();
    let mut cut: usize = 0;
    let mut raw: usize = 0;
    let mut pending = false;
    loop {
        buffer.clear();
        if reader.read_buf(&mut buffer).await? == 0 {
            if pending {
                emit_line(&mut line, &mut cut, &mut raw, &mut emit);
            }
            read();
            return Ok(());
        }
        let mut rest = buffer.as_slice();
        while !rest.is_empty() {
            let (chunk, consumed, complete) = match rest.iter().position(|b| *b == b'\n') {
                Some(end) => (&rest[..end], end + 1, true),
                None => (rest, rest.len(), false),
            };
            let room = max_bytes.saturating_sub(line.len());
            let kept = chunk.len().min(room);
            line.extend_from_slice(&chunk[..kept]);
            cut += chunk.len() - kept;
            raw += consumed;
            rest = &rest[consumed..];
            pending = true;
            if complete {
                emit_line(&mut line, &mut cut, &mut raw, &mut emit);
                pending = false;
            }
        }
        read();
    }
}

fn emit_line(
    line: &mut Vec<u8>,
    cut: &mut usize,
    raw: &mut usize,
    emit: &mut impl FnMut(&str, usize),
) {
    if *cut == 0 {
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        emit(&String::from_utf8_lossy(line), *raw);
    } else {
        // Do not show half a character at the cut.
        if let Err(e) = std::str::from_utf8(line)
            && e.error_len().is_none()
        {
            *cut += line.len() - e.valid_up_to();
            line.truncate(e.valid_up_to());
        }
        emit(
            &format!("{} …[cut {cut} bytes]", String::from_utf8_lossy(line)),
            *raw,
        );
    }
    line.clear();
    *cut = 0;
    *raw = 0;
}
