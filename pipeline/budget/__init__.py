"""The privacy-budget ledger and dataset identity: charges, sessions, fingerprints, sketches, overlap."""
