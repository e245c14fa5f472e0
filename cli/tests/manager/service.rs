//! The trace service with a real `fxtrace daemon` process, real services
//! (`examples/service`) and the controller commands.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fxtrace::protocol::control::Message;
use fxtrace::protocol::transport::ControlConn;

use crate::service_support::{Daemon, FXTRACE};
use crate::support::{example, runnable_by_all};

/// `examples/service`, running `seconds`, looking for the service at `socket`.
fn service(socket: &Path, seconds: u32) -> Child {
    Command::new(example("service"))
        .arg(seconds.to_string())
        .env("FXTRACE_SOCKET", "")
        .env("XDG_RUNTIME_DIR", socket.parent().unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn examples/service")
}

/// A daemon in a fresh directory with `examples/service` registered with it (killed first
/// when this is dropped).
struct WithService {
    dir: tempfile::TempDir,
    daemon: Daemon,
    svc: Child,
}

impl WithService {
    fn new() -> WithService {
        let dir = tempfile::tempdir().unwrap();
        let daemon = Daemon::start(dir.path());
        let svc = service(&dir.path().join("fxtrace.sock"), 30);
        daemon.wait_providers("service-example", 1);
        WithService { dir, daemon, svc }
    }

    /// A file in the directory, as a string argument.
    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl Drop for WithService {
    fn drop(&mut self) {
        let _ = self.svc.kill();
        let _ = self.svc.wait();
    }
}

/// `fxtrace start -o out` attached to `daemon`, once its session 1 is tracing.
fn attached_controller(daemon: &Daemon, out: &Path) -> Child {
    let controller = Command::new(FXTRACE)
        .args(["start", "-o", out.to_str().unwrap(), "--socket"])
        .arg(&daemon.socket)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    daemon.wait_log("session 1 started", Duration::from_secs(10));
    controller
}

/// Requests (instant events named "request") in an archive.
fn requests(path: &Path) -> usize {
    use fxtrace_format::{DecodedRecord, Decoder};
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Decoder::new(&bytes)
        .map(|r| r.unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .filter(|r| matches!(&r.record, DecodedRecord::Event(e) if e.name == "request"))
        .count()
}

#[test]
fn a_service_started_before_the_daemon_registers_when_it_appears_and_is_traced() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("fxtrace.sock");
    let mut svc = service(&socket, 30);
    std::thread::sleep(Duration::from_millis(300));
    let daemon = Daemon::start(dir.path());
    daemon.wait_providers("service-example", 1);
    assert!(daemon.ok(&["providers"]).contains("idle"));
    let out = dir.path().join("now.fxt");
    daemon.ok(&["start", "--duration", "1", "-o", out.to_str().unwrap()]);
    let n = requests(&out);
    // One request per 10 ms for 1 s (the service sleeps between them).
    assert!(n >= 20, "{n} requests in a 1 s trace");
    // After the session the service is idle again, registered anew.
    daemon.wait_providers("service-example", 1);
    let log = daemon.stop();
    assert!(log.contains("session 1 ended"), "{log}");
    let _ = svc.kill();
    let _ = svc.wait();
}

/// `FXTRACE_SOCKET` naming a trace service (`fxtrace daemon --socket S`), not the default
/// socket: the program registers with it and follows it, idle, through a session, and after
/// the daemon restarts. (It used to register once, as under `fxtrace record`, be refused, and
/// run untraced without a word.)
#[test]
fn a_service_named_by_fxtrace_socket_is_followed_through_sessions_and_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let first = Daemon::start(dir.path());
    let mut svc = Command::new(example("service"))
        .arg("30")
        .env("FXTRACE_SOCKET", &first.socket)
        .env("XDG_RUNTIME_DIR", elsewhere.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn examples/service");
    first.wait_providers("service-example", 1);
    assert!(first.ok(&["providers"]).contains("idle"));
    let out = dir.path().join("named.fxt");
    first.ok(&["start", "--duration", "1", "-o", out.to_str().unwrap()]);
    assert!(requests(&out) >= 20, "{} requests", requests(&out));
    // Registered again after the session, and after a restart.
    first.wait_providers("service-example", 1);
    let log = traced_after_a_restart(dir.path(), first);
    assert!(!log.contains("refused"), "{log}");
    let _ = svc.kill();
    let _ = svc.wait();
}

/// Stops `first` (its log returned), starts a daemon in `dir` again, and checks that
/// `examples/service` registers with it and is traced by a 0.5 s session.
fn traced_after_a_restart(dir: &Path, first: Daemon) -> String {
    let log = first.stop();
    let second = Daemon::start(dir);
    second.wait_providers("service-example", 1);
    let out = dir.join("after-restart.fxt");
    second.ok(&["start", "--duration", "0.5", "-o", out.to_str().unwrap()]);
    assert!(requests(&out) >= 10, "{} requests", requests(&out));
    log
}

/// A program that follows the trace service (`fxtrace::connect`, no preload object, no
/// service running: its `fxtrace-service` thread waits for one) and whose main thread ends
/// with `pthread_exit` while a worker runs: the process ends when the worker does, as without
/// fxtrace. (It ran on forever on the service thread.)
#[test]
fn a_follower_whose_main_thread_ends_first_ends_with_its_last_thread() {
    let dir = tempfile::tempdir().unwrap();
    let mut program = Command::new(example("preload_own_engine"))
        .env("FXTRACE_SOCKET", "")
        .env("XDG_RUNTIME_DIR", dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = program.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = program.kill();
            let out = program.wait_with_output().unwrap();
            panic!(
                "still running 20 s after its ~200 ms of work: {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = program.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(status.success(), "{status}: {stdout}");
    assert!(stdout.contains("connected=false"), "{stdout}");
    assert!(stdout.contains("worker done"), "{stdout}");
}

#[test]
fn a_daemon_restarted_while_a_service_runs_traces_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("fxtrace.sock");
    let first = Daemon::start(dir.path());
    let mut svc = service(&socket, 30);
    first.wait_providers("service-example", 1);
    let log = traced_after_a_restart(dir.path(), first);
    assert!(log.contains("registered"), "{log}");
    let _ = svc.kill();
    let _ = svc.wait();
}

#[test]
fn a_detached_session_is_started_and_stopped_twice_with_clear_and_retain() {
    let fixture = WithService::new();
    let first = fixture.file("first.fxt");
    let id = fixture
        .daemon
        .ok(&[
            "start",
            "--detach",
            "-m",
            "circular",
            "-o",
            first.to_str().unwrap(),
        ])
        .trim()
        .to_owned();
    assert_eq!(id, "1");
    std::thread::sleep(Duration::from_millis(400));
    assert!(fixture
        .daemon
        .ok(&["status"])
        .contains("session 1: STARTED (detached)"));
    fixture.daemon.ok(&["stop"]);
    let after_first = requests(&first);
    assert!(after_first >= 5, "{after_first} requests");
    // CLEAR into a new file: only what came after the restart.
    let second = fixture.file("second.fxt");
    fixture.daemon.ok(&[
        "start",
        "--session",
        &id,
        "--clear",
        "-o",
        second.to_str().unwrap(),
    ]);
    std::thread::sleep(Duration::from_millis(400));
    fixture.daemon.ok(&["stop", "--session", &id]);
    let cleared = requests(&second);
    assert!(
        cleared >= 5,
        "{cleared} requests after the clearing restart"
    );
    // RETAIN, appended to the same file: the second file grows.
    fixture.daemon.ok(&["start", "--session", &id, "--retain"]);
    std::thread::sleep(Duration::from_millis(400));
    fixture.daemon.ok(&["stop", "--session", &id]);
    let retained = requests(&second);
    assert!(retained > cleared, "{retained} <= {cleared} after RETAIN");
    assert_eq!(requests(&first), after_first, "the first archive is closed");
    fixture.daemon.ok(&["terminate"]);
    assert!(!fixture.daemon.ok(&["status"]).contains("session 1"));
}

#[test]
fn a_controller_that_goes_away_ends_its_session_and_its_trace_is_written() {
    let fixture = WithService::new();
    let out = fixture.file("attached.fxt");
    let mut controller = attached_controller(&fixture.daemon, &out);
    std::thread::sleep(Duration::from_millis(500));
    controller.kill().unwrap();
    controller.wait().unwrap();
    fixture
        .daemon
        .wait_log("session 1 ended", Duration::from_secs(10));
    assert!(fixture.daemon.log().contains("its controller went away"));
    assert!(requests(&out) >= 10, "{} requests", requests(&out));
}

#[test]
fn ctrl_c_on_an_attached_controller_stops_and_writes() {
    let fixture = WithService::new();
    let out = fixture.file("ctrlc.fxt");
    let controller = attached_controller(&fixture.daemon, &out);
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(controller.id() as i32, libc::SIGINT) };
    let output = controller.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("STOPPED"), "{stderr}");
    assert!(requests(&out) >= 5);
}

#[test]
fn controller_commands_name_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let missing = Command::new(FXTRACE)
        .args(["providers", "--socket"])
        .arg(dir.path().join("none.sock"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(!missing.status.success());
    assert!(
        err.contains("no trace service") && err.contains("fxtrace daemon"),
        "{err}"
    );
    let daemon = Daemon::start(dir.path());
    let stop = daemon.ctl(&["stop"]);
    assert!(!stop.status.success());
    assert!(
        String::from_utf8_lossy(&stop.stderr).contains("no session is running"),
        "{}",
        String::from_utf8_lossy(&stop.stderr)
    );
    let bad = daemon.ctl(&["start", "-b", "3K", "-o", "/dev/null"]);
    assert!(!bad.status.success());
    // A second daemon on a live socket refuses to start.
    let second = Command::new(FXTRACE)
        .args(["daemon", "--socket"])
        .arg(&daemon.socket)
        .output()
        .unwrap();
    assert!(!second.status.success());
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(err.contains("cannot listen"), "{err}");
}

/// Run as root only: a process of another uid.
fn root_or_skip() -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    fxtrace::test_support::skip(
        fxtrace::test_support::Requirement::Root,
        "needs root (to run a provider as another user)",
    );
    false
}

#[test]
fn a_provider_of_another_uid_is_refused_unless_the_policy_allows_it() {
    if !root_or_skip() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // The root service's directory, then the user's service's (writable by that user).
    let root_dir = tmp.path().join("root");
    let user_dir = tmp.path().join("user");
    for d in [&root_dir, &user_dir] {
        std::fs::create_dir(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let exe = runnable_by_all(&example("service"), tmp.path());
    let nobody = 65534;
    let spawn_as_nobody = |dir: &Path| {
        Command::new(&exe)
            .arg("30")
            .env("FXTRACE_SOCKET", "")
            .env("XDG_RUNTIME_DIR", dir)
            .uid(nobody)
            .gid(nobody)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    // Root's service: uid 65534 is neither root nor (here) in group fxtrace.
    let root_daemon = Daemon::start(&root_dir);
    let spawned = std::time::Instant::now();
    let mut refused = spawn_as_nobody(&root_dir);
    root_daemon.wait_log("may not register", Duration::from_secs(10));
    assert!(root_daemon.log().contains("group \"fxtrace\""));
    // Told the rule (a Refused message), the provider backs off: 1, 2, 4 s …
    std::thread::sleep(Duration::from_secs(3));
    let refusals = root_daemon.log().matches("may not register").count();
    let allowed = backed_off_attempts(spawned.elapsed());
    assert!(
        refusals <= allowed,
        "{refusals} refusals, the back-off allows {allowed} in {:?}",
        spawned.elapsed()
    );
    assert!(!root_daemon.ok(&["providers"]).contains("service-example"));
    let _ = refused.kill();
    let _ = refused.wait();
    drop(root_daemon);
    // A service of that user takes it.
    let users_daemon = Daemon::start_as(&user_dir, Some(nobody));
    let mut accepted = spawn_as_nobody(&user_dir);
    // (Root's controller is not this service's user: the log tells.)
    users_daemon.wait_log("\"service-example\" (pid", Duration::from_secs(10));
    assert!(users_daemon.log().contains("uid 65534) registered"));
    let _ = accepted.kill();
    let _ = accepted.wait();
}

/// The most attempts a provider backing off from one second (1, 2, 4 s … between attempts)
/// makes in `age` (an upper bound of the time since its first): attempt k comes at least
/// 2^k - 1 s after the first. A bound on the count that a slow machine cannot break: a late
/// test only measures a longer age.
fn backed_off_attempts(age: Duration) -> usize {
    1 + (age.as_secs_f64() + 1.0).log2().floor() as usize
}

/// Another user squats the fallback socket's name of a user without `XDG_RUNTIME_DIR` (the
/// directory `/tmp/fxtrace-<uid>`, and the socket name of before, `/tmp/fxtrace-<uid>.sock`),
/// each a link to root's service. That user's daemon refuses to start, naming the directory;
/// its controllers and programs refuse to use the socket there (before: they followed the link
/// and talked to root's service). Once the squatter's links are gone, the daemon creates the
/// directory itself, mode 0700, and serves.
#[test]
fn a_squatted_fallback_socket_directory_is_refused() {
    if !root_or_skip() {
        return;
    }
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    // A user of its own for this test, and the squatter.
    let (victim, squatter) = (61_842u32, 65_534u32);
    let fallback_dir = PathBuf::from(format!("/tmp/fxtrace-{victim}"));
    let old_socket = PathBuf::from(format!("/tmp/fxtrace-{victim}.sock"));
    let cleanup = || {
        for p in [&fallback_dir, &old_socket] {
            let _ = std::fs::remove_file(p);
            let _ = std::fs::remove_dir_all(p);
        }
    };
    cleanup();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let root_dir = tmp.path().join("root");
    std::fs::create_dir(&root_dir).unwrap();
    std::fs::set_permissions(&root_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let root_daemon = Daemon::start(&root_dir);
    let ln = |target: &Path, link: &Path| {
        let status = Command::new("ln")
            .arg("-s")
            .arg(target)
            .arg(link)
            .uid(squatter)
            .gid(squatter)
            .status()
            .unwrap();
        assert!(status.success(), "ln -s as uid {squatter}");
    };
    ln(&root_dir, &fallback_dir);
    ln(&root_daemon.socket, &old_socket);
    let as_victim = |args: &[&str]| {
        Command::new(FXTRACE)
            .args(args)
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("FXTRACE_SOCKET")
            .uid(victim)
            .gid(victim)
            .output()
            .unwrap()
    };
    let refused = as_victim(&["daemon"]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "{}: it is a symbolic link",
            fallback_dir.display()
        )),
        "{err}"
    );
    let controller = as_victim(&["providers"]);
    let err = String::from_utf8_lossy(&controller.stderr);
    assert!(!controller.status.success(), "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    // A program of that user does not register through the link either.
    let exe = runnable_by_all(&example("service"), tmp.path());
    let mut program = Command::new(&exe)
        .arg("30")
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("FXTRACE_SOCKET")
        .uid(victim)
        .gid(victim)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let _ = program.kill();
    let _ = program.wait();
    let log = root_daemon.log();
    assert!(!log.contains(&format!("uid {victim}")), "{log}");
    // Without the squatter, the user's daemon makes its own directory.
    cleanup();
    let mut daemon = Command::new(FXTRACE)
        .arg("daemon")
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("FXTRACE_SOCKET")
        .uid(victim)
        .gid(victim)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let socket = fallback_dir.join("fxtrace.sock");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !socket.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "no socket at {socket:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let meta = std::fs::symlink_metadata(&fallback_dir).unwrap();
    assert!(meta.is_dir());
    assert_eq!((meta.uid(), meta.mode() & 0o7777), (victim, 0o700));
    let listed = as_victim(&["providers"]);
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let _ = daemon.kill();
    let _ = daemon.wait();
    cleanup();
}

/// `/proc/PID/status`'s VmRSS, KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Context switches (voluntary and not) of every thread of `pid` so far: how often it ran.
fn switches_of(pid: u32) -> u64 {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let status = std::fs::read_to_string(task.unwrap().path().join("status")).unwrap();
        total += status
            .lines()
            .filter_map(|l| {
                l.strip_prefix("voluntary_ctxt_switches:")
                    .or_else(|| l.strip_prefix("nonvoluntary_ctxt_switches:"))
            })
            .map(|v| v.trim().parse::<u64>().unwrap())
            .sum::<u64>();
    }
    total
}

/// Register `n` waiting providers over raw connections from this process's children (16 per
/// process, the per-process bound).
fn idle_providers(socket: &Path, n: usize) -> Vec<Child> {
    let per = 16;
    (0..n.div_ceil(per))
        .map(|i| {
            let count = per.min(n - i * per);
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "service::idle_provider_child",
                    "--ignored",
                    "--nocapture",
                ])
                .env(
                    "FXTRACE_IDLE_CHILD",
                    format!("{}:{count}", socket.display()),
                )
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect()
}

/// Not a test of its own: the body of [`idle_providers`]' children.
#[test]
#[ignore = "helper: runs as a child of two_hundred_idle_providers_cost_the_daemon_little_memory_and_no_cpu"]
fn idle_provider_child() {
    let Ok(spec) = std::env::var("FXTRACE_IDLE_CHILD") else {
        return;
    };
    let (socket, count) = spec.rsplit_once(':').unwrap();
    let mut conns = Vec::new();
    for i in 0..count.parse::<usize>().unwrap() {
        let mut conn = ControlConn::connect(Path::new(socket), Duration::from_secs(5)).unwrap();
        conn.send_msg(
            &Message::Register {
                pid: std::process::id(),
                name: format!("idle-{i}"),
                known_categories: vec!["idle".into()],
                accepts_ticks_per_second: true,
                waits_for_session: true,
            },
            &[],
        )
        .unwrap();
        let (msg, _) = conn.recv_msg().unwrap();
        assert!(
            matches!(msg, Message::Registered { joining: false, .. }),
            "{msg:?}"
        );
        conns.push(conn);
    }
    println!("registered {count}");
    // Until the parent kills this process.
    std::thread::sleep(Duration::from_secs(120));
}

#[test]
fn two_hundred_idle_providers_cost_the_daemon_little_memory_and_no_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(dir.path());
    let pid = daemon.child.id();
    let rss_before = rss_kib(pid);
    let mut children = idle_providers(&daemon.socket, 200);
    for c in &mut children {
        // The child's test harness prints its own lines first.
        let out = std::io::BufReader::new(c.stdout.take().unwrap());
        use std::io::BufRead;
        let registered = out
            .lines()
            .map_while(Result::ok)
            .any(|l| l.starts_with("registered"));
        assert!(registered, "a child did not register its providers");
    }
    let listed = daemon.ok(&["providers"]);
    assert_eq!(listed.lines().filter(|l| l.contains("idle-")).count(), 200);
    assert_eq!(daemon.ok(&["categories"]).trim(), "idle");
    let rss = rss_kib(pid);
    // Idle, nothing wakes the daemon (no timer, no poll with a timeout): once it has seen the
    // last controller go (it ran in none of 500 ms), it does not run at all while it is
    // watched, however long or busy the machine.
    let mut switches = switches_of(pid);
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(500));
        let now = switches_of(pid);
        if now == switches {
            break;
        }
        switches = now;
    }
    std::thread::sleep(Duration::from_secs(2));
    let idle_runs = switches_of(pid) - switches;
    println!(
        "200 idle providers: daemon RSS {rss_before} KiB -> {rss} KiB; ran {idle_runs} times \
         while idle"
    );
    assert!(
        rss < 50 * 1024,
        "daemon RSS {rss} KiB with 200 idle providers"
    );
    assert_eq!(idle_runs, 0, "the daemon woke while idle");
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
}

