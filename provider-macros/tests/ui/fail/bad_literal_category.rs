#[fxtrace::traced(category = 5)]
fn f() {}

fn main() {
    f();
}
