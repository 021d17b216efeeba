"""Recipe: check SGLang's speculative generation end to end with minibass's oracle.

    python scripts/oracle_sglang.py

Needs a CUDA GPU and SGLang installed (minibass does not depend on it). SGLang verifies drafts
with ``tree_speculative_sampling_target_only`` (sgl-kernel), whose inputs describe a draft tree;
the stable way in is its public ``Engine`` with a separate draft model (algorithm
``STANDALONE``; a chain, top-k 1), checked with ``oracle.check_generator``. Engine arguments
move between SGLang versions: if one is refused, adapt this file, not the oracle.
"""

from __future__ import annotations

import importlib
import sys

from minibass import oracle


def sglang_generator(target_dir, draft_dir, prompt, n_tokens, n_samples, sampling, seed):
    import sglang

    engine = sglang.Engine(model_path=str(target_dir), dtype="float32", skip_tokenizer_init=True, random_seed=seed,
                           speculative_algorithm="STANDALONE", speculative_draft_model_path=str(draft_dir),
                           speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4)
    params = {"temperature": sampling.temperature, "top_k": sampling.top_k or -1, "top_p": sampling.top_p,
              "max_new_tokens": n_tokens, "min_new_tokens": n_tokens, "ignore_eos": True}
    try:
        outputs = engine.generate(input_ids=[list(prompt)] * n_samples, sampling_params=params)
        return [list(o["output_ids"]) for o in outputs]
    finally:
        engine.shutdown()


if __name__ == "__main__":
    try:
        importlib.import_module("sglang")  # a missing engine is not a failing engine: say so, not FAIL
    except ImportError as error:
        print(f"this recipe needs SGLang and a CUDA GPU ({error})", file=sys.stderr)
        sys.exit(2)
    # n_tokens above the 3 draft steps, so that the bonus token after 3 accepted drafts is tested
    verdict = oracle.check_generator(sglang_generator, n_tokens=8, head_dim=64, name="sglang Engine + draft model")
    print(verdict)
    sys.exit(0 if verdict.ok else 1)
