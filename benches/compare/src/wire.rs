//! The one line a candidate process prints for the parent: `PREFIX` then tab-separated
//! `key=value` fields, `check` last (free text without tabs). A failed candidate prints
//! `ERROR_PREFIX` and the message instead, so that the parent stops waiting (and a Tracy
//! client, which keeps its process alive until the consumer lets go, is released).

use crate::candidates::{Measured, Outcome};
use crate::measure::{Ratio, Scaling};
use crate::Error;

/// Start of a result line.
pub(crate) const PREFIX: &str = "fxtrace-compare-result";
/// Start of an error line.
pub(crate) const ERROR_PREFIX: &str = "fxtrace-compare-error";

/// One round of one candidate, as the parent reads it.
#[derive(Debug, Clone)]
pub(crate) struct Sample {
    /// The ratio to `rdtscp`, or the 2-thread scaling.
    pub(crate) value: f64,
    /// ns per call (one thread).
    pub(crate) ns: f64,
    /// ns per `rdtscp` in the same process (ratio candidates).
    pub(crate) rdtscp_ns: Option<f64>,
    /// Warm-up blocks.
    pub(crate) warmup_blocks: u32,
    /// Whether the warm-up ended on a block without page fault.
    pub(crate) settled: bool,
    /// Minor faults during the measured blocks.
    pub(crate) faults: u64,
    /// Share of the measured blocks' wall time the thread was off the CPU.
    pub(crate) off_cpu: f64,
    /// The consumer check.
    pub(crate) check: String,
}

/// The result line of `outcome`.
pub(crate) fn encode(outcome: &Outcome) -> String {
    let check = outcome.check.replace(['\t', '\n'], " ");
    match outcome.measured {
        Measured::Ratio(Ratio {
            ratio,
            ns,
            rdtscp_ns,
            warmup_blocks,
            settled,
            faults,
            off_cpu,
        }) => format!(
            "{PREFIX}\tvalue={ratio}\tns={ns}\trdtscp_ns={rdtscp_ns}\twarmup={warmup_blocks}\t\
             settled={}\tfaults={faults}\toff_cpu={off_cpu}\tcheck={check}",
            u8::from(settled)
        ),
        Measured::Scaling(Scaling {
            scaling,
            ns,
            warmup_blocks,
            settled,
            faults,
            off_cpu,
        }) => format!(
            "{PREFIX}\tvalue={scaling}\tns={ns}\twarmup={warmup_blocks}\tsettled={}\t\
             faults={faults}\toff_cpu={off_cpu}\tcheck={check}",
            u8::from(settled)
        ),
    }
}

/// Parse a result line (the caller checked the prefix).
pub(crate) fn decode(line: &str) -> Result<Sample, Error> {
    let bad = |why: &str| Error::Child(format!("unreadable result line ({why}): {line}"));
    let mut sample = Sample {
        value: f64::NAN,
        ns: f64::NAN,
        rdtscp_ns: None,
        warmup_blocks: 0,
        settled: false,
        faults: 0,
        off_cpu: 0.0,
        check: String::new(),
    };
    for field in line.split('\t').skip(1) {
        let (key, value) = field
            .split_once('=')
            .ok_or_else(|| bad("field without `=`"))?;
        let number = || value.parse::<f64>().map_err(|_| bad(key));
        let integer = || value.parse::<u64>().map_err(|_| bad(key));
        match key {
            "value" => sample.value = number()?,
            "ns" => sample.ns = number()?,
            "rdtscp_ns" => sample.rdtscp_ns = Some(number()?),
            "warmup" => sample.warmup_blocks = integer()? as u32,
            "settled" => sample.settled = integer()? == 1,
            "faults" => sample.faults = integer()?,
            "off_cpu" => sample.off_cpu = number()?,
            "check" => sample.check = value.to_string(),
            _ => return Err(bad("unknown field")),
        }
    }
    if sample.value.is_nan() || sample.ns.is_nan() {
        return Err(bad("no value"));
    }
    Ok(sample)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ratio_line_round_trips() {
        let outcome = Outcome {
            measured: Measured::Ratio(Ratio {
                ratio: 1.5,
                ns: 27.0,
                rdtscp_ns: 18.0,
                warmup_blocks: 4,
                settled: true,
                faults: 0,
                off_cpu: 0.25,
            }),
            check: "fxtrace:\t10 records".into(),
        };
        let sample = decode(&encode(&outcome)).unwrap();
        assert_eq!(
            (sample.value, sample.ns, sample.rdtscp_ns),
            (1.5, 27.0, Some(18.0))
        );
        assert_eq!(
            (sample.warmup_blocks, sample.settled, sample.faults),
            (4, true, 0)
        );
        assert_eq!(sample.off_cpu, 0.25);
        assert_eq!(sample.check, "fxtrace: 10 records");
    }

    #[test]
    fn a_line_without_value_is_refused() {
        assert!(decode(&format!("{PREFIX}\tns=3")).is_err());
        assert!(decode(&format!("{PREFIX}\tvalue=x\tns=3")).is_err());
    }
}
