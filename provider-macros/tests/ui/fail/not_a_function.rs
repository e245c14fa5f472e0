#[fxtrace::traced]
struct NotAFunction;

fn main() {
    let _ = NotAFunction;
}
