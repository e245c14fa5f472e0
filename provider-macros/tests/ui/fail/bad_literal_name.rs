#[fxtrace::traced(name = query)]
fn f() {}

fn main() {
    f();
}
