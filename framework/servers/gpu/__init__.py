"""A real GPU server behind SGLang's API: a Llama-architecture decoder in PyTorch with seeded random weights.

``python -m framework.servers.gpu`` is launched like the sim and SGLang (same flags, same HTTP layer, same
metrics); only the engine differs: real prefill and decode on a KV cache, CUDA graphs, tensor parallelism
over NCCL or torch symmetric memory, and a speculative verify pass with a small real draft model.
"""
