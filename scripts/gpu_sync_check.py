"""A decode step of minibass's decoder under ``torch.cuda.set_sync_debug_mode("error")``.

Any host synchronisation inside ``Decoder.forward`` (``.item()``, ``.tolist()``, ``int(t)`` on a
CUDA tensor, a data-dependent shape, a blocking copy) raises. Run on a GPU machine:
    PYTHONPATH=. python scripts/gpu_sync_check.py
"""

import argparse
import sys
import tempfile
import traceback

import torch

argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
if not torch.cuda.is_available():
    sys.exit("error: this check needs a CUDA GPU, and torch sees none here")

import minibass  # noqa: E402 (after the check, so that --help and the refusal come at once)
from minibass.bench.common import random_llama  # noqa: E402

with tempfile.TemporaryDirectory() as folder:
    model = minibass.load_model(random_llama(folder, layers=2, hidden=128, heads=4, kv_heads=2), device="cuda")
failed = []
for backend in ["padded", "split", "ragged", None]:  # every backend, even after one fails
    name = backend or "default"
    cache = model.init_cache(3, 64)
    model.forward(torch.tensor(list(range(5, 17))), torch.tensor([5, 4, 3]), cache, attention=backend)  # prefill
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for q_lens in ([1, 1, 1], [3, 0, 2]):  # a decode step, then a ragged verify-like step with an idle sequence
            model.forward(torch.arange(sum(q_lens)), torch.tensor(q_lens), cache, attention=backend)
    except RuntimeError:
        failed.append(name)
        print(f"{name}: FAILED, a host synchronisation inside the step:\n{traceback.format_exc(limit=-3)}")
        continue
    finally:
        torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()
    print(f"{name}: decode and ragged steps ran with no host synchronisation")
sys.exit(f"host synchronisation in: {', '.join(failed)}" if failed else 0)
