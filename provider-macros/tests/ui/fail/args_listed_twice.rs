#[fxtrace::traced(args(id, id))]
fn f(id: u64) -> u64 {
    id
}

fn main() {
    f(1);
}
