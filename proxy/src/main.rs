//! Thin binary around [`strata_proxy`].
#![forbid(unsafe_code)]
fn main() {
    eprintln!("strata-proxy: not implemented yet");
    std::process::exit(1);
}
