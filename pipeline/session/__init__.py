"""A session: its state, lock, ledger row, answer loop, commit order and training."""
