//! The worker's claim-check options.

use clap::Args;

/// The claim-check: where large contexts go.
#[derive(Debug, Args)]
#[command(next_help_heading = "Claim-check (contexts larger than one NATS message)")]
pub struct ClaimArgs {
    /// Envelopes over this many bytes keep their large parts (messages, variables,
    /// outputs) in the BATON_CLAIMS object store [default: half the server's max_payload]
    #[arg(long, env = "BATON_CLAIM_THRESHOLD", value_name = "BYTES")]
    pub claim_threshold: Option<usize>,

    /// How long claim-check objects are kept, in seconds; sessions must end within it
    /// (applies when the bucket is created)
    #[arg(long, env = "BATON_CLAIM_MAX_AGE_SECS", default_value_t = 7 * 24 * 3600)]
    pub claim_max_age_secs: u64,

    /// Size limit of the claim-check bucket in bytes (applies when the bucket is created)
    /// [default: no limit]
    #[arg(long, env = "BATON_CLAIM_MAX_BYTES", value_name = "BYTES")]
    pub claim_max_bytes: Option<u64>,

    /// The largest envelope a worker accepts once its claims are restored, in bytes
    #[arg(long, env = "BATON_MAX_CONTEXT_BYTES", default_value_t = 256 * 1024 * 1024)]
    pub max_context_bytes: usize,
}

impl ClaimArgs {
    /// The settings these arguments describe.
    pub fn settings(&self) -> baton_nats::ClaimSettings {
        let mut settings = baton_nats::ClaimSettings::default();
        settings.threshold = self.claim_threshold;
        settings.max_age = std::time::Duration::from_secs(self.claim_max_age_secs.max(1));
        settings.max_bytes = self.claim_max_bytes;
        settings.max_restored = self.max_context_bytes;
        settings
    }
}