#[test]
fn system_wide_from_the_service_records_every_cpus_context_switches() {
    if !root_or_skip() {
        return;
    }
    use fxtrace_format::{DecodedRecord, Decoder};
    let fixture = WithService::new();
    let out = fixture.file("wide.fxt");
    // A thread on each online CPU sleeps and wakes while the session runs: every CPU
    // switches, whatever else the machine does.
    let online = online_cpus();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sleepers: Vec<_> = online
        .iter()
        .map(|&cpu| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                pin_to_cpu(cpu);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        })
        .collect();
    let started = fixture.daemon.ctl(&[
        "start",
        "-a",
        "--duration",
        "1",
        "-o",
        out.to_str().unwrap(),
    ]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    sleepers.into_iter().for_each(|t| t.join().unwrap());
    let err = String::from_utf8_lossy(&started.stderr);
    assert!(started.status.success(), "{err}");
    let bytes = std::fs::read(&out).unwrap();
    let mut providers = Vec::new();
    let mut cpus = std::collections::BTreeSet::new();
    for r in Decoder::new(&bytes) {
        match r.unwrap().record {
            DecodedRecord::ProviderInfo { name, .. } => providers.push(name.to_string()),
            DecodedRecord::ContextSwitch { cpu, .. } => {
                cpus.insert(u32::from(cpu));
            }
            DecodedRecord::SchedContextSwitch { cpu, .. } => {
                cpus.insert(u32::from(cpu));
            }
            _ => {}
        }
    }
    providers.sort();
    if err.contains("no context switches") {
        // No perf here (a container without perf_event access): said, not silently empty.
        assert_eq!(providers, ["service-example"]);
        fxtrace::test_support::skip(fxtrace::test_support::Requirement::Perf, err.trim());
        return;
    }
    assert_eq!(providers, ["kernel", "service-example"], "{err}");
    assert_eq!(
        cpus, online,
        "the CPUs of the context switches are the online CPUs"
    );
    fixture
        .daemon
        .wait_log("session 1 ended", Duration::from_secs(10));
}

