//! `fxtrace record` as a `perf record` user expects it, through the binary: a command without
//! `--`, the message for a command that links no provider, the category filter in the banner
//! and the summary, and clear messages for arguments that make no sense.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};

use support::probe;

fn fxtrace() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fxtrace"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn record(dir: &Path, args: &[&str]) -> Output {
    fxtrace()
        .current_dir(dir)
        .arg("record")
        .args(args)
        .output()
        .expect("run fxtrace record")
}

#[test]
fn a_command_without_double_dash_is_traced_with_its_own_options() {
    let dir = tempfile::tempdir().unwrap();
    // `-o` before the command is record's; `-n` after it is the command's, as with perf.
    let out = record(dir.path(), &["-o", "t.fxt", "echo", "-n", "hello"]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(text(&out.stdout), "hello", "echo got -n: {err}");
    assert!(dir.path().join("t.fxt").exists(), "{err}");
    // `--` still works, and the command's exit status is still fxtrace's.
    let out = record(dir.path(), &["-o", "u.fxt", "--", "sh", "-c", "exit 3"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
}

#[test]
fn an_uninstrumented_command_is_told_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let out = record(dir.path(), &["true"]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(
            "no provider connected: the command does not link fxtrace; use --preload to trace \
             it unmodified, or --system-wide for its context switches"
        ),
        "{err}"
    );
    // Without a command nobody was expected: the plain note.
    let out = record(dir.path(), &["--duration", "0.2"]);
    let err = text(&out.stderr);
    assert!(err.contains("(no provider connected)"), "{err}");
    assert!(!err.contains("does not link fxtrace"), "{err}");
}

#[test]
fn meaningless_arguments_get_a_clear_message_and_start_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for (args, expected) in [
        (
            &["--duration", "-1", "true"][..],
            "--duration must be positive",
        ),
        (&["--duration=-1", "true"], "--duration must be positive"),
        (
            &["--stop-timeout", "-2", "true"],
            "--stop-timeout must be positive",
        ),
        (&["-b", "abc", "true"], "-b \"abc\": not a size"),
        (&["-b", "4X", "true"], "not a size: unknown suffix 'X'"),
        (
            &["--no-lbr", "true"],
            "--no-lbr applies to --system-wide (-a) only",
        ),
        (
            &["--lbr-period", "5000", "true"],
            "--lbr-period applies to --system-wide (-a) only",
        ),
    ] {
        let out = record(dir.path(), args);
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {expected:?} in {err}");
        assert!(!err.contains("tip:"), "no clap tip for {args:?}: {err}");
    }
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "no trace written for refused arguments"
    );
}

