#[fxtrace::traced(category = "a", name = "n", category = "b")]
fn f() {}

fn main() {
    f();
}
