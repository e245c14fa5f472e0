#[fxtrace::traced(name = "a", category = "c", name = "b")]
fn f() {}

fn main() {
    f();
}
