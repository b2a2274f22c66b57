"""The public answered-query log: its batch files and hash chain, the repeats index, replay."""
