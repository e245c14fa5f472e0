//! The `exec` family, interposed: an `exec` ends the old image as `exit` does, so its trace
//! is flushed first (the flusher drains the perf rings, stops the engine and sends STOPPED,
//! bounded by `FXTRACE_PRELOAD_FLUSH_MS`), and the manager reports the old provider as
//! having exec'd into the new one (which registers again, `LD_PRELOAD` being inherited)
//! instead of as lost.
//!
//! `_exit` and `_Exit` end the image too, without running `atexit` handlers (dash exits
//! that way): they are flushed the same way, then exit.
//!
//! Hooked: `execve`, `execv`, `execvp`, `execvpe`, `fexecve`. Each calls the next definition
//! (libc's, found with `dlsym(RTLD_NEXT)`). The flush happens only in the process that armed
//! the hooks (never in a `vfork` child, whose pid differs) and only when the target is an
//! executable file (`access(X_OK)`, `PATH` searched for a bare name), so a failing `exec`
//! (command not found) leaves tracing on. `execl`, `execle` and `execlp` are variadic, which
//! Rust cannot define: their images are not flushed (the manager salvages the buffer, the
//! summary still says "exec'd into").

use std::ffi::{c_char, c_int, CStr};

use crate::hooks;
use crate::log::log;

/// The next definition of `name` (libc's), or `None`.
fn next(name: &CStr) -> Option<*mut libc::c_void> {
    // SAFETY: `name` is a valid C string; RTLD_NEXT looks past this object.
    let f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    (!f.is_null()).then_some(f)
}

/// -1 with `ENOSYS` (no next definition: cannot happen with glibc).
fn no_next() -> c_int {
    // SAFETY: errno is thread-local and always writable.
    unsafe { *libc::__errno_location() = libc::ENOSYS };
    -1
}

/// Whether `path` names a file this process may execute.
fn executable(path: &CStr) -> bool {
    // SAFETY: a valid C string.
    unsafe { libc::access(path.as_ptr(), libc::X_OK) == 0 }
}

/// Whether `file` resolves as `execvp` resolves it: a path if it has a `/`, else the first
/// executable `DIR/file` of `path_var` (default `/bin:/usr/bin`).
fn resolves(file: &CStr, path_var: Option<&CStr>) -> bool {
    let bytes = file.to_bytes();
    if bytes.is_empty() {
        return false;
    }
    if bytes.contains(&b'/') {
        return executable(file);
    }
    let dirs = path_var.map_or(&b"/bin:/usr/bin"[..], CStr::to_bytes);
    dirs.split(|&b| b == b':').any(|dir| {
        let dir = if dir.is_empty() { &b"."[..] } else { dir };
        let mut full = Vec::with_capacity(dir.len() + bytes.len() + 2);
        full.extend_from_slice(dir);
        full.push(b'/');
        full.extend_from_slice(bytes);
        std::ffi::CString::new(full).is_ok_and(|p| executable(&p))
    })
}

/// Flush before an `exec` of a target that `will_run` says will run.
fn before_exec(will_run: impl FnOnce() -> bool) {
    if !hooks::armed_here() || !will_run() {
        return;
    }
    let flushed = hooks::flush_and_wait(hooks::Ending::Exec);
    log!(
        "flush at exec {}",
        if flushed { "done" } else { "timed out" }
    );
}

/// This process's `PATH`.
fn own_path<'a>() -> Option<&'a CStr> {
    // SAFETY: getenv returns null or a pointer into the environment, valid until it changes
    // (the exec that follows replaces it anyway).
    let p = unsafe { libc::getenv(c"PATH".as_ptr()) };
    // SAFETY: a non-null getenv result is a valid C string.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) })
}

type Exit = unsafe extern "C" fn(c_int) -> !;

/// Flush (when armed here; async-signal-safe), then the next `name` (`_exit` or `_Exit`),
/// else the `exit_group` system call.
fn flush_then_exit(name: &CStr, status: c_int) -> ! {
    if hooks::armed_here() {
        hooks::flush_and_wait(hooks::Ending::Exit);
    }
    if let Some(f) = next(name) {
        // SAFETY: libc's `_exit`/`_Exit` has this signature and does not return.
        unsafe { std::mem::transmute::<*mut libc::c_void, Exit>(f)(status) }
    }
    loop {
        // SAFETY: exit_group takes a status and ends the process.
        unsafe { libc::syscall(libc::SYS_exit_group, status) };
    }
}

