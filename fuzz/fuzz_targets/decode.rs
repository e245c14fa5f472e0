//! Feeds arbitrary bytes to every reader of the format: the zero-copy decoder (with and
//! without the magic check), the streaming decoder, the framing scanner and the LBR payload
//! reader. None may panic; the slice and stream decoders must agree.
#![no_main]

use fxtrace_format::lbr::LbrSample;
use fxtrace_format::{scan_records, Decoder, StreamDecoder, Summary};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut summary = Summary::new();
    let mut from_slice = Vec::new();
    for item in Decoder::new(data) {
        match item {
            Ok(d) => {
                let _ = d.to_string();
                summary.add(&d);
                from_slice.push(d);
            }
            Err(e) => {
                let _ = e.to_string();
            }
        }
    }
    let from_stream: Vec<_> = StreamDecoder::new(data).map_while(Result::ok).collect();
    assert_eq!(from_stream, from_slice);
    for d in Decoder::bare(data).flatten() {
        let _ = d.to_string();
    }
    let scan = scan_records(data);
    assert!(scan.valid_len <= data.len());
    if let Ok(sample) = LbrSample::decode(data) {
        let _ = sample.display(1_000_000_000).to_string();
    }
});
