struct Opaque;

#[fxtrace::traced(args(value: debug))]
fn f(value: Opaque) {
    let _ = value;
}

fn main() {
    f(Opaque);
}
