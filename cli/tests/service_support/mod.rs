//! A real `fxtrace daemon` in a test, and its controller commands (shared by the manager and
//! preload test binaries).
#![allow(dead_code)]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The `fxtrace` binary under test.
pub(crate) const FXTRACE: &str = env!("CARGO_BIN_EXE_fxtrace");

/// A daemon on a socket in a private directory; killed (SIGTERM) when dropped.
pub(crate) struct Daemon {
    pub(crate) child: Child,
    pub(crate) socket: PathBuf,
    log: PathBuf,
}

impl Daemon {
    pub(crate) fn start(dir: &Path) -> Daemon {
        Self::start_as(dir, None)
    }

    pub(crate) fn start_as(dir: &Path, uid: Option<u32>) -> Daemon {
        let socket = dir.join("fxtrace.sock");
        let log = dir.join(format!("daemon-{}.log", nanos()));
        let mut cmd = Command::new(FXTRACE);
        cmd.args(["daemon", "--socket"])
            .arg(&socket)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        if let Some(uid) = uid {
            cmd.uid(uid).gid(uid);
        }
        let child = cmd.spawn().expect("spawn fxtrace daemon");
        let daemon = Daemon { child, socket, log };
        daemon.wait_log("listening at", Duration::from_secs(10));
        daemon
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Wait until the log has a line containing `what`.
    pub(crate) fn wait_log(&self, what: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.log().contains(what) {
            assert!(
                Instant::now() < deadline,
                "the daemon did not log {what:?} within {timeout:?}; its log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait until `fxtrace providers` lists `n` providers (any state) named `name`.
    pub(crate) fn wait_providers(&self, name: &str, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out = self.ctl(&["providers"]);
            let found = String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| l.ends_with(name))
                .count();
            if found == n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{n} providers {name:?} not registered; providers:\n{}\ndaemon log:\n{}",
                String::from_utf8_lossy(&out.stdout),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Run a controller command against this daemon.
    pub(crate) fn ctl(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(FXTRACE);
        cmd.args(args).arg("--socket").arg(&self.socket);
        cmd.output().expect("run a controller command")
    }

    /// Run a controller command that must succeed; its standard output.
    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let out = self.ctl(args);
        assert!(
            out.status.success(),
            "fxtrace {args:?} failed: {}\ndaemon log:\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub(crate) fn stop(mut self) -> String {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().unwrap();
        assert!(status.success(), "the daemon exited with {status}");
        self.log()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}
