"""The gates: how a batch of vote counts becomes released labels, and what each release spends."""
