"""One rank of tests/integrations/test_transformers.py's torchrun job: the Hugging Face Trainer with
DDP on gloo (CPU), a tiny Llama trained without and then with FxprofCallback; writes rank<N>.json
(the losses of both runs, the profiles this rank holds, the files it wrote)."""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist
import transformers

import fxprof
from fxprof.integrations.transformers import FxprofCallback


def train(folder, callbacks):
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=256))
    g = torch.Generator().manual_seed(1)
    data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 256, (32, 16), generator=g)]
    args = transformers.TrainingArguments(
        output_dir=folder, use_cpu=True, report_to=[], seed=0, max_steps=4, logging_steps=1, ddp_backend="gloo",
        per_device_train_batch_size=2, gradient_accumulation_steps=2, save_strategy="no", disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=callbacks)
    trainer.train()
    return trainer


def main() -> None:
    out = sys.argv[1]
    transformers.logging.set_verbosity_error()
    plain = train(os.path.join(out, "plain"), [])
    callback = FxprofCallback(fxprof.schedule(warmup=1, active=2), html=False)
    profiled = train(os.path.join(out, "profiled"), [callback])
    rank = dist.get_rank()
    record = {
        "rank": rank,
        "wrapped": type(profiled.model_wrapped).__name__,
        "plain_losses": [h.get("loss") for h in plain.state.log_history],
        "losses": [h.get("loss") for h in profiled.state.log_history],
        "profiles": [{"ranks": p.meta.get("ranks"), "run_steps": p.meta.get("run_steps"),
                      "ddp_rows": sorted(p.df.index[p.df["role"].astype(str) == "ddp"]),
                      "scopes": sorted({str(s) for s in p.df["scope"]})} for p in callback.profiles],
        "paths": callback.paths,
        "weights_equal": all(torch.equal(a, b) for a, b in zip(plain.model.state_dict().values(),
                                                               profiled.model.state_dict().values())),
    }
    with open(os.path.join(out, f"rank{rank}.json"), "w") as handle:
        json.dump(record, handle)


if __name__ == "__main__":
    main()
