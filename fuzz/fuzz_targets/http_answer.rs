#![no_main]
//! `kubecast::fuzz::http_answer` under libFuzzer.

libfuzzer_sys::fuzz_target!(|data: &[u8]| kubecast::fuzz::http_answer(data));
