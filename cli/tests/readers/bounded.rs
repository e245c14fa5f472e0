//! Every reader streams: refuses a non-FXT (non-XRay) input after its first word (header),
//! reads a FIFO as a stream, keeps its memory bounded on a large trace, never panics on a
//! closed stderr, and leaves no partial output behind (issue 13, "Readers").

use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const FXTRACE: &str = env!("CARGO_BIN_EXE_fxtrace");

/// The FXT magic number record.
const MAGIC: u64 = 0x0016_5478_4604_0010;
/// An initialization record (type 1, 2 words) and its ticks per second.
const INIT: [u64; 2] = [0x21, 1_000_000_000];

pub(crate) fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fxtrace-readers-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// How a child ended: status, peak RSS (KiB), stderr.
pub(crate) struct Run {
    pub(crate) status: ExitStatus,
    pub(crate) max_rss_kib: i64,
    pub(crate) stderr: String,
}

/// Runs `fxtrace ARGS`, killing it after `limit`; `None` when it had to be killed.
// The child is reaped by `wait4` (for its rusage), which clippy does not see.
#[allow(clippy::zombie_processes)]
pub(crate) fn run_limited(args: &[&str], limit: Duration) -> Option<Run> {
    // A directory of each call's own: `temp_dir` empties the one it names, and the tests run
    // at once (a shared one lost a running child's stderr to another test's call).
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    // ATOMICS: `Relaxed`: a counter naming directories, nothing published through it.
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let err_path = temp_dir(&format!("stderr-{call}")).join("stderr");
    let child = Command::new(FXTRACE)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let until = Instant::now() + limit;
    // The child's own peak, read from /proc while it runs: `wait4`'s `ru_maxrss` also counts
    // the address space it was spawned in (this test process's, shared until its exec), so
    // it is used only when the child ended before a first look.
    let mut polled_kib = 0;
    loop {
        if let Some(kib) = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
            })
        {
            polled_kib = polled_kib.max(kib);
        }
        let mut status = 0;
        // SAFETY: `rusage` is a plain C struct for which all-zero bytes are valid.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: wait4 writes an int and a rusage through pointers to live locals.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
            let _ = std::fs::remove_dir_all(err_path.parent().unwrap());
            return Some(Run {
                status: ExitStatus::from_raw(status),
                max_rss_kib: if polled_kib > 0 {
                    polled_kib
                } else {
                    usage.ru_maxrss
                },
                stderr,
            });
        }
        if Instant::now() >= until {
            // SAFETY: kill and waitpid on our own child's pid.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Runs `fxtrace ARGS` (at most 120 s) and checks that it peaked below `max_kib`.
pub(crate) fn run_within_memory(args: &[&str], max_kib: i64) -> Run {
    let run = run_limited(args, Duration::from_secs(120))
        .unwrap_or_else(|| panic!("fxtrace {args:?} did not finish in 120 s"));
    assert!(
        run.max_rss_kib < max_kib,
        "fxtrace {args:?} peaked at {} KiB",
        run.max_rss_kib
    );
    println!("fxtrace {args:?}: {} KiB", run.max_rss_kib);
    run
}

/// Appends a string record of index 1 holding 32 000 bytes (`A`): the longest a record holds.
fn push_long_string(words: &mut Vec<u64>) {
    words.push(2 | (1 + 4000) << 4 | 1 << 16 | 32_000 << 32);
    words.extend(std::iter::repeat(u64::from_le_bytes([b'A'; 8])).take(4000));
}

/// Writes `words` to `path` in this machine's byte order.
fn write_words(path: &Path, words: &[u64]) {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    std::fs::write(path, bytes).unwrap();
}

/// An XRay log header: `version`, FDR (`fdr`) or basic mode, 1 GHz.
fn xray_header(version: u16, fdr: bool) -> Vec<u8> {
    let mut h = Vec::with_capacity(32);
    h.extend_from_slice(&version.to_le_bytes());
    h.extend_from_slice(&u16::from(fdr).to_le_bytes());
    h.extend_from_slice(&3u32.to_le_bytes()); // constant and non-stop TSC
    h.extend_from_slice(&1_000_000_000u64.to_le_bytes());
    h.extend_from_slice(&[0; 16]);
    h
}

/// A 16-byte FDR metadata record of `kind`, `data` after its first byte.
fn fdr_metadata(kind: u8, data: &[u8]) -> Vec<u8> {
    let mut r = vec![0u8; 16];
    r[0] = kind << 1 | 1;
    r[1..1 + data.len()].copy_from_slice(data);
    r
}

/// An FDR (version 5) log of `mib` MiB: thread 7 of process 9, buffers of 1 MiB, each of
/// function 1..=64 entries and exits (8 bytes each).
fn write_fdr_log(path: &Path, mib: usize) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    f.write_all(&xray_header(5, true)).unwrap();
    let head = [
        fdr_metadata(0, &7u32.to_le_bytes()),
        fdr_metadata(
            4,
            &[1i64.to_le_bytes().as_slice(), &0u32.to_le_bytes()].concat(),
        ),
        fdr_metadata(9, &9u32.to_le_bytes()),
        fdr_metadata(
            2,
            &[0u16.to_le_bytes().as_slice(), &1_000u64.to_le_bytes()].concat(),
        ),
    ]
    .concat();
    let functions = ((1 << 20) - head.len()) / 8;
    for buffer in 0..mib {
        let records = functions * 8 + head.len();
        f.write_all(&fdr_metadata(7, &(records as u64).to_le_bytes()))
            .unwrap();
        let mut wall = head.clone();
        wall[16 + 1..16 + 9].copy_from_slice(&(1 + buffer as i64).to_le_bytes());
        f.write_all(&wall).unwrap();
        for i in 0..functions {
            let (action, func) = (i as u32 % 2, 1 + (i as u32 / 2) % 64);
            let word = action << 1 | func << 4;
            f.write_all(&word.to_le_bytes()).unwrap();
            f.write_all(&10u32.to_le_bytes()).unwrap();
        }
    }
    f.flush().unwrap();
}

