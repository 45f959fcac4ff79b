#![no_main]
//! `kubecast::fuzz::merge_patch` under libFuzzer.

libfuzzer_sys::fuzz_target!(|data: &[u8]| kubecast::fuzz::merge_patch(data));
