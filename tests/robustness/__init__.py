"""Robustness suite: many runs at once, and every fault the front doors must contain."""
