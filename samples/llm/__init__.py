"""A small LLM inference service on the CPU, instrumented stage by stage.

A 4-layer, 3.5 M-parameter decoder-only transformer in numpy (random weights from a fixed
seed, byte-level tokens, KV cache, greedy decoding) behind a FastAPI endpoint. Each
request records ``tokenize``, one ``prefill`` over the prompt, one ``decode`` per further
generated token and ``detokenize``, with the FLOPs and bytes of prefill and decode
annotated, so the roofline shows prefill compute-bound and decode bandwidth-bound.

    loadprobe record -o data -- python -m loadprobe.samples.llm.serve --port 8001
    loadprobe load http://127.0.0.1:8001/generate --rate 20 --duration 30 \\
        --body '{"prompt": "The quick brown fox", "max_new_tokens": 32}'
    loadprobe analyze data/

Modules: ``model`` (the transformer and its cost model), ``engine`` (the instrumented
generation loop), ``serve`` (the HTTP app). See README.md here.
"""
