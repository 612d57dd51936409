"""A small LLM inference service on the CPU, instrumented stage by stage.

A 4-layer, 3.5 M-parameter decoder-only transformer in numpy (random weights from a fixed
seed, byte-level tokens, KV cache, greedy decoding) served by a continuous-batching engine
behind OpenAI-compatible endpoints. Each request records ``tokenize``, one ``prefill`` over
the prompt, one ``decode`` per further token (the batched step it was part of) and the
markers of its output, with the FLOPs and bytes of prefill and decode annotated, so the
roofline shows prefill compute-bound and decode bandwidth-bound, and the portrait's ``llm``
section its TTFT, TPOT and goodput.

    loadprobe record -o data -- python -m loadprobe.samples.llm.serve --port 8001
    loadprobe load http://127.0.0.1:8001 --openai --rate 1 --duration 30 --record client
    loadprobe analyze data/ client/

Modules: ``model`` (the transformer and its cost model), ``batching`` (the engine),
``engine`` (the one-request loop), ``serve`` (the HTTP app). See README.md here.
"""
