#![no_main]
//! `kubecast::fuzz::config` under libFuzzer.

libfuzzer_sys::fuzz_target!(|data: &[u8]| kubecast::fuzz::config(data));
