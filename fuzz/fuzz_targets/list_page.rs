#![no_main]
//! `kubecast::fuzz::list_page` under libFuzzer.

libfuzzer_sys::fuzz_target!(|data: &[u8]| kubecast::fuzz::list_page(data));
