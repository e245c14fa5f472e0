#[fxtrace::traced(args(id, len))]
fn f(id: u64, size: usize) -> usize {
    id as usize + size
}

fn main() {
    f(1, 2);
}
