//! Thin binary around [`strata_supervisor`].
fn main() {
    eprintln!("strata-supervisor: not implemented yet");
    std::process::exit(1);
}
