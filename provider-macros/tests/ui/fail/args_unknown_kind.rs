#[fxtrace::traced(args(path: display))]
fn f(path: &str) -> usize {
    path.len()
}

fn main() {
    f("a");
}