/// The online CPUs (`/sys/devices/system/cpu/online`: "0-3,6").
fn online_cpus() -> std::collections::BTreeSet<u32> {
    let list = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let mut cpus = std::collections::BTreeSet::new();
    for range in list.trim().split(',') {
        let (first, last) = range.split_once('-').unwrap_or((range, range));
        cpus.extend(first.parse::<u32>().unwrap()..=last.parse::<u32>().unwrap());
    }
    cpus
}

/// Runs the calling thread on `cpu` alone (left as it is where the process may not run there).
fn pin_to_cpu(cpu: u32) {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes inside it (cpu is below
    // CPU_SETSIZE on any machine these tests run on, checked); sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert!((cpu as usize) < libc::CPU_SETSIZE as usize);
        libc::CPU_SET(cpu as usize, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Provider names in an archive, sorted.
fn provider_names(path: &Path) -> Vec<String> {
    use fxtrace_format::{DecodedRecord, Decoder};
    let bytes = std::fs::read(path).unwrap();
    let mut names: Vec<String> = Decoder::new(&bytes)
        .filter_map(|r| match r.unwrap().record {
            DecodedRecord::ProviderInfo { name, .. } => Some(name.to_string()),
            _ => None,
        })
        .collect();
    names.sort();
    names
}

#[test]
fn a_provider_that_starts_during_a_session_joins_it_and_names_choose_providers() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("fxtrace.sock");
    let daemon = Daemon::start(dir.path());
    let named = |name: &str| {
        Command::new(example("service"))
            .arg("30")
            .env("FXTRACE_SOCKET", "")
            .env("XDG_RUNTIME_DIR", socket.parent().unwrap())
            .env("FXTRACE_SERVICE_NAME", name)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut early = named("early");
    daemon.wait_providers("early", 1);
    let out = dir.path().join("joined.fxt");
    daemon.ok(&[
        "start",
        "--detach",
        "--name",
        "early",
        "late",
        "-o",
        out.to_str().unwrap(),
    ]);
    // Started while the session runs: `late` joins it, `other` is not chosen.
    let mut late = named("late");
    let mut other = named("other");
    daemon.wait_log("\"late\"", Duration::from_secs(10));
    daemon.wait_providers("other", 1);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !daemon
        .ok(&["providers"])
        .lines()
        .any(|l| l.contains("session 1") && l.ends_with("late"))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "late did not join: {}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    daemon.ok(&["stop"]);
    assert_eq!(provider_names(&out), ["early", "late"]);
    assert!(daemon
        .ok(&["providers"])
        .lines()
        .any(|l| l.contains("idle") && l.ends_with("other")));
    daemon.ok(&["terminate"]);
    for c in [&mut early, &mut late, &mut other] {
        let _ = c.kill();
        let _ = c.wait();
    }
}

#[test]
fn a_stale_socket_is_replaced_and_a_systemd_socket_is_taken_over() {
    let dir = tempfile::tempdir().unwrap();
    // A daemon killed with SIGKILL leaves its socket file behind.
    let mut killed = Daemon::start(dir.path());
    killed.child.kill().unwrap();
    killed.child.wait().unwrap();
    assert!(killed.socket.exists());
    let again = Daemon::start(dir.path());
    assert!(again.ok(&["status"]).contains("trace service at"));
    drop(again);
    drop(killed);

    // Socket activation: the socket is bound and listening before the daemon starts, passed
    // as descriptor 3 with LISTEN_FDS/LISTEN_PID (set by a shell, whose pid exec keeps).
    let socket = dir.path().join("activated.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let log = dir.path().join("activated.log");
    let fd = std::os::fd::AsRawFd::as_raw_fd(&listener);
    let mut daemon = Command::new("/bin/sh");
    daemon
        .args(["-c", "LISTEN_PID=$$ LISTEN_FDS=1 exec \"$0\" daemon"])
        .arg(crate::service_support::FXTRACE)
        .stderr(std::fs::File::create(&log).unwrap());
    // SAFETY: dup2 and fcntl are async-signal-safe; the listener is open in the parent.
    unsafe {
        daemon.pre_exec(move || {
            if fd != 3 && libc::dup2(fd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // Inherited by the exec (dup2 onto the same number keeps close-on-exec).
            if libc::fcntl(3, libc::F_SETFD, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = daemon.spawn().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&log)
        .unwrap()
        .contains("listening at")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            std::fs::read_to_string(&log).unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains(&socket.display().to_string()), "{text}");
    assert!(
        !text.starts_with('['),
        "no timestamps under systemd: {text}"
    );
    let status = Command::new(crate::service_support::FXTRACE)
        .args(["status", "--socket"])
        .arg(&socket)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&status.stdout).contains("trace service at"));
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
    // The socket is systemd's: the daemon leaves it in place.
    assert!(socket.exists());
}

/// Voluntary context switches (wake-ups) of `pid`'s thread named `comm`.
fn wakeups(pid: u32, comm: &str) -> u64 {
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let task = task.unwrap().path();
        if std::fs::read_to_string(task.join("comm"))
            .unwrap_or_default()
            .trim()
            == comm
        {
            let status = std::fs::read_to_string(task.join("status")).unwrap();
            return status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap();
        }
    }
    panic!("no thread {comm} in process {pid}");
}

#[test]
fn a_waiting_provider_sleeps_beside_a_stale_socket_and_registers_when_a_service_replaces_it() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("fxtrace.sock");
    // A socket file nobody listens on: what a service killed with SIGKILL leaves.
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    let spawned = std::time::Instant::now();
    let mut svc = service(&socket, 30);
    std::thread::sleep(Duration::from_millis(3500));
    // The thread's wake-ups since it started, against what the back-off allows in the time
    // since the spawn: each attempt follows one wait (the retry pace or the watch), two more
    // for the thread's start (3 in all here at 3.7 s). A wake-up per poll would be many more.
    let age = spawned.elapsed();
    let woke = wakeups(svc.id(), "fxtrace-service");
    let allowed = backed_off_attempts(age) as u64 + 2;
    println!("beside a stale socket: {woke} wake-ups in {age:?} (allowed {allowed})");
    assert!(
        woke <= allowed,
        "{woke} wake-ups in {age:?} beside a stale socket; the back-off allows {allowed}"
    );
    // The new socket wakes the watch (the unit test `a_watch_wakes_when_the_socket_appears`
    // shows the watch waking with no timeout at all): the provider registers.
    let daemon = Daemon::start(dir.path());
    daemon.wait_providers("service-example", 1);
    let _ = svc.kill();
    let _ = svc.wait();
}

#[test]
fn a_failed_start_keeps_the_previous_trace_and_a_tracing_session_keeps_its_output() {
    let fixture = WithService::new();
    let out = fixture.file("kept.fxt");
    std::fs::write(&out, b"previous trace").unwrap();
    // Refused (a bad category name): the previous file is untouched, no temporary is left.
    let long = "c".repeat(101);
    let refused = fixture
        .daemon
        .ctl(&["start", "-c", &long, "-o", out.to_str().unwrap()]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("longer than 100 bytes"));
    assert_eq!(std::fs::read(&out).unwrap(), b"previous trace");
    let leftovers: Vec<_> = std::fs::read_dir(fixture.dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // Started: the previous file is kept as .old.
    fixture
        .daemon
        .ok(&["start", "--detach", "-o", out.to_str().unwrap()]);
    assert_eq!(
        std::fs::read(fixture.file("kept.fxt.old")).unwrap(),
        b"previous trace"
    );
    // A restart of the tracing session with a new output: refused, nothing switched.
    let other = fixture.file("other.fxt");
    let restart = fixture
        .daemon
        .ctl(&["start", "--session", "1", "-o", other.to_str().unwrap()]);
    assert!(!restart.status.success());
    let err = String::from_utf8_lossy(&restart.stderr);
    assert!(err.contains("stop it first"), "{err}");
    assert!(!other.exists());
    std::thread::sleep(Duration::from_millis(300));
    fixture.daemon.ok(&["stop"]);
    assert!(requests(&out) >= 5);
    assert!(fixture
        .daemon
        .ok(&["status"])
        .contains(&out.display().to_string()));
    fixture.daemon.ok(&["terminate"]);
}

#[test]
fn a_controller_that_does_not_read_blocks_no_one() {
    use fxtrace_tools::manager::service::protocol::Request;
    let fixture = WithService::new();
    // Eight status requests ahead of their answers, never read.
    let mut stuck = ControlConn::connect(&fixture.daemon.socket, Duration::from_secs(1)).unwrap();
    for _ in 0..8 {
        stuck
            .send_msg(&Request::Status {}.to_message(0).unwrap(), &[])
            .unwrap();
    }
    // Answered beside it (a command waits at most the client's reply timeout, then fails).
    for _ in 0..5 {
        assert!(fixture
            .daemon
            .ok(&["providers"])
            .contains("service-example"));
    }
    // Once its answers fill the socket, more requests ahead than allowed: that controller is
    // dropped, with a reason.
    stuck
        .set_send_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    for _ in 0..20_000 {
        if stuck
            .send_msg(&Request::Status {}.to_message(0).unwrap(), &[])
            .is_err()
        {
            break;
        }
    }
    fixture.daemon.wait_log(
        "requests sent ahead of their answers",
        Duration::from_secs(10),
    );
}

#[test]
fn a_provider_that_dies_during_a_session_leaves_the_registry() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("fxtrace.sock");
    let daemon = Daemon::start(dir.path());
    let mut svc = service(&socket, 30);
    daemon.wait_providers("service-example", 1);
    daemon.ok(&[
        "start",
        "--detach",
        "-o",
        dir.path().join("d.fxt").to_str().unwrap(),
    ]);
    svc.kill().unwrap();
    svc.wait().unwrap();
    daemon.wait_providers("service-example", 0);
    daemon.ok(&["stop"]);
    daemon.ok(&["terminate"]);
}

#[test]
fn stop_no_write_discards_what_the_providers_hold() {
    let fixture = WithService::new();
    let out = fixture.file("discarded.fxt");
    fixture
        .daemon
        .ok(&["start", "--detach", "-o", out.to_str().unwrap()]);
    std::thread::sleep(Duration::from_millis(300));
    fixture.daemon.ok(&["stop", "--no-write"]);
    assert_eq!(requests(&out), 0, "events were written despite --no-write");
    // The session goes on: started again, stopped with writing.
    fixture.daemon.ok(&["start", "--session", "1", "--clear"]);
    std::thread::sleep(Duration::from_millis(300));
    fixture.daemon.ok(&["stop"]);
    assert!(requests(&out) >= 5);
    fixture.daemon.ok(&["terminate"]);
}

/// A provider registered with the service over a raw connection that never answers
/// (Initialize comes; no STARTED is ever sent). Keep it alive for the test.
fn silent_provider(socket: &Path) -> ControlConn {
    let mut conn = ControlConn::connect(socket, Duration::from_secs(1)).unwrap();
    conn.send_msg(
        &Message::Register {
            pid: std::process::id(),
            name: "silent".into(),
            known_categories: Vec::new(),
            accepts_ticks_per_second: false,
            waits_for_session: true,
        },
        &[],
    )
    .unwrap();
    let (msg, _) = conn.recv_msg().unwrap();
    assert!(matches!(msg, Message::Registered { .. }), "{msg:?}");
    conn
}

#[test]
fn a_start_stopped_before_it_completes_is_answered_and_its_trace_kept() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(dir.path());
    let _silent = silent_provider(&daemon.socket);
    daemon.wait_providers("silent", 1);
    let out = dir.path().join("early.fxt");
    let controller = attached_controller(&daemon, &out);
    // The start waits for the silent provider (up to 5 s): stop it meanwhile.
    daemon.ok(&["stop"]);
    let output = controller.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{err}");
    assert!(err.contains("stopped before its start completed"), "{err}");
    let bytes = std::fs::read(&out).unwrap();
    assert!(bytes.starts_with(&fxtrace_format::MAGIC_WORD.to_le_bytes()));
}

#[test]
fn a_terminate_sent_just_before_closing_is_carried_out() {
    use fxtrace_tools::manager::service::protocol::{FromService, Request};
    let fixture = WithService::new();
    let out = fixture.file("closing.fxt");
    fixture
        .daemon
        .ok(&["start", "--detach", "-o", out.to_str().unwrap()]);
    std::thread::sleep(Duration::from_millis(300));
    let mut raw = ControlConn::connect(&fixture.daemon.socket, Duration::from_secs(1)).unwrap();
    raw.send_msg(&Request::Status {}.to_message(0).unwrap(), &[])
        .unwrap();
    let (reply, _) = raw.recv_frame().unwrap();
    let fxtrace_tools::manager::wire::Frame::Controller { body, .. } = reply else {
        panic!("{reply:?}")
    };
    assert!(FromService::parse(&body).is_ok());
    raw.send_msg(
        &Request::Terminate { session: None }.to_message(0).unwrap(),
        &[],
    )
    .unwrap();
    drop(raw);
    fixture
        .daemon
        .wait_log("session 1 ended", Duration::from_secs(10));
    assert!(requests(&out) >= 1);
}

#[test]
fn an_output_that_could_block_the_service_is_refused_and_the_service_goes_on() {
    use fxtrace_tools::manager::service::client::{Controller, ControllerError};
    use fxtrace_tools::manager::service::protocol::{Request, StartRequest};
    use std::os::fd::AsFd;

    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(dir.path());
    let (read_end, write_end) = nix::unistd::pipe().unwrap();
    // A full pipe that nobody reads: a write to it blocks for as long as it is held open.
    nix::fcntl::fcntl(
        &write_end,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    )
    .unwrap();
    while nix::unistd::write(&write_end, &[0u8; 4096]).is_ok() {}
    nix::fcntl::fcntl(
        &write_end,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty()),
    )
    .unwrap();
    let start = Request::Start(Box::new(StartRequest {
        detach: true,
        output: Some("pipe".into()),
        ..StartRequest::default()
    }));
    let mut controller = Controller::connect(&daemon.socket).unwrap();
    match controller.call(&start, Some(write_end.as_fd()), |_| {}) {
        Err(ControllerError::Refused(error)) => {
            assert!(error.contains("a pipe or FIFO"), "{error}")
        }
        other => panic!("{other:?}"),
    }
    // A file open only for reading would lose the trace.
    let path = dir.path().join("read-only");
    std::fs::write(&path, b"").unwrap();
    let read_only = std::fs::File::open(&path).unwrap();
    match controller.call(&start, Some(read_only.as_fd()), |_| {}) {
        Err(ControllerError::Refused(error)) => {
            assert!(error.contains("not open for writing"), "{error}")
        }
        other => panic!("{other:?}"),
    }
    // Still serving everyone.
    let providers = daemon.ctl(&["providers"]);
    assert!(providers.status.success());
    drop(read_end);
    daemon.stop();
}

#[test]
fn an_unnamed_stop_never_picks_another_users_session() {
    if !root_or_skip() {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let daemon = Daemon::start(tmp.path());
    let fxtrace = runnable_by_all(Path::new(FXTRACE), tmp.path());
    let nobody = 65534;
    let out = tmp.path().join("nobodys.fxt");
    let mut start = Command::new(&fxtrace);
    start
        .args(["start", "--detach", "-o"])
        .arg(&out)
        .arg("--socket")
        .arg(&daemon.socket)
        .uid(nobody)
        .gid(nobody);
    let started = output_of_a_fresh_copy(&mut start);
    assert!(
        started.status.success(),
        "{}",
        String::from_utf8_lossy(&started.stderr)
    );
    // Root may control it, but only by naming it.
    let stop = daemon.ctl(&["stop", "--no-write"]);
    assert!(!stop.status.success());
    let err = String::from_utf8_lossy(&stop.stderr);
    assert!(
        err.contains("you have no session running; 1 of other users are"),
        "{err}"
    );
    let status = daemon.ok(&["status"]);
    let (_, rest) = status
        .split_once("  session ")
        .expect("the session is listed");
    let (id, state) = rest.split_once(": ").unwrap();
    assert!(state.starts_with("STARTED"), "still tracing: {status}");
    daemon.ok(&["stop", "--session", id]);
}

#[test]
fn a_program_registering_once_at_the_service_is_told_why_it_is_not_traced() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(dir.path());
    let options = fxtrace::provider::ProviderOptions {
        socket_path: Some(daemon.socket.clone()),
        ..fxtrace::provider::ProviderOptions::default()
    };
    match fxtrace::provider::Provider::connect_with("once", &options) {
        Err(fxtrace::provider::ProviderError::Refused(reason)) => {
            assert!(reason.contains("fxtrace::connect"), "{reason}")
        }
        Err(e) => panic!("{e}"),
        Ok(p) => panic!("registered: {:?}", p.map(|p| p.id())),
    }
    daemon.wait_log("refused", Duration::from_secs(5));
}

/// Not a test of its own: the body of the flooding child of
/// [`a_flood_of_silent_connections_by_one_user_does_not_keep_others_out`].
#[test]
#[ignore = "helper: runs as the child of a_flood_of_silent_connections_by_one_user_does_not_keep_others_out"]
fn silent_flood_child() {
    let Ok(socket) = std::env::var("FXTRACE_FLOOD_CHILD") else {
        return;
    };
    let mut held = std::collections::VecDeque::new();
    // Until the parent kills this process: connections that never say anything.
    loop {
        if let Ok(conn) = std::os::unix::net::UnixStream::connect(&socket) {
            held.push_back(conn);
        }
        if held.len() > 200 {
            held.pop_front();
        }
    }
}

#[test]
fn a_flood_of_silent_connections_by_one_user_does_not_keep_others_out() {
    if !root_or_skip() {
        return;
    }
    let (_tmp, daemon, mut flood) =
        root_daemon_flooded_by_nobody("service::silent_flood_child", "FXTRACE_FLOOD_CHILD");
    daemon.wait_log(
        "connections waiting to say who they are",
        Duration::from_secs(20),
    );
    // Root's providers register one after another through the flood.
    for i in 0..20 {
        let mut conn = ControlConn::connect(&daemon.socket, Duration::from_secs(5)).unwrap();
        conn.send_msg(
            &Message::Register {
                pid: std::process::id(),
                name: format!("through-{i}"),
                known_categories: vec![],
                accepts_ticks_per_second: true,
                waits_for_session: true,
            },
            &[],
        )
        .unwrap();
        conn.set_recv_timeout(Some(Duration::from_secs(5))).unwrap();
        let answer = conn.recv_msg();
        assert!(
            matches!(answer, Ok((Message::Registered { .. }, _))),
            "provider {i}: {answer:?}"
        );
    }
    let _ = flood.kill();
    let _ = flood.wait();
    // The log says so once a second at most, not once per connection.
    let lines = daemon
        .log()
        .matches("connections waiting to say who they are")
        .count();
    assert!(lines <= 30, "{lines} lines");
}

/// Not a test of its own: the body of the flooding child of
/// [`refused_registrations_and_bad_first_messages_are_logged_once_a_second`].
#[test]
#[ignore = "helper: runs as the child of refused_registrations_and_bad_first_messages_are_logged_once_a_second"]
fn refusal_flood_child() {
    let Ok(socket) = std::env::var("FXTRACE_REFUSAL_FLOOD_CHILD") else {
        return;
    };
    let socket = PathBuf::from(socket);
    // Until the parent kills this process: registrations the service refuses, with the
    // longest name a peer may choose, and first frames that do not decode.
    loop {
        if let Ok(mut conn) = ControlConn::connect(&socket, Duration::from_secs(1)) {
            let _ = conn.send_msg(
                &Message::Register {
                    pid: std::process::id(),
                    name: "n".repeat(100),
                    known_categories: vec![],
                    accepts_ticks_per_second: true,
                    waits_for_session: true,
                },
                &[],
            );
            let _ = conn.set_recv_timeout(Some(Duration::from_secs(1)));
            let _ = conn.recv_msg();
        }
        if let Ok(mut raw) = std::os::unix::net::UnixStream::connect(&socket) {
            use std::io::Write as _;
            let _ = raw.write_all(&[0xff; 16]);
        }
    }
}

/// A user who may not register floods root's service with refused registrations and
/// malformed first frames: each rule is logged once a second per uid, with a count, not once
/// per connection (that grew the log by 24–31 MB in 10 s).
#[test]
fn refused_registrations_and_bad_first_messages_are_logged_once_a_second() {
    if !root_or_skip() {
        return;
    }
    let (_tmp, daemon, mut flood) = root_daemon_flooded_by_nobody(
        "service::refusal_flood_child",
        "FXTRACE_REFUSAL_FLOOD_CHILD",
    );
    daemon.wait_log("may not register", Duration::from_secs(20));
    daemon.wait_log("bad first message", Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(3));
    let _ = flood.kill();
    let _ = flood.wait();
    // The last counts are told within a second of the last event.
    std::thread::sleep(Duration::from_millis(1500));
    let log = daemon.log();
    // The whole log, its first line ("listening at") included.
    let grown = log.len();
    let refused = log.matches("may not register").count();
    let malformed = log.matches("bad first message").count();
    println!("log grew {grown} bytes: {refused} refusal lines, {malformed} bad-frame lines");
    assert!(refused <= 8, "{refused} refusal lines in about 4 s");
    assert!(malformed <= 8, "{malformed} bad-frame lines in about 4 s");
    assert!(log.contains("such since the last such line"), "{log}");
    assert!(grown < 16 << 10, "the log grew {grown} bytes");
}

/// Refusals counted while the service has nothing else to do are told once their second has
/// passed, not at its next wake-up, which an idle service may never have: a burst of
/// undecodable first frames is one line at once, then one line with the count. (The count
/// waited for the next connection.)
#[test]
fn the_count_of_a_burst_of_refusals_is_told_while_the_service_is_idle() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(dir.path());
    for _ in 0..10 {
        let mut raw = std::os::unix::net::UnixStream::connect(&daemon.socket).unwrap();
        raw.write_all(&[0xff; 16]).unwrap();
    }
    daemon.wait_log("bad first message", Duration::from_secs(10));
    // Nothing else connects: only the service's own deadline can tell the rest.
    daemon.wait_log("such since the last such line", Duration::from_secs(10));
}

