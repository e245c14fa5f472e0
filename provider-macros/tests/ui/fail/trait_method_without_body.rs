trait Store {
    #[fxtrace::traced]
    fn get(&self, key: u64) -> u64;
}

fn main() {}
