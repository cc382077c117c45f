"""docs/integrations.md's Hugging Face example: a tiny Llama (built from its config, nothing
downloaded) trained by the real Trainer with FxprofCallback, gradient accumulation 2, the default
schedule (4 eager steps, 2 warm-up, 3 timed).

    python docs/scripts/hf_trainer_example.py [OUTPUT_DIR]

Prints the profile's header and top rows, the files written and the log entry that carries the
figures."""

from __future__ import annotations

import sys
import tempfile

import torch
import transformers

from fxprof.integrations.transformers import FxprofCallback

output_dir = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp()
transformers.logging.set_verbosity_error()
torch.manual_seed(0)
model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    vocab_size=256))
g = torch.Generator().manual_seed(1)
data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 256, (96, 32), generator=g)]
callback = FxprofCallback()
args = transformers.TrainingArguments(output_dir=output_dir, use_cpu=True, report_to=[], seed=0, max_steps=10,
                                      logging_steps=5, per_device_train_batch_size=4, gradient_accumulation_steps=2,
                                      save_strategy="no", disable_tqdm=True)
trainer = transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[callback])
trainer.train()
(profile,) = callback.profiles
print()
print(profile.summary(top=8))
print()
print("\n".join(callback.paths))
print([h for h in trainer.state.log_history if "fxprof/run_ms" in h][0])
