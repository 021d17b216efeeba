"""The oracle: check another engine's attention kernel, rejection sampler or speculative generator.

    from minibass import oracle
    oracle.check_attention(fn)            # fn(q, k_cache, v_cache, q_lens, kv_lens, *, scale=None) -> out
    oracle.check_sampler(fn)              # fn(draft_tokens, draft_probs, target_probs, *, generator)
    oracle.check_generator(generate_fn)   # generate_fn(target_dir, draft_dir, prompt, n_tokens, n_samples, sampling, seed)
    oracle.check_given_uniforms(fn)       # fn(draft_tokens, draft_probs, target_probs, u_accept, u_next)

Each returns a ``Verdict``: ``ok``, ``checks`` (rows with statistic and threshold), ``str(v)``
for people, ``v.to_dict()`` for machines, ``v.raise_for_failure()`` inside a test.

Files, in reading order: ``verdict.py`` (the answer), ``stats.py`` (the G-test, views, power),
``sampler.py``, ``attention.py``, ``generator.py`` (the three checks), ``known_bugs.py`` (broken
samplers and kernels every check must catch), ``adapters.py`` (transformers, and minibass itself).
"""

from . import adapters, known_bugs, stats
from .attention import ATOL, check_attention
from .generator import check_generator
from .sampler import check_given_uniforms, check_sampler
from .verdict import Check, Verdict

__all__ = ["ATOL", "Check", "Verdict", "adapters", "check_attention", "check_generator", "check_given_uniforms",
           "check_sampler", "known_bugs", "stats"]
