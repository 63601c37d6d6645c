"""llama-cpp-python's server with prompt-lookup speculation counted: drafted and accepted tokens (issue 34).

llama-cpp-python 0.3.36 evaluates prompt-lookup proposals inside `Llama.generate` and reports nothing of
them. This wrapper runs its server unchanged (`python -m framework.servers.llamacpp_spec` takes the same
flags as `python -m llama_cpp.server`) with a counting subclass of
`llama_cpp.llama_speculative.LlamaPromptLookupDecoding` and a counter of the target's evaluations, and
serves the counts on `GET /metrics` (Prometheus text, `llamacpp_spec:` names), which the run reads at each
launch's end (the backend row `llamacpp_spec`, framework/execution/backends.py). See `counting`.
"""
