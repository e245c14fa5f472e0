#[fxtrace::traced(level = "info")]
fn f() {}

fn main() {
    f();
}
