//! The config fingerprint the supervisor and proxy compare in their hello,
//! so a proxy configured differently from its supervisor is refused
//! instead of misrouting or disagreeing on the scheduling rules. It covers
//! the model registry (the text [`canonical_text`]) and the other settings
//! ([`settings_text`]), defaults applied. Which keys it covers is declared
//! in [`super::keys::KEYS`] (`fingerprinted`); the keys it leaves out are
//! settings one daemon acts on alone (the proxy's listener and
//! `stream_idle_ms`, the supervisor's prefetch and probe settings, each
//! model's `weights`), so changing them needs a restart of that daemon
//! only. Not every such key is left out: those older than that rule (such
//! as `python` or `max_request_body_bytes`) stay in, so existing configs
//! keep their fingerprint. A test (`keys_tests.rs`) requires each declared key to change the
//! fingerprint exactly when it is declared `fingerprinted`. Profile
//! contents are not part of it: both daemons read the same files. Both
//! digests live here ([`Config::fingerprint`], [`Registry::fingerprint`]),
//! beside the texts they hash.
//!
//! The digest is FNV-1a 64 over a canonical text, not `std`'s `Hasher`:
//! `DefaultHasher` is randomly keyed per process and its algorithm may
//! change between Rust releases, while both processes (possibly built at
//! different times) must compute the same value.
//!
//! The text is one line per fact, every string JSON-quoted so no value can
//! imitate a separator:
//!
//! ```text
//! strata-router registry v1
//! backend_port 8095
//! model "ID" family FAMILY upstream "NAME" profile "PATH"|null installed BOOL compatible BOOL
//! ...one model line per entry, in ID order...
//! enabled ["ID",...]
//! alias FAMILY ["ID",...]      (effective list; one line per configured alias, hidden ones too)
//! ```

use super::json_walk::quote;
use super::registry::Registry;
use super::{Config, Readiness};
use std::fmt::Write;

impl Config {
    /// The fingerprint of the whole effective configuration (the registry,
    /// which includes `backend_port`, and every other setting, defaults
    /// applied, but not the proxy's own listener settings) that both
    /// daemons compare in their hello.
    pub fn fingerprint(&self) -> u64 {
        let mut text = canonical_text(&self.registry);
        text.push_str(&settings_text(self));
        fnv1a64(text.as_bytes())
    }
}

impl Registry {
    /// A stable 64-bit digest of everything that decides where a request
    /// goes: each model's ID, family, upstream model, profile path,
    /// `installed` and `compatible`; the enabled list; each alias'
    /// effective list; and `backend_port`. The supervisor and proxy
    /// compare it in their hello. The hashed text is documented in
    /// `protocol/src/config/fingerprint.rs`.
    pub fn fingerprint(&self) -> u64 {
        fnv1a64(canonical_text(self).as_bytes())
    }
}

/// FNV-1a, 64-bit.
fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(OFFSET_BASIS, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    })
}

/// The text the fingerprint hashes; see the module docs.
fn canonical_text(registry: &Registry) -> String {
    let list = |ids: &[String]| {
        let quoted: Vec<String> = ids.iter().map(|id| quote(id)).collect();
        format!("[{}]", quoted.join(","))
    };
    let mut text = String::from("strata-router registry v1\n");
    // Writing to a String cannot fail.
    let _ = writeln!(text, "backend_port {}", registry.backend_port());
    for model in registry.models() {
        let profile = model
            .profile
            .as_ref()
            .map_or_else(|| "null".to_owned(), |p| quote(&p.to_string_lossy()));
        let _ = writeln!(
            text,
            "model {} family {} upstream {} profile {} installed {} compatible {}",
            quote(&model.id),
            model.family,
            quote(&model.upstream_model),
            profile,
            model.installed,
            model.compatible
        );
    }
    let _ = writeln!(text, "enabled {}", list(registry.enabled_ids()));
    for alias in registry.configured_aliases() {
        let _ = writeln!(text, "alias {} {}", alias.family, list(&alias.effective));
    }
    text
}

/// Every setting besides the registry, one line each, in a fixed order:
///
/// ```text
/// settings v1
/// python "PATH"
/// ...one line per setting...
/// model "ID" quantization "Q" fine_tune "F"|null metadata JSON
/// ```
fn settings_text(config: &Config) -> String {
    let path = |p: &std::path::Path| quote(&p.to_string_lossy());
    let log = &config.request_log;
    let timers = &config.timers;
    let scheduling = &config.scheduling;
    let mut text = String::from("settings v1\n");
    let lines = [
        format!("python {}", path(&config.python)),
        format!("strata_dir {}", path(&config.strata_dir)),
        format!("control_socket {}", path(&config.control_socket)),
        format!("supervisor_socket {}", path(&config.supervisor_socket)),
        format!("max_request_body_bytes {}", config.max_request_body_bytes),
        format!(
            "request_log {} {} {} {}",
            log.path.as_deref().map_or_else(|| "null".to_owned(), path),
            log.max_bytes,
            log.rotate_files,
            log.capacity
        ),
        format!(
            "scheduling wait_when_busy {} max_pending {} cache_max_active {}",
            scheduling.wait_when_busy, scheduling.max_pending, scheduling.cache_max_active
        ),
        format!(
            "timers queue {} response {} startup {} cooldown {} idle {} shutdown {} drain {} grace {} cache_lookup {}{}",
            timers.queue_ms,
            timers.response_ms,
            timers.startup_ms,
            timers.cooldown_ms,
            timers.idle_ms,
            timers.shutdown_ms,
            timers.drain_ms,
            timers.model_grace_ms,
            timers.cache_lookup_ms,
            // Written only when set, so a config without it keeps the
            // fingerprint it had before the key existed (a proxy and a
            // supervisor from either side of that change still agree).
            if timers.model_hold_max_ms > 0 {
                format!(" hold_max {}", timers.model_hold_max_ms)
            } else {
                String::new()
            }
        ),
    ];
    for line in lines {
        let _ = writeln!(text, "{line}");
    }
    // Written only when not the default, so configs without the key keep the
    // fingerprint they had before it existed.
    // Only when growth is on, so configs without the key keep their fingerprint.
    if config.timers.cooldown_max_ms != config.timers.cooldown_ms {
        let _ = writeln!(text, "cooldown_max {}", config.timers.cooldown_max_ms);
    }
    if config.readiness != Readiness::Auto {
        let _ = writeln!(text, "readiness {}", config.readiness.as_str());
    }
    for model in config.registry.models() {
        let metadata = serde_json::json!({
            "meta": model.metadata.meta,
            "architecture": model.metadata.architecture,
            "thinking": model.metadata.thinking,
        });
        let _ = writeln!(
            text,
            "model {} quantization {} fine_tune {} metadata {}",
            quote(&model.id),
            quote(&model.quantization),
            model
                .fine_tune
                .as_deref()
                .map_or_else(|| "null".to_owned(), quote),
            metadata
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::fnv1a64;

    #[test]
    fn fnv1a64_matches_reference_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }
}
