#[fxtrace::traced(args())]
fn f() {}

fn main() {
    f();
}
