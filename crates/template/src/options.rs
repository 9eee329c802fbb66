//! The options of one render ([`RenderOptions`], [`MissingKey`]): Go's `missingkey` option and
//! the safety limits.

/// What a missing map key evaluates to (Go's `missingkey` option).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MissingKey {
    /// `missingkey=default` / `invalid`: the key evaluates to no value (prints `<no value>`).
    #[default]
    Default,
    /// `missingkey=zero`: the element type's zero value (`interface{}` nil: prints `<no value>`).
    Zero,
    /// `missingkey=error`: execution stops with an error.
    Error,
}

impl std::str::FromStr for MissingKey {
    type Err = String;

    /// Parses Go's option text, with or without the `missingkey=` prefix.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.strip_prefix("missingkey=").unwrap_or(s) {
            "default" | "invalid" => Ok(MissingKey::Default),
            "zero" => Ok(MissingKey::Zero),
            "error" => Ok(MissingKey::Error),
            other => Err(format!("unrecognized option: missingkey={other}")),
        }
    }
}

/// Options for one render.
#[derive(Clone, Debug)]
pub struct RenderOptions {
    pub missing_key: MissingKey,
    /// The largest output, in bytes (default 256 KiB, as Tinkerbell).
    pub max_output_bytes: usize,
    /// The deepest chain of `{{template}}` calls (default 100).
    pub max_template_depth: usize,
    /// The most execution steps (nodes walked, commands evaluated; default 10 million).
    pub max_steps: u64,
}

/// The default output cap: 256 KiB.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 256 * 1024;

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions {
            missing_key: MissingKey::Default,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            max_template_depth: 100,
            max_steps: 10_000_000,
        }
    }
}

impl RenderOptions {
    /// Tinkerbell's settings: `missingkey=error`, 256 KiB output cap.
    pub fn tinkerbell() -> Self {
        RenderOptions {
            missing_key: MissingKey::Error,
            ..RenderOptions::default()
        }
    }
}