/// `_exit(2)`, after the flush.
///
/// # Safety
/// As `_exit`: ends the process.
#[no_mangle]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    flush_then_exit(c"_exit", status)
}

/// `_Exit(3)`, after the flush.
///
/// # Safety
/// As `_Exit`: ends the process.
#[no_mangle]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    flush_then_exit(c"_Exit", status)
}

type Execve =
    unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
type Execv = unsafe extern "C" fn(*const c_char, *const *const c_char) -> c_int;
type Fexecve = unsafe extern "C" fn(c_int, *const *const c_char, *const *const c_char) -> c_int;

/// `execve(2)`, after the flush.
///
/// # Safety
/// As `execve`: valid C strings and null-terminated arrays.
#[no_mangle]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: the caller passes a valid C string (execve's contract); null is left to libc.
    before_exec(|| !path.is_null() && executable(unsafe { CStr::from_ptr(path) }));
    let Some(f) = next(c"execve") else {
        return no_next();
    };
    // SAFETY: libc's execve has this signature; the arguments are the caller's.
    unsafe { std::mem::transmute::<*mut libc::c_void, Execve>(f)(path, argv, envp) }
}

/// `execv(3)`, after the flush.
///
/// # Safety
/// As `execv`.
#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: as in `execve`.
    before_exec(|| !path.is_null() && executable(unsafe { CStr::from_ptr(path) }));
    let Some(f) = next(c"execv") else {
        return no_next();
    };
    // SAFETY: libc's execv has this signature; the arguments are the caller's.
    unsafe { std::mem::transmute::<*mut libc::c_void, Execv>(f)(path, argv) }
}

/// `execvp(3)`, after the flush.
///
/// # Safety
/// As `execvp`.
#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: as in `execve`.
    before_exec(|| !file.is_null() && resolves(unsafe { CStr::from_ptr(file) }, own_path()));
    let Some(f) = next(c"execvp") else {
        return no_next();
    };
    // SAFETY: libc's execvp has this signature; the arguments are the caller's.
    unsafe { std::mem::transmute::<*mut libc::c_void, Execv>(f)(file, argv) }
}

/// `execvpe(3)`, after the flush (the search uses the caller's `PATH`, as glibc's does).
///
/// # Safety
/// As `execvpe`.
#[no_mangle]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: as in `execve`.
    before_exec(|| !file.is_null() && resolves(unsafe { CStr::from_ptr(file) }, own_path()));
    let Some(f) = next(c"execvpe") else {
        return no_next();
    };
    // SAFETY: libc's execvpe has this signature; the arguments are the caller's.
    unsafe { std::mem::transmute::<*mut libc::c_void, Execve>(f)(file, argv, envp) }
}

/// `fexecve(3)`, after the flush.
///
/// # Safety
/// As `fexecve`.
#[no_mangle]
pub unsafe extern "C" fn fexecve(
    fd: c_int,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    before_exec(|| {
        // SAFETY: a zeroed `stat` is a valid plain-data value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat on any number only fills the local.
        let found = unsafe { libc::fstat(fd, &mut st) } == 0;
        found && st.st_mode & libc::S_IFMT == libc::S_IFREG
    });
    let Some(f) = next(c"fexecve") else {
        return no_next();
    };
    // SAFETY: libc's fexecve has this signature; the arguments are the caller's.
    unsafe { std::mem::transmute::<*mut libc::c_void, Fexecve>(f)(fd, argv, envp) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_resolve_as_execvp_does() {
        assert!(resolves(c"/bin/sh", None));
        assert!(!resolves(c"/nonexistent/sh", None));
        assert!(resolves(c"sh", Some(c"/nonexistent:/bin")));
        assert!(!resolves(c"sh", Some(c"/nonexistent")));
        assert!(!resolves(c"", None));
        // Not executable: /etc/hostname-like plain files.
        assert!(!resolves(c"/etc/passwd", None));
    }
}
