"""A session: its coordinator (the sparse vector), state, lock, answer loop, public log, commit
order, repeats index, replay and evaluation."""