#[test]
fn the_category_filter_is_shown_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let probe = probe();
    let out = fxtrace()
        .current_dir(dir.path())
        .args(["record", "-c", "nothing", "--"])
        .arg(&probe)
        .args(["--events", "10"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("categories: nothing;"), "banner: {err}");
    assert!(
        err.contains("categories enabled: nothing"),
        "summary: {err}"
    );
    // The probe declares no categories: the check says it could not be made.
    assert!(err.contains("declared no categories"), "{err}");
    // Without -c: all, and no note.
    let out = fxtrace()
        .current_dir(dir.path())
        .args(["record", "--"])
        .arg(&probe)
        .args(["--events", "10"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(err.contains("categories: all;"), "banner: {err}");
    assert!(!err.contains("categories enabled"), "{err}");
    assert!(!err.contains("declared no categories"), "{err}");
}

#[test]
fn stats_shows_the_records_each_provider_dropped() {
    let dir = tempfile::tempdir().unwrap();
    // 4 KiB in oneshot mode cannot hold 5000 events: the probe drops most of them.
    let out = fxtrace()
        .current_dir(dir.path())
        .args(["record", "-m", "oneshot", "-b", "4K", "-o", "t.fxt", "--"])
        .arg(probe())
        .args(["--events", "5000"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    let row = err
        .lines()
        .find(|l| l.contains(" probe ") && l.contains("oneshot"))
        .unwrap_or_else(|| panic!("the probe's row in {err}"));
    let dropped: u64 = row.split_whitespace().nth(5).unwrap().parse().unwrap();
    assert!(dropped > 0, "{row}");
    let stats = fxtrace()
        .current_dir(dir.path())
        .args(["stats", "t.fxt"])
        .output()
        .unwrap();
    let stdout = text(&stats.stdout);
    assert!(stats.status.success(), "{stdout}");
    let line = stdout
        .lines()
        .find(|l| l.contains("\"probe\""))
        .unwrap_or_else(|| panic!("the probe in {stdout}"));
    assert!(
        line.ends_with(&format!("{dropped} records dropped")),
        "{line}\n{err}"
    );
    assert!(
        stdout.contains(&format!("records dropped while tracing: {dropped}\n")),
        "{stdout}"
    );
    // The drop marker is on a thread of the probe's process named "fxtrace" (it was on an
    // unnamed thread 0), in the Chrome JSON too.
    let converted = fxtrace()
        .current_dir(dir.path())
        .args(["convert", "--to", "chrome-json", "-o", "t.json", "t.fxt"])
        .output()
        .unwrap();
    assert!(converted.status.success(), "{}", text(&converted.stderr));
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("t.json")).unwrap()).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    let marker = events
        .iter()
        .find(|e| e["name"] == format!("fxtrace: {dropped} records dropped").as_str())
        .unwrap_or_else(|| panic!("no drop marker in {json}"));
    let (pid, tid) = (&marker["pid"], &marker["tid"]);
    let probe = events.iter().find(|e| e["cat"] == "probe").unwrap();
    assert_eq!(pid, &probe["pid"], "on the probe's process: {marker}");
    // At the manager's tick rate: within seconds of the probe's events (microseconds).
    let apart = marker["ts"].as_f64().unwrap() - probe["ts"].as_f64().unwrap();
    assert!((0.0..60e6).contains(&apart), "{marker} vs {probe}");
    let named = events.iter().any(|e| {
        e["ph"] == "M"
            && e["name"] == "thread_name"
            && (&e["pid"], &e["tid"]) == (pid, tid)
            && e["args"]["name"] == "fxtrace"
    });
    assert!(
        named && tid != 0,
        "the marker's thread is named fxtrace: {marker}"
    );
}

#[test]
fn status_asks_an_older_manager_again_without_figures() {
    use fxtrace::protocol::control::{FrameMessage, SessionState};
    use fxtrace_tools::manager::wire::{Frame, StatusReply};
    use std::io::{Read, Write};
    use std::os::unix::net::UnixListener;

    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("old.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    // A manager of control revision 2: it hangs up on a controller frame (a trace service's
    // status request) and on a StatusRequest with trailing bytes, and answers a plain one with
    // a reply without figures.
    let old_manager = std::thread::spawn(move || {
        let mut requests = Vec::new();
        for stream in listener.incoming().take(3) {
            let mut stream = stream.unwrap();
            let mut prefix = [0u8; 4];
            stream.read_exact(&mut prefix).unwrap();
            let mut body = vec![0u8; u32::from_le_bytes(prefix) as usize];
            stream.read_exact(&mut body).unwrap();
            requests.push(body.len());
            if body.len() == 4 {
                let reply = Frame::StatusReply(Box::new(StatusReply {
                    state: SessionState::Started,
                    providers: vec![],
                    categories: vec![],
                    figures: None,
                }));
                stream.write_all(&reply.encode().unwrap()).unwrap();
            }
        }
        requests
    });
    let out = fxtrace()
        .args(["status", "--socket"])
        .arg(&socket)
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains(": STARTED"), "{stdout}");
    assert!(stdout.contains("an older fxtrace"), "{stdout}");
    // The service's status first (24 bytes: `{"op":"status"}` in a controller frame), then
    // the session's with the features word, then without.
    assert_eq!(old_manager.join().unwrap(), [24, 8, 4]);
}

/// Runs `fxtrace record ARGS` with standard error on a new pseudo-terminal (100 columns);
/// returns everything written to it.
fn record_on_a_terminal(dir: &Path, args: &[&str]) -> String {
    use std::io::Read;
    let size = nix::pty::Winsize {
        ws_row: 24,
        ws_col: 100,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = nix::pty::openpty(Some(&size), None).unwrap();
    let mut child = fxtrace()
        .current_dir(dir)
        .arg("record")
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(pty.slave)
        .spawn()
        .unwrap();
    let mut master = std::fs::File::from(pty.master);
    let mut bytes = Vec::new();
    // Read until every copy of the slave is closed (EIO).
    let _ = master.read_to_end(&mut bytes);
    assert!(child.wait().unwrap().success(), "{}", text(&bytes));
    text(&bytes)
}

#[test]
fn a_status_line_is_drawn_on_a_terminal_only() {
    let dir = tempfile::tempdir().unwrap();
    let tty = record_on_a_terminal(dir.path(), &["--duration", "2.6", "-o", "t.fxt"]);
    // About once a second: at 1 s and 2 s, then cleared before the summary.
    let lines: Vec<&str> = tty
        .split(['\r', '\n'])
        .filter(|l| l.contains("fxtrace 0:0"))
        .collect();
    assert!(lines.len() >= 2, "{tty:?}");
    for l in &lines {
        assert!(
            l.contains(" | 0 providers | 2 records, 264 B to t.fxt | 0 B buffered | 0 dropped"),
            "{l:?}"
        );
    }
    let last_line = tty.rfind("fxtrace 0:0").unwrap();
    let summary = tty.find("trace written to t.fxt").unwrap();
    let clear = tty[last_line..].find("\x1b[2K").map(|i| last_line + i);
    assert!(
        clear.is_some_and(|c| c < summary),
        "the line is cleared before the summary: {tty:?}"
    );
    // Not a terminal: no status line, no escape sequence.
    let out = record(dir.path(), &["--duration", "1.6", "-o", "u.fxt"]);
    let err = text(&out.stderr);
    assert!(
        !err.contains("fxtrace 0:0") && !err.contains('\x1b'),
        "{err:?}"
    );
}

#[test]
fn the_streaming_drop_hint_matches_the_mode() {
    let dir = tempfile::tempdir().unwrap();
    let out = fxtrace()
        .current_dir(dir.path())
        .args(["record", "-m", "streaming", "-b", "4K", "-o", "t.fxt", "--"])
        .arg(probe())
        .args(["--events", "100000", "--threads", "2"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    // Each half of a 4 KiB buffer holds a few dozen events, filled in microseconds by each
    // of two writers: no manager saves halves that fast, so there are always drops.
    let line = err
        .lines()
        .find(|l| l.contains(" records dropped ("))
        .unwrap_or_else(|| panic!("nothing dropped with 4 KiB streaming buffers: {err}"));
    assert!(
        line.contains("(streaming: the provider filled both halves of its buffer")
            && line.contains(" buffers saved, copied at ")
            && line.ends_with("a larger -b gives the manager time to keep up)"),
        "{line}"
    );
    assert!(!line.contains("-m streaming"), "{line}");
}
