"""Alias kept for `python -m framework.tiny_gguf`: the generator lives in :mod:`framework.assets.tiny_gguf`."""

if __name__ == "__main__":
    import runpy

    runpy.run_module("framework.assets.tiny_gguf", run_name="__main__", alter_sys=True)
