//! `strata-proxy`: the HTTP front end clients talk to.
#![forbid(unsafe_code)]
