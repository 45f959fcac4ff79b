#![no_main]
//! `kubecast::fuzz::replay_record` under libFuzzer.

libfuzzer_sys::fuzz_target!(|data: &[u8]| kubecast::fuzz::replay_record(data));
