"""Move verified checkpoints down the chain of tiers."""
