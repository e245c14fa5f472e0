#[fxtrace::traced(crate = fxtrace, crate = fxtrace)]
fn f() {}

fn main() {
    f();
}
