"""Recipe: check SGLang's speculative generation end to end with minibass's oracle.

    python scripts/oracle_sglang.py

Needs a CUDA GPU and SGLang installed (minibass does not depend on it). SGLang verifies drafts
with ``tree_speculative_sampling_target_only`` (sgl-kernel), whose inputs describe a draft tree;
the stable way in is its public ``Engine`` with a separate draft model (algorithm
``STANDALONE``; a chain, top-k 1), checked with ``oracle.check_generator``. Engine arguments
move between SGLang versions: if one is refused, adapt this file, not the oracle.
"""

from __future__ import annotations

import argparse
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


EXIT_STATUS = ("exit status: 0 the engine passed the oracle, 1 it failed, 2 a usage error, 3 SGLang or a CUDA GPU "
               "is missing (nothing was checked)")


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                            epilog=EXIT_STATUS).parse_args()
    missing = oracle.adapters.gpu_engine_missing("sglang")
    if missing:  # not a failing engine: say so, and check nothing
        print(f"this recipe needs SGLang and a CUDA GPU ({missing}): nothing was checked", file=sys.stderr)
        sys.exit(3)
    # n_tokens above the 3 draft steps, so that the bonus token after 3 accepted drafts is tested
    verdict = oracle.check_generator(sglang_generator, n_tokens=8, head_dim=64, name="sglang Engine + draft model")
    print(verdict)
    sys.exit(0 if verdict.ok else 1)
