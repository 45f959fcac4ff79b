#![no_main]
//! `kubecast::fuzz::watch_line` under libFuzzer.

libfuzzer_sys::fuzz_target!(|data: &[u8]| kubecast::fuzz::watch_line(data));