/// Root's daemon in a fresh directory everyone may use, and this test binary's `child` test
/// run as uid 65534 with `env` naming the daemon's socket (a flood, until killed).
fn root_daemon_flooded_by_nobody(
    child: &str,
    env: &str,
) -> (tempfile::TempDir, Daemon, std::process::Child) {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let daemon = Daemon::start(tmp.path());
    let exe = runnable_by_all(&std::env::current_exe().unwrap(), tmp.path());
    let nobody = 65534;
    let mut flood = Command::new(&exe);
    flood
        .args(["--exact", child, "--ignored", "--nocapture"])
        .env(env, &daemon.socket)
        .uid(nobody)
        .gid(nobody)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let flood = retry_while_busy(|| flood.spawn());
    (tmp, daemon, flood)
}

/// `command.output()` of an executable copied just now: another test's fork may still hold
/// the copy open for writing for an instant (ETXTBSY), so that is tried again.
fn output_of_a_fresh_copy(command: &mut Command) -> std::process::Output {
    retry_while_busy(|| command.output())
}

/// `run()` again while it fails with ETXTBSY (see [`output_of_a_fresh_copy`]), for 2 s.
fn retry_while_busy<T>(mut run: impl FnMut() -> std::io::Result<T>) -> T {
    for _ in 0..100 {
        match run() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            other => return other.unwrap(),
        }
    }
    panic!("text file busy for 2 s")
}

