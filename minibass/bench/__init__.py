"""Benchmarks (reported, never asserted): ``python -m minibass.bench {decode}``."""
