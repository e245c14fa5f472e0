//! The `#[traced]` attribute of fxtrace (re-exported as `fxtrace::traced`; use it from
//! there: the expansion calls `fxtrace::__private`).
//!
//! Layout (after `tracing-attributes`): `args.rs` parses the options into a struct,
//! `expand.rs` generates the code; this file is the entry point and the documentation.
//! Errors are `syn::Error`s spanned on the offending token; nothing here panics. On an error
//! the function is emitted unchanged next to the error, so that it is the only one.
//!
//! Feature `enable` (default; fxtrace's `instrument` turns it on): without it the attribute
//! validates and returns the function untouched (tracing compiled out).

use proc_macro::TokenStream;

mod args;
mod expand;

/// Trace every call of a function as a duration event.
///
/// ```ignore
/// #[fxtrace::traced]
/// fn parse(input: &str) -> usize { input.len() }
///
/// #[fxtrace::traced(category = "db", name = "query", args(id, sql, opts: debug))]
/// fn query(id: u64, sql: &str, opts: &Options) -> Result<Rows, Error> { .. }
/// ```
///
/// # Options
///
/// - `category = "db"`: the event's category. Default: the module path of the function
///   (`module_path!()`, as `tracing`'s default target), so `--categories 'myapp*'` selects a
///   crate.
/// - `name = "query"`: the event's name. Default: the function's path as the compiler prints
///   it (`std::any::type_name` of a type local to the function, a constant), e.g.
///   `myapp::db::query`, `myapp::Pool<_>::get` for a method, `<myapp::Pool as
///   myapp::Source>::open` for a trait method.
/// - `args(id, len)`: record these parameters as typed arguments: integers, floats, `bool`,
///   `&str` / `String`, raw pointers (and references to those). Any other type is a compile
///   error on the parameter's name unless it is marked `args(req: debug)`, which records its
///   `Debug` format (cut at 1024 bytes). Nothing is recorded unless listed.
/// - `crate = path`: where fxtrace is, for crates that re-export it (default `::fxtrace`).
///
/// Each option may appear once.
///
/// # What is written
///
/// - A function: one duration-complete record (begin and end ticks) when it returns, by any
///   way: normally, early `return`, `?`, or a panic that unwinds. Scalar arguments ride on
///   that record. When an argument is a non-empty string or `: debug`, the arguments are
///   written at entry on a duration-begin record (the body may move the string) and the exit
///   writes a duration-end record (so a call's records depend on its arguments' values: an
///   empty string rides on the one duration-complete record).
/// - A synchronous body runs as a `move` closure called once when every parameter is cheap to
///   move (references, pointers, primitive scalars, `Box`, `Rc`, `Arc`, `String`, `Vec`):
///   in place when no trace runs (the untraced call then costs what the plain function costs,
///   plus one load and a branch), from an out-of-line function around it otherwise. So:
///   - the body is compiled once per path (up to twice the plain function's code), and
///     profiles and backtraces show it as `{{closure}}` under an extra `call_traced` frame
///     while a trace runs;
///   - parameters still drop after the span ends, but those the body uses drop in the order
///     it first uses them (a plain function drops them in reverse order of declaration);
///   - names that `type_name` gives to items declared in the body gain a `{{closure}}`
///     segment (a `#[traced]` function nested in another's body: set its `name`).
///
///   The body stays in place (a guard around it, and a few more instructions when no trace
///   runs) for a parameter of any other type (a copy into the closure could cost more than the
///   closure saves), a return type that mentions `impl Trait` or a macro, `#[track_caller]`
///   (one inherited from a trait's declaration is not visible to the attribute: write it on
///   the method too).
/// - An `async fn`: the future is instrumented (no guard is held across `.await`): an async
///   begin record (with the arguments) at the first poll, one duration per poll on the thread
///   that polled, and an async end when the future completes (or is dropped unfinished: then
///   with the argument `cancelled = true`). Begin and end share a correlation id from a
///   process-wide counter.
///
/// # Compiled out
///
/// Without fxtrace's `instrument` feature (on by default), the attribute checks its options
/// and the argument names as usual, then returns the function untouched.
///
/// # Cost
///
/// With no trace running in the process: one relaxed load and a predictable branch per call
/// (and per poll). With a trace: the category is checked once per trace per call site (a
/// `static` `CallSite`), then two clock reads and one record.
#[proc_macro_attribute]
pub fn traced(attr: TokenStream, item: TokenStream) -> TokenStream {
    let item = proc_macro2::TokenStream::from(item);
    let function = match expand::parse_item(item.clone()) {
        Ok(function) => function,
        Err(error) => {
            let error = error.to_compile_error();
            return quote::quote!(#error #item).into();
        }
    };
    let expanded = syn::parse::<args::TracedArgs>(attr)
        .and_then(|args| expand::expand(args, &function, cfg!(feature = "enable")));
    match expanded {
        Ok(tokens) => tokens.into(),
        Err(error) => {
            let error = error.to_compile_error();
            let untouched = function.untouched();
            quote::quote!(#error #untouched).into()
        }
    }
}
