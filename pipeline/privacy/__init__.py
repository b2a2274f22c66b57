"""Privacy accounting and noise: Algorithm 5's parameters and certificate, the noise sources, the
stability term, the parameter limits and the papers' sample-size formulas."""