/// A service whose long-lived `tracing` span (its `connection`) was created before it
/// registered: a session of the trace service records each of the span's entries, named from
/// its call site, with the span's id and the note that its fields were recorded before the
/// trace; the `#[traced]` calls made inside nest in them.
#[test]
fn a_session_records_the_entries_of_a_tracing_span_created_before_it() {
    use fxtrace_format::{DecodedEventKind, DecodedRecord, DecodedValue, Decoder};

    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(dir.path());
    let mut svc = Command::new(example("service"))
        .arg("30")
        .env("FXTRACE_SOCKET", "")
        .env("XDG_RUNTIME_DIR", dir.path())
        .env("FXTRACE_SERVICE_TRACING", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn examples/service");
    daemon.wait_providers("service-example", 1);
    let out = dir.path().join("spans.fxt");
    daemon.ok(&["start", "--duration", "1", "-o", out.to_str().unwrap()]);
    let _ = svc.kill();
    let _ = svc.wait();
    let bytes = std::fs::read(&out).unwrap();
    // (name, start, end, span_id, fields note) of every duration.
    let mut durations = Vec::new();
    for record in Decoder::new(&bytes) {
        let record = record.unwrap();
        let DecodedRecord::Event(event) = record.record else {
            continue;
        };
        let DecodedEventKind::DurationComplete { end } = event.kind else {
            continue;
        };
        let arg = |name: &str| {
            event
                .args
                .iter()
                .find(|a| a.name == name)
                .map(|a| a.value.clone())
        };
        durations.push((
            event.name.to_string(),
            event.time.ticks,
            end.ticks,
            arg("span_id"),
            arg("fields"),
        ));
    }
    let connection: Vec<_> = durations.iter().filter(|d| d.0 == "connection").collect();
    // A request every 10 ms (about 100 in the second); two show that the entries share one
    // id, whatever the machine's load.
    assert!(
        connection.len() >= 2,
        "{} connection entries",
        connection.len()
    );
    let id = connection[0].3.clone();
    assert!(matches!(id, Some(DecodedValue::U64(_))), "{id:?}");
    for entry in &connection {
        assert_eq!(entry.3, id, "one span, one id");
        assert!(
            matches!(&entry.4, Some(DecodedValue::Str(note)) if note == "recorded before the trace"),
            "{:?}",
            entry.4
        );
    }
    let handled: Vec<_> = durations
        .iter()
        .filter(|d| d.0 == "service::handle")
        .collect();
    assert!(!handled.is_empty());
    assert!(
        handled
            .iter()
            .all(|h| connection.iter().any(|c| c.1 <= h.1 && h.2 <= c.2)),
        "each #[traced] call inside a connection entry"
    );
}
