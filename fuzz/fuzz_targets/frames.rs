#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| recalld_fuzz::frames(data));
