#![no_main]
//! `kubecast::fuzz::otlp_answer` under libFuzzer.

libfuzzer_sys::fuzz_target!(|data: &[u8]| kubecast::fuzz::otlp_answer(data));
