//! Every option, alone and combined, in any order.
use fxtrace::traced;

#[derive(Debug)]
struct Req {
    id: u32,
}

#[traced]
fn bare() {}

#[traced(category = "db")]
fn category() {}

#[traced(name = "query")]
fn name() {}

#[traced(args(id))]
fn one_arg(id: u64) -> u64 {
    id
}

#[traced(args(req: debug, id,))]
fn debug_and_trailing_comma(req: &Req, id: u32) -> u32 {
    req.id + id
}

#[traced(name = "n", args(a, b), category = "c",)]
fn all_reordered(a: i8, b: &str) -> usize {
    a as usize + b.len()
}

#[traced(crate = fxtrace, category = "c")]
fn explicit_crate() {}

#[traced(crate = ::fxtrace)]
fn explicit_absolute_crate() {}

#[traced(args(a, b, c, d, e, f, g, h, i, j, k, l, m, n, o))]
#[allow(clippy::too_many_arguments)]
fn fifteen(
    a: u8, b: u8, c: u8, d: u8, e: u8, f: u8, g: u8, h: u8,
    i: u8, j: u8, k: u8, l: u8, m: u8, n: u8, o: u8,
) -> u32 {
    [a, b, c, d, e, f, g, h, i, j, k, l, m, n, o].iter().map(|&v| v as u32).sum()
}

fn main() {
    bare();
    category();
    name();
    one_arg(1);
    debug_and_trailing_comma(&Req { id: 1 }, 2);
    all_reordered(1, "x");
    explicit_crate();
    explicit_absolute_crate();
    fifteen(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
}
