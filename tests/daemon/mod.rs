//! A daemon-style program in a test: it closes descriptors it did not open and opens its own
//! files under the same numbers. Used by the tests of descriptors fxtrace loses to the program.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::{AsRawFd, FromRawFd};

/// The descriptor numbers open in this process (0..4096), read without opening one.
pub(crate) fn open_fds() -> BTreeSet<i32> {
    (0..4096)
        // SAFETY: F_GETFD only reads a descriptor's flags; a closed number fails with EBADF.
        .filter(|&fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0)
        .collect()
}

/// The descriptors open in this process (0..4096), each with the file it names (device and
/// inode), read without opening one.
pub(crate) fn open_fd_files() -> BTreeMap<i32, (u64, u64)> {
    (0..4096)
        .filter_map(|fd| {
            // SAFETY: all-zero bytes are a valid `stat` (a plain C struct).
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: fstat only writes into `st`; a closed number fails with EBADF.
            let open = unsafe { libc::fstat(fd, &mut st) } == 0;
            open.then_some((fd, (st.st_dev, st.st_ino)))
        })
        .collect()
}

/// The descriptors opened since `before` ([`open_fd_files`]): new numbers, and numbers that
/// name another file now (a number another test's thread closed and this one was given).
pub(crate) fn opened_since(before: &BTreeMap<i32, (u64, u64)>) -> BTreeSet<i32> {
    open_fd_files()
        .into_iter()
        .filter(|(fd, file)| before.get(fd) != Some(file))
        .map(|(fd, _)| fd)
        .collect()
}

/// Puts a new file reading "program file N" under each number `N` of `fds`, closing what was
/// there (as the program would), and returns the files with their numbers.
pub(crate) fn take_over(fds: &[i32]) -> Vec<(i32, File)> {
    fds.iter()
        .map(|&fd| {
            let mut f = tempfile::tempfile().unwrap();
            write!(f, "program file {fd}").unwrap();
            // fxtrace may have closed `fd` already (it stops when it sees the first loss), and
            // a new file may then get that very number: move the file above every number
            // taken first, so that dup2 never replaces the file's own descriptor.
            // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor ≥ 4096 for the open file `f`.
            let high = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 4096) };
            assert!(high >= 4096);
            // The low number goes before dup2 (it may be `fd` itself).
            drop(f);
            // SAFETY: `high` was just made and is owned here alone.
            let f = unsafe { File::from_raw_fd(high) };
            // SAFETY: dup2 closes the descriptor (as the program would) and puts the
            // program's file under its number.
            assert_eq!(unsafe { libc::dup2(f.as_raw_fd(), fd) }, fd);
            // SAFETY: `fd` is now a descriptor owned by the test alone.
            (fd, unsafe { File::from_raw_fd(fd) })
        })
        .collect()
}

/// The program's files are open and intact (and still writable).
pub(crate) fn assert_intact(files: &mut [(i32, File)]) {
    for (fd, f) in files {
        let mut text = String::new();
        f.rewind().unwrap();
        f.read_to_string(&mut text).unwrap();
        assert_eq!(text, format!("program file {fd}"));
        f.write_all(b"!").unwrap();
    }
}
