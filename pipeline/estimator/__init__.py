"""pcqr behind scikit-learn: ``PrivateClassifier`` and model selection under a privacy budget."""
