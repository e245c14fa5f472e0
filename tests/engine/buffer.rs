//! The memfd trace buffer: creation, seals, received fds, second mappings.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use fxtrace::buffer::header::{BufferingMode, MAGIC};
use fxtrace::buffer::{BufferError, TraceBuffer};
use fxtrace::engine::{CategoryFilter, Context, ContextConfig, NoHandler, StartMode};

fn raw_memfd(size: i64, seals: libc::c_int) -> OwnedFd {
    // SAFETY: valid C string; the returned fd is owned below.
    let fd = unsafe {
        libc::memfd_create(
            c"test".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    assert!(fd >= 0);
    // SAFETY: `fd` is a fresh descriptor owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: integer arguments on a valid fd.
    assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), size) }, 0);
    if seals != 0 {
        // SAFETY: integer arguments on a valid fd.
        let ret = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) };
        assert_eq!(ret, 0);
    }
    fd
}

fn seals_of(buffer: &TraceBuffer) -> libc::c_int {
    // SAFETY: integer arguments on a valid fd.
    unsafe { libc::fcntl(buffer.fd().unwrap().as_raw_fd(), libc::F_GET_SEALS) }
}

#[test]
fn create_makes_a_sealed_zero_filled_buffer() {
    let buffer = TraceBuffer::create(64 * 1024).unwrap();
    assert_eq!(buffer.size(), 64 * 1024);
    let seals = seals_of(&buffer);
    assert_eq!(
        seals,
        libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL
    );
    assert!(buffer
        .copy_range(0, 64 * 1024)
        .unwrap()
        .iter()
        .all(|&b| b == 0));
    // The size can no longer change.
    // SAFETY: integer arguments on a valid fd.
    let ret = unsafe { libc::ftruncate(buffer.fd().unwrap().as_raw_fd(), 4096) };
    assert_eq!(ret, -1);
    // The fd is close-on-exec.
    // SAFETY: integer arguments on a valid fd.
    let flags = unsafe { libc::fcntl(buffer.fd().unwrap().as_raw_fd(), libc::F_GETFD) };
    assert_ne!(flags & libc::FD_CLOEXEC, 0);
}

#[test]
fn create_rejects_bad_sizes() {
    for size in [0u64, 4095, 4097, 6144, (1 << 32) + 4096] {
        assert!(
            matches!(TraceBuffer::create(size), Err(BufferError::InvalidSize { size: s }) if s == size)
        );
    }
}

#[test]
fn from_fd_checks_size_and_seals() {
    let ok = raw_memfd(8192, libc::F_SEAL_SHRINK | libc::F_SEAL_GROW);
    assert_eq!(TraceBuffer::from_fd(ok).unwrap().size(), 8192);

    let unsealed = raw_memfd(8192, 0);
    match TraceBuffer::from_fd(unsealed) {
        Err(BufferError::MissingSeals { have, need }) => {
            assert_eq!(have, 0);
            assert_eq!(need, libc::F_SEAL_SHRINK | libc::F_SEAL_GROW);
        }
        other => panic!("expected MissingSeals, got {other:?}"),
    }
    let half = raw_memfd(8192, libc::F_SEAL_SHRINK);
    assert!(matches!(
        TraceBuffer::from_fd(half),
        Err(BufferError::MissingSeals { .. })
    ));

    let odd = raw_memfd(5000, libc::F_SEAL_SHRINK | libc::F_SEAL_GROW);
    assert!(matches!(
        TraceBuffer::from_fd(odd),
        Err(BufferError::InvalidSize { size: 5000 })
    ));
}

#[test]
fn from_fd_reports_the_failing_syscall() {
    // A pipe is not a memfd: fstat works (size 0) -> InvalidSize; an fd with seals unsupported
    // needs a regular size, so use a sized tmpfile: F_GET_SEALS fails with EINVAL.
    let file = tempfile::tempfile().unwrap();
    file.set_len(8192).unwrap();
    let fd: OwnedFd = file.into();
    match TraceBuffer::from_fd(fd) {
        Err(BufferError::Sys(e)) => {
            assert_eq!(e.op, "fcntl(F_GET_SEALS)");
            assert!(
                e.to_string().starts_with("fcntl(F_GET_SEALS) failed:"),
                "{e}"
            );
        }
        // Some filesystems support seals on regular files (returning no seals).
        Err(BufferError::MissingSeals { .. }) => {}
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn a_second_mapping_sees_the_header_and_records() {
    let buffer = TraceBuffer::create(16 * 1024).unwrap();
    let second = TraceBuffer::from_fd(buffer.try_clone_fd().unwrap()).unwrap();
    let config = ContextConfig {
        mode: BufferingMode::Circular,
        ..ContextConfig::default()
    };
    let ctx = Context::new(buffer, config, Arc::new(NoHandler)).unwrap();
    let header = second.header().load();
    assert_eq!(header.magic, MAGIC);
    assert_eq!(header.buffering_mode, 1);
    assert_eq!(header.total_size, 16 * 1024);
    assert_eq!(header.chunk_size(), ctx.chunk_size());
    assert!(header.validate(second.size()).is_ok());
    ctx.start(StartMode::ClearEntire, CategoryFilter::all())
        .unwrap();
    {
        let mut writer = ctx.acquire().unwrap();
        let mut slot = writer.reserve_durable(2).unwrap();
        slot.payload()[0] = 0x1122_3344;
        slot.commit(2 | (1 << 16));
    }
    let report = ctx.stop(std::time::Duration::from_secs(5)).unwrap();
    assert_eq!(report.durable_data_end, 16);
    let header = second.header().load();
    assert_eq!(header.durable_data_end, 16);
    let durable = second.copy_range(128, 16).unwrap();
    assert_eq!(
        u64::from_le_bytes(durable[..8].try_into().unwrap()),
        2 | (2 << 4) | (1 << 16)
    );
    assert_eq!(
        u64::from_le_bytes(durable[8..].try_into().unwrap()),
        0x1122_3344
    );
}

#[test]
fn reads_outside_the_buffer_are_errors() {
    let buffer = TraceBuffer::create(4096).unwrap();
    assert!(matches!(
        buffer.copy_range(4000, 100),
        Err(BufferError::OutOfRange { .. })
    ));
    assert!(matches!(
        buffer.copy_range(u64::MAX, 2),
        Err(BufferError::OutOfRange { .. })
    ));
    assert_eq!(buffer.copy_range(4000, 96).unwrap().len(), 96);
}