/// A basic-mode (version 3) log of `mib` MiB: 32-byte entry and exit records of threads 7
/// and 8, interleaved.
fn write_basic_log(path: &Path, mib: usize) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    f.write_all(&xray_header(3, false)).unwrap();
    for i in 0..(mib << 20) / 32 {
        let mut r = [0u8; 32];
        r[3] = (i / 2 % 2) as u8; // entry, exit
        r[4..8].copy_from_slice(&(1 + (i as i32 / 4) % 64).to_le_bytes());
        r[8..16].copy_from_slice(&(1_000 + i as u64).to_le_bytes());
        r[16..20].copy_from_slice(&(7 + i as u32 % 2).to_le_bytes());
        r[20..24].copy_from_slice(&9u32.to_le_bytes());
        f.write_all(&r).unwrap();
    }
    f.flush().unwrap();
}

/// `import-xray` reads a large log twice (the log mapped, pages released as it goes) and
/// keeps none of its events: a 12 MiB FDR log and a 20 MiB basic-mode log, from a file and
/// from a FIFO, stay under 40 MiB. (Holding the events, 24 MiB logs peaked at 212 MB and
/// 77 MB: about eight and two times the log, the log itself again on top.)
#[test]
fn import_xray_of_a_large_log_stays_in_bounded_memory() {
    let dir = temp_dir("xray-large");
    let fdr = dir.join("xray-log.fdr.a1B2c3");
    write_fdr_log(&fdr, 12);
    let run = run_within_memory(
        &["import-xray", fdr.to_str().unwrap(), "-o", "-"],
        40 * 1024,
    );
    assert!(run.status.success(), "{}", run.stderr);
    assert!(run.stderr.contains("1 threads"), "{}", run.stderr);
    let basic = dir.join("xray-log.basic.a1B2c3");
    write_basic_log(&basic, 20);
    let run = run_within_memory(
        &["import-xray", basic.to_str().unwrap(), "-o", "-"],
        40 * 1024,
    );
    assert!(run.status.success(), "{}", run.stderr);
    assert!(run.stderr.contains("2 threads"), "{}", run.stderr);
    // From a FIFO: copied to a temporary file, then read the same way.
    let fifo = dir.join("fifo.xray");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let writer = {
        let (fifo, basic) = (fifo.clone(), basic.clone());
        std::thread::spawn(move || {
            let mut out = std::fs::OpenOptions::new().write(true).open(fifo).unwrap();
            let _ = std::io::copy(&mut std::fs::File::open(basic).unwrap(), &mut out);
        })
    };
    let run = run_within_memory(
        &["import-xray", fifo.to_str().unwrap(), "-o", "-"],
        40 * 1024,
    );
    writer.join().unwrap();
    assert!(run.status.success(), "{}", run.stderr);
    assert!(run.stderr.contains("2 threads"), "{}", run.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every reader of FXT traces, reading `file` (a converter writes into `out`): the one list
/// the bounded-memory tests loop over.
fn readers(file: &str, out: &Path) -> Vec<Vec<String>> {
    let json = out.join("out.json").to_str().unwrap().to_owned();
    [
        vec!["stats", file],
        vec!["dump", file],
        vec!["dump", "--json", file],
        vec!["dump", "--relative", "--name", "x*", file],
        vec!["check", file],
        vec!["report", "lbr", file],
        vec!["report", "spans", file],
        vec!["report", "sched", file],
        vec!["report", "waits", file],
        vec!["report", "samples", file],
        vec!["convert", "--to", "chrome-json", file, "-o", &json],
    ]
    .into_iter()
    .map(|args| args.into_iter().map(str::to_owned).collect())
    .collect()
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

#[test]
fn every_reader_refuses_dev_zero_after_its_first_word() {
    let out = temp_dir("zero");
    let fxt = out.join("zero.fxt");
    let mut cases = readers("/dev/zero", &out);
    for importer in ["import-xray", "import-perf"] {
        cases.push(
            [importer, "/dev/zero", "-o", fxt.to_str().unwrap()]
                .map(str::to_owned)
                .to_vec(),
        );
    }
    for args in &cases {
        let args = strs(args);
        let run = run_limited(&args, Duration::from_secs(20))
            .unwrap_or_else(|| panic!("fxtrace {args:?} still reading /dev/zero after 20 s"));
        assert!(!run.status.success(), "fxtrace {args:?} accepted /dev/zero");
        assert!(
            run.max_rss_kib < 64 * 1024,
            "fxtrace {args:?} peaked at {} KiB on /dev/zero",
            run.max_rss_kib
        );
        if args[0] != "check" {
            assert!(
                run.stderr.contains("not an FXT trace") || run.stderr.contains("/dev/zero:"),
                "fxtrace {args:?}: {}",
                run.stderr
            );
        }
    }
    // Neither converter left a (partial) output behind.
    let left: Vec<_> = std::fs::read_dir(&out).unwrap().collect();
    assert!(left.is_empty(), "outputs left behind: {left:?}");
}

fn write_trace(path: &Path, records: usize) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    f.write_all(&MAGIC.to_ne_bytes()).unwrap();
    for _ in 0..records {
        for w in INIT {
            f.write_all(&w.to_ne_bytes()).unwrap();
        }
    }
    f.flush().unwrap();
}

#[test]
fn stats_of_a_large_trace_stays_in_bounded_memory() {
    let dir = temp_dir("large");
    let path = dir.join("large.fxt");
    // 96 MiB: a reader that loads the file whole peaks above 96 MiB.
    let records = 96 * 1024 * 1024 / 16;
    write_trace(&path, records);
    let run = run_limited(&["stats", path.to_str().unwrap()], Duration::from_secs(300))
        .expect("stats of 96 MiB finished within 300 s");
    assert!(run.status.success(), "{}", run.stderr);
    assert!(
        run.max_rss_kib < 40 * 1024,
        "stats of a 96 MiB trace peaked at {} KiB",
        run.max_rss_kib
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_fifo_is_read_as_a_stream() {
    let dir = temp_dir("fifo");
    let fifo = dir.join("trace.pipe");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo reads a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let writer_path = fifo.clone();
    let writer = std::thread::spawn(move || {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(writer_path)
            .unwrap();
        f.write_all(&MAGIC.to_ne_bytes()).unwrap();
        for _ in 0..1000 {
            for w in INIT {
                f.write_all(&w.to_ne_bytes()).unwrap();
            }
        }
    });
    let out = Command::new(FXTRACE)
        .args(["stats", fifo.to_str().unwrap()])
        .output()
        .unwrap();
    writer.join().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("records: 1001"), "{stdout}");
    assert!(stdout.contains("bytes: 16008 (16008"), "{stdout}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// A pipe whose read end is already closed.
fn closed_pipe() -> OwnedFd {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both descriptors are new and owned here.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    write
}

#[test]
fn a_closed_stdout_or_stderr_ends_like_cat_never_a_panic() {
    let dir = temp_dir("epipe");
    let damaged = dir.join("damaged.fxt");
    let mut bytes = MAGIC.to_ne_bytes().to_vec();
    bytes.extend_from_slice(&[0xff; 13]);
    std::fs::write(&damaged, &bytes).unwrap();
    let good = dir.join("good.fxt");
    write_trace(&good, 10_000);
    for (what, file) in [("stats", &damaged), ("dump", &good), ("dump", &damaged)] {
        for _ in 0..5 {
            let pipe = closed_pipe();
            let status = Command::new(FXTRACE)
                .args([what, file.to_str().unwrap()])
                .stdout(Stdio::from(pipe.try_clone().unwrap()))
                .stderr(Stdio::from(pipe))
                .status()
                .unwrap();
            assert_eq!(
                status.signal(),
                Some(libc::SIGPIPE),
                "fxtrace {what} {}: {status:?} (101 is a panic)",
                file.display()
            );
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn convert_keeps_the_previous_output_as_old() {
    let dir = temp_dir("old");
    let trace = dir.join("t.fxt");
    write_trace(&trace, 3);
    let out = dir.join("t.json");
    std::fs::write(&out, "previous").unwrap();
    let status = Command::new(FXTRACE)
        .args([
            "convert",
            "--to",
            "chrome-json",
            trace.to_str().unwrap(),
            "-o",
        ])
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(
        std::fs::read_to_string(dir.join("t.json.old")).unwrap(),
        "previous"
    );
    assert!(std::fs::read_to_string(&out)
        .unwrap()
        .contains("traceEvents"));
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["t.fxt", "t.json", "t.json.old"]);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn check_stops_reading_an_endless_input_after_a_zero_size_record() {
    // The magic number, then zeros for ever (`cat magic /dev/zero | fxtrace check -`).
    let mut child = Command::new(FXTRACE)
        .args(["check", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&MAGIC.to_ne_bytes());
        let zeros = vec![0u8; 1 << 20];
        // Until the check closes its end (EPIPE) or 2 GiB were offered.
        for _ in 0..2048 {
            if stdin.write_all(&zeros).is_err() {
                return;
            }
        }
    });
    let until = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < until,
            "check still reading an endless input"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    writer.join().unwrap();
    assert!(
        out.contains("more than 268435464 bytes from here on are never read"),
        "{out}"
    );
}

#[test]
fn many_provider_sections_cost_no_memory_each() {
    // The magic number, then 600 000 one-word provider metadata records (4.8 MB): each
    // reader once kept an entry per provider id (dump 40 MB, check over 100 MB).
    let dir = temp_dir("providers");
    let path = dir.join("providers.fxt");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    f.write_all(&MAGIC.to_ne_bytes()).unwrap();
    // Provider Section (metadata type 2), then Provider Info without a name (type 1), then
    // Provider Event "buffer overflow" (type 3), each of 200 000 ids of its own.
    for (n, metadata_type) in [2u64, 1, 3].into_iter().enumerate() {
        for id in (1..=200_000u64).map(|i| i + n as u64 * 200_000) {
            let word = 1 << 4 | metadata_type << 16 | id << 20;
            f.write_all(&word.to_ne_bytes()).unwrap();
        }
    }
    f.flush().unwrap();
    drop(f);
    for args in readers(path.to_str().unwrap(), &dir) {
        run_within_memory(&strs(&args), 32 * 1024);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn objects_naming_one_long_string_do_not_each_keep_a_copy() {
    // A 32 000-byte string (index 1), then 20 000 thread objects named by it (352 KB): each
    // reader that labels threads once kept a copy per object (convert, report lbr: 631 MB).
    let dir = temp_dir("names");
    let path = dir.join("names.fxt");
    let mut words = vec![MAGIC];
    push_long_string(&mut words);
    for koid in 1..=20_000u64 {
        // Kernel object (type 7, 2 words): object type 2 (thread), name index 1, no args.
        words.extend([7 | 2 << 4 | 2 << 16 | 1 << 24, koid]);
    }
    write_words(&path, &words);
    for args in readers(path.to_str().unwrap(), &dir) {
        run_within_memory(&strs(&args), 64 * 1024);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_million_threads_with_open_slices_cost_bounded_memory() {
    // Strings "c" (1) and "n" (2), then 1 000 000 duration begins (4 words each: header,
    // time, inline pid and tid), each on a thread of its own, never ended (32 MB): `check`
    // kept 204 bytes a thread (issue 34, item 17); every reader keeps its per-thread state
    // bounded and counts what it left out.
    let dir = temp_dir("threads");
    let path = dir.join("threads.fxt");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let string = |index: u64, byte: u8| [2 | 2 << 4 | index << 16 | 1 << 32, u64::from(byte)];
    let mut words = vec![MAGIC];
    words.extend(INIT);
    words.extend(string(1, b'c'));
    words.extend(string(2, b'n'));
    for w in words {
        f.write_all(&w.to_ne_bytes()).unwrap();
    }
    for tid in 1..=1_000_000u64 {
        // Event (type 4), 4 words, duration begin (2), inline thread, category 1, name 2.
        let header = 4 | 4 << 4 | 2 << 16 | 1 << 32 | 2 << 48;
        for w in [header, tid, 7, tid] {
            f.write_all(&w.to_ne_bytes()).unwrap();
        }
    }
    f.flush().unwrap();
    drop(f);
    // The readers that keep state per thread (the others are covered by the tests above).
    let per_thread = readers(path.to_str().unwrap(), &dir)
        .into_iter()
        .filter(|a| {
            matches!(a[1].as_str(), "spans" | "sched") || a[0] == "check" || a[0] == "convert"
        });
    for args in per_thread {
        let run = run_within_memory(&strs(&args), 64 * 1024);
        if args[0] == "check" {
            let out = Command::new(FXTRACE).args(&args).output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(stdout.contains("not_followed"), "{stdout}");
        } else {
            assert!(run.status.success(), "{args:?}: {}", run.stderr);
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_stream_of_long_strings_keeps_the_tables_within_their_budget() {
    // 2 000 distinct 32 000-byte strings (64 MB) on a FIFO: the streaming decoder copies each
    // table string once, up to its budget (24 MiB); the rest are counted, not kept.
    let dir = temp_dir("strings");
    let fifo = dir.join("strings.pipe");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo reads a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let writer_path = fifo.clone();
    let writer = std::thread::spawn(move || {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(writer_path)
            .unwrap();
        let mut words = vec![MAGIC];
        for index in 1..=2000u64 {
            words.push(2 | (1 + 4000) << 4 | index << 16 | 32_000 << 32);
            words.extend(std::iter::repeat(index).take(4000));
            let bytes: Vec<u8> = words.drain(..).flat_map(|w| w.to_ne_bytes()).collect();
            if f.write_all(&bytes).is_err() {
                return;
            }
        }
    });
    let run = run_within_memory(&["stats", fifo.to_str().unwrap()], 64 * 1024);
    writer.join().unwrap();
    assert!(run.status.success(), "{}", run.stderr);
    assert!(
        run.stderr.contains("string or thread records") && run.stderr.contains("without keeping"),
        "{}",
        run.stderr
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn convert_keeps_a_bounded_copy_of_each_cpus_switch_arguments() {
    use fxtrace_format::{
        encode_to_vec, Arg, ArgValue, SchedContextSwitch, StringRef, ThreadState,
    };

    // A 32 000-byte string (index 1), then 500 CPUs, each with a thread switched in by a
    // switch whose 15 arguments name that string, kept until the CPU's slice ends (the end
    // of the trace): a copy per argument, 475 MB kept before.
    let dir = temp_dir("switch-args");
    let path = dir.join("switches.fxt");
    let args = [Arg::new("weights", ArgValue::Str(StringRef::Index(1))); 15];
    let mut words = vec![MAGIC];
    words.extend(INIT);
    push_long_string(&mut words);
    for cpu in 0..500u16 {
        let switch = SchedContextSwitch {
            ticks: 10 + u64::from(cpu),
            cpu,
            outgoing_state: ThreadState::Blocked,
            outgoing_tid: 1,
            incoming_tid: 2 + u64::from(cpu),
            args: &args,
        };
        words.extend(encode_to_vec(&switch).unwrap());
    }
    write_words(&path, &words);
    let json = dir.join("switches.json");
    let args = [
        "convert",
        "--to",
        "chrome-json",
        path.to_str().unwrap(),
        "-o",
        json.to_str().unwrap(),
    ];
    let run = run_within_memory(&args, 64 * 1024);
    assert!(run.status.success(), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("7500 context-switch argument(s) with a name or text longer than 256 bytes"),
        "{}",
        run.stderr
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_million_threads_asleep_at_a_wait_point_cost_the_reports_bounded_memory() {
    use fxtrace_format::{encode_to_vec, Arg, ArgValue, SchedContextSwitch, ThreadState};

    // 1 000 000 switches (40 MB), each of a thread of its own switched out asleep at wait
    // point 1 and never back. The stacks reader kept an open wait, then a total, per thread:
    // `report waits` peaked at 1.1 GB, and `report sched`, which names wait points through
    // it, at 192 MB (62 MB with only its own per-thread state, before its thread bound fit
    // its hash table).
    let dir = temp_dir("wait-points");
    let path = dir.join("waits.fxt");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    for w in [MAGIC].into_iter().chain(INIT) {
        f.write_all(&w.to_ne_bytes()).unwrap();
    }
    let stack = [Arg::new("stack", ArgValue::U32(1))];
    for tid in 1..=1_000_000u64 {
        let switch = SchedContextSwitch {
            ticks: tid,
            cpu: (tid % 64) as u16,
            outgoing_state: ThreadState::Blocked,
            outgoing_tid: tid,
            incoming_tid: tid + 1,
            args: &stack,
        };
        for w in encode_to_vec(&switch).unwrap() {
            f.write_all(&w.to_ne_bytes()).unwrap();
        }
    }
    f.flush().unwrap();
    drop(f);
    for report in ["spans", "sched", "waits", "samples"] {
        let run = run_within_memory(&["report", report, path.to_str().unwrap()], 64 * 1024);
        assert!(run.status.success(), "report {report}: {}", run.stderr);
        if report == "waits" {
            // What the bounds left out is said, with its count.
            assert!(
                run.stderr
                    .contains("beyond the reader's bounds not counted"),
                "{}",
                run.stderr
            );
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}
