//! `fxtrace` built without its `instrument` feature (`default-features = false`, as a
//! program turns tracing off): `#[traced]` leaves functions untouched, so a traced function
//! writes nothing even under a running trace (the attribute's options are still checked: the
//! macro crate's unit tests). A crate of its own, outside the root workspace, so that no other
//! member turns the feature back on; `.ci/run` runs its test.

#[cfg(test)]
#[path = "../traced_support/mod.rs"]
mod traced_support;

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};

    use crate::traced_support::{names, serial, trace};

    #[fxtrace::traced(category = "out", args(x, label: debug))]
    fn compiled_out(x: u32, label: &str) -> u32 {
        x + label.len() as u32
    }

    #[fxtrace::traced]
    async fn compiled_out_async() -> u32 {
        7
    }

    /// Polls a future that never waits to its end.
    fn ready<F: Future>(future: F) -> F::Output {
        struct NoWake;
        impl Wake for NoWake {
            fn wake(self: Arc<Self>) {}
        }
        let waker = Waker::from(Arc::new(NoWake));
        match pin!(future).poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("the future waited"),
        }
    }

    #[test]
    fn traced_functions_write_nothing() {
        let _s = serial();
        let (v, events) = trace(|| {
            fxtrace::instant("out", "marker", fxtrace::Scope::Thread, &[]);
            compiled_out(1, "ab") + ready(compiled_out_async())
        });
        assert_eq!(v, 10);
        assert_eq!(names(&events), ["marker"], "only the explicit instant");
    }
}
