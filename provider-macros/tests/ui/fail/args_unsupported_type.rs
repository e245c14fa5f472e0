#[fxtrace::traced(args(bytes))]
fn f(bytes: Vec<u8>) -> usize {
    bytes.len()
}

fn main() {
    f(vec![1]);
}
