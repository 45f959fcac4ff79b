#![no_main]
//! `kubecast::fuzz::redaction` under libFuzzer.

libfuzzer_sys::fuzz_target!(|data: &[u8]| kubecast::fuzz::redaction(data));
