//! Every kind of function the attribute accepts.
#![deny(warnings)]

use std::borrow::Cow;
use std::fmt::Debug;

use fxtrace::traced;

/// Inner attributes and doc comments stay where they were.
#[traced]
#[must_use]
fn with_inner_attribute() -> u32 {
    #![allow(unused_variables)]
    let unused = 1;
    2
}

#[traced(args(value))]
fn generic<T: Copy + Into<u64>>(value: u64, other: T) -> u64 {
    value + other.into()
}

#[traced]
fn where_clause<T>(items: &[T]) -> usize
where
    T: Debug,
{
    items.len()
}

#[traced(args(s))]
fn lifetimes<'a>(s: &'a str, _t: &str) -> &'a str {
    s
}

#[traced]
fn returns_impl(n: u32) -> impl Iterator<Item = u32> {
    0..n
}

#[traced(args(a))]
fn patterns((a, b): (u32, u32), Wrapper(c): Wrapper, mut d: u32) -> u32 {
    d += 1;
    a + b + c + d
}

struct Wrapper(u32);

#[traced(args(p, q, r, s, t))]
fn pointers_and_strings(
    p: *const u8,
    q: std::ptr::NonNull<u8>,
    r: Cow<'_, str>,
    s: String,
    t: &mut i64,
) -> usize {
    *t += 1;
    let _ = (p, q);
    r.len() + s.len()
}

#[traced]
unsafe fn unsafe_fn(p: *const u32) -> u32 {
    // SAFETY: the caller passes a valid pointer.
    unsafe { *p }
}

#[traced]
extern "C" fn extern_c(x: i32) -> i32 {
    x
}

#[traced]
fn never_returns_normally() -> ! {
    panic!("never called")
}

trait Shape {
    fn area(&self) -> f64;

    #[traced]
    fn describe(&self) -> String {
        format!("area {}", self.area())
    }
}

#[derive(Debug, Clone)]
struct Square<T> {
    side: T,
}

impl<T: Into<f64> + Copy + Debug> Square<T> {
    #[traced]
    fn new(side: T) -> Self {
        Square { side }
    }

    #[traced(args(self: debug))]
    fn by_ref(&self) -> T {
        self.side
    }

    #[traced(args(k))]
    fn by_mut(&mut self, k: f64) -> f64 {
        self.side.into() * k
    }

    #[traced]
    fn by_value(self) -> T {
        self.side
    }

    #[traced]
    fn boxed(self: Box<Self>) -> T {
        self.side
    }

    #[traced(args(x))]
    async fn async_by_ref(&self, x: u32) -> f64 {
        self.side.into() + x as f64
    }
}

impl<T: Into<f64> + Copy + Debug> Shape for Square<T> {
    #[traced]
    fn area(&self) -> f64 {
        self.side.into() * self.side.into()
    }
}

#[derive(Debug)]
struct Error;

#[traced]
async fn async_question_mark(ok: bool) -> Result<u32, Error> {
    let v: u32 = if ok { Ok(1) } else { Err(Error) }?;
    Ok(v)
}

#[traced]
async fn async_impl_return() -> impl Debug {
    3u8
}

#[traced]
async fn async_borrowing<'a>(s: &'a str) -> &'a str {
    s
}

#[traced]
async fn async_unit() {}

fn assert_send<F: std::future::Future + Send>(f: F) -> F {
    f
}

fn main() {
    let _ = with_inner_attribute();
    generic(1, 2u8);
    where_clause(&[1, 2]);
    lifetimes("a", "b");
    returns_impl(3).count();
    patterns((1, 2), Wrapper(3), 4);
    let mut t = 0;
    let mut byte = 0u8;
    pointers_and_strings(
        std::ptr::null(),
        std::ptr::NonNull::from(&mut byte),
        Cow::Borrowed("x"),
        String::new(),
        &mut t,
    );
    let v = 5u32;
    // SAFETY: `v` is a live u32.
    unsafe { unsafe_fn(&v) };
    extern_c(1);
    let _ = never_returns_normally as fn() -> !;
    let mut square = Square::new(2.0f32);
    square.by_ref();
    square.by_mut(1.0);
    square.describe();
    Box::new(square.clone()).boxed();
    let _ = assert_send(square.async_by_ref(1));
    square.by_value();
    let _ = assert_send(async_question_mark(true));
    let _ = async_impl_return();
    let _ = async_borrowing("x");
    let _ = assert_send(async_unit());
}
