#[fxtrace::traced(category = "")]
fn f() {}

fn main() {
    f();
}
