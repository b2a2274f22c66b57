"""The session report: its data from the public log, the figures, the HTML page, accuracy against truth."""
