#[fxtrace::traced(args(x), name = "n", args(y))]
fn f(x: u32, y: u32) -> u32 {
    x + y
}

fn main() {
    f(1, 2);
}
