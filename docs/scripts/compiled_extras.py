"""The smaller outputs quoted in docs/compiled.md (besides compiled_page.sh and breaks_page.sh):

  python docs/scripts/compiled_extras.py bert    # eager (dynamo) against compiled, by scope at depth 2, a small HF BERT
  python docs/scripts/compiled_extras.py print   # the header of the print model of tests/benchmarks/compiled_breaks.py
  python docs/scripts/compiled_extras.py reuse   # profiling the same compiled resnet18 twice, then a session of it

CPU, one thread.
"""
import os
import sys
import tempfile
import time

import torch

import fxprof

torch.set_num_threads(1)
what = sys.argv[1] if len(sys.argv) > 1 else "bert"

if what == "bert":
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                     intermediate_size=128, vocab_size=1000)
    model = transformers.BertModel(config).eval()
    ids = torch.randint(0, 1000, (1, 16))
    out = tempfile.mkdtemp()
    eager = fxprof.profile(model, ids, capture="dynamo", iters=5)
    compiled = fxprof.profile(model, ids, compile=True, iters=5)
    eager.save(os.path.join(out, "bert_eager.json"))
    compiled.save(os.path.join(out, "bert_compiled.json"))
    os.chdir(out)
    from fxprof.cli.app import main  # the CLI's compare, on the two files

    main(["compare", "bert_eager.json", "bert_compiled.json", "--by", "scope", "--depth", "2",
          "--columns", "a_ms,b_ms,speedup,a_nodes,b_nodes,folded"])
elif what == "print":
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "benchmarks"))
    from compiled_breaks import model_for

    model, x = model_for("print")
    torch._dynamo.reset()
    prof = fxprof.profile(model, x, compile=True, warmup=3, iters=20)
    print(prof.summary(top=0))
elif what == "reuse":
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    x = torch.randn(1, 3, 32, 32)
    for i in range(2):
        start = time.perf_counter()
        prof = fxprof.profile(torch.compile(model), x, iters=3, warmup=1)
        took = time.perf_counter() - start
        print(f"### profile {i + 1}: {took:.1f} s, compile_s {prof.meta['compiled']['compile_s']:.1f}")
        print("\n".join(line for line in prof.summary(top=0).splitlines()
                        if line.startswith(("compiled program:", "note: reused"))))
    unique = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    start = time.perf_counter()
    with torch.no_grad(), fxprof.session(torch.compile(model)) as s:
        for _ in range(3):
            s.model(x)
            s.step()
    print(f"### session: {time.perf_counter() - start:.1f} s for 3 steps; unique_graphs {unique} -> "
          f"{torch._dynamo.utils.counters['stats']['unique_graphs']}")
