//! A program whose main thread ends without ending the process (`pthread_exit`, `thrd_exit`,
//! or a cancellation) ends when its last thread ends, as it does without the object: the
//! constructor arms [`fxtrace::helper_thread::exit_with_the_last_program_thread`] on the main
//! thread (the object's threads, and those of a program's own copy of fxtrace, never end on
//! their own).

/// On the main thread (the constructor's, under `LD_PRELOAD`): have its end start the
/// watcher. Elsewhere (a `dlopen` from another thread) nothing is armed.
pub(crate) fn arm() {
    fxtrace::helper_thread::exit_with_the_last_program_thread();
}
