"""Recipe: check vLLM's rejection sampler and its speculative generation with minibass's oracle.

    python scripts/oracle_vllm.py sampler      # vLLM v1's rejection_sample, through an adapter
    python scripts/oracle_vllm.py generator    # vLLM's LLM with a draft model, end to end

Needs a CUDA GPU and vLLM installed (minibass does not depend on it). Written against vLLM v1's
``vllm.v1.sample.rejection_sampler.rejection_sample(draft_token_ids, num_draft_tokens,
max_spec_len, cu_num_draft_tokens, draft_probs, target_probs, bonus_token_ids,
sampling_metadata)``, a flattened ragged layout: row b's k drafts are entries
``cu_num_draft_tokens[b-1]:cu_num_draft_tokens[b]``; the output is ``[B, k + 1]`` with accepted
drafts, then the recovered or bonus token, then -1 placeholders. Internal APIs move between vLLM
versions: if an import or a keyword fails, adapt the adapter below, not the oracle.
"""

from __future__ import annotations

import argparse
import sys
import types

import torch

from minibass import oracle


def vllm_sampler(draft_tokens, draft_probs, target_probs, *, generator=None):
    """vLLM's rejection_sample in rejection_sample's signature (probabilities already warped by the oracle)."""
    from vllm.v1.sample.rejection_sampler import rejection_sample

    batch, k = draft_tokens.shape
    device = "cuda"
    if generator is not None:  # vLLM draws from the global CUDA stream unless given per-request generators
        torch.cuda.manual_seed(int(torch.randint(0, 2**62, (1,), generator=generator)))
    rows = torch.arange(batch)
    # vLLM takes the bonus token as an input (sampled outside): draw it from p_{k+1} as the oracle would.
    bonus = torch.multinomial(target_probs[rows, k].double(), 1, generator=generator)
    metadata = types.SimpleNamespace(all_greedy=False, all_random=True, temperature=torch.ones(batch, device=device),
                                     generators={}, top_k=None, top_p=None)
    out = rejection_sample(
        draft_tokens.reshape(-1).to(device).contiguous(), [k] * batch, k,
        torch.arange(1, batch + 1, device=device, dtype=torch.int32) * k,
        draft_probs.reshape(batch * k, -1).float().to(device).contiguous(),
        target_probs[:, :k].reshape(batch * k, -1).float().to(device).contiguous(),
        bonus.to(device).contiguous(), metadata).cpu().long()
    emitted = (out != -1).sum(1)  # (B,): accepted drafts + 1
    return emitted - 1, out[rows, emitted - 1]


def vllm_generator(target_dir, draft_dir, prompt, n_tokens, n_samples, sampling, seed):
    """vLLM's offline LLM with a draft model (method 'draft_model'; older versions: drop 'method')."""
    from vllm import LLM, SamplingParams

    llm = LLM(model=str(target_dir), dtype="float32", skip_tokenizer_init=True, seed=seed, enforce_eager=True,
              speculative_config={"method": "draft_model", "model": str(draft_dir), "num_speculative_tokens": 3})
    params = SamplingParams(temperature=sampling.temperature, top_k=sampling.top_k or -1, top_p=sampling.top_p,
                            max_tokens=n_tokens, min_tokens=n_tokens, ignore_eos=True, detokenize=False)
    outputs = llm.generate([{"prompt_token_ids": list(prompt)}] * n_samples, params)
    return [list(o.outputs[0].token_ids) for o in outputs]


EXIT_STATUS = ("exit status: 0 the engine passed the oracle, 1 it failed, 2 a usage error, 3 vLLM or a CUDA GPU "
               "is missing (nothing was checked)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=EXIT_STATUS)
    parser.add_argument("kind", nargs="?", default="sampler", choices=["sampler", "generator"])
    kind = parser.parse_args().kind
    missing = oracle.adapters.gpu_engine_missing("vllm")
    if missing:  # not a failing engine: say so, and check nothing
        print(f"this recipe needs vLLM and a CUDA GPU ({missing}): nothing was checked", file=sys.stderr)
        sys.exit(3)
    if kind == "sampler":
        verdict = oracle.check_sampler(vllm_sampler, name="vllm rejection_sample")
    else:  # vLLM's attention kernels want head_dim 64 or more
        # n_tokens above the 3 speculative tokens, so that the bonus token after 3 accepted drafts is tested
        verdict = oracle.check_generator(vllm_generator, n_tokens=8, head_dim=64, name="vllm LLM + draft model")
    print(verdict)
    sys.exit(0 if verdict.ok else 1)
