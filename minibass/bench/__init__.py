"""Benchmarks (reported, never asserted): ``python -m minibass.bench {decode,attention,speculative,peers,policies}``."""
