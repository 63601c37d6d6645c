"""`python -m framework.servers.llamacpp_spec ARGS`: llama-cpp-python's server (same flags) with `GET /metrics`."""

from __future__ import annotations

from typing import Any

from framework.servers.llamacpp_spec.counting import COUNTERS, install


def main() -> None:
    install()
    import llama_cpp.server.__main__ as server_main
    from starlette.responses import PlainTextResponse

    create_app = server_main.create_app

    def app_with_metrics(*args: Any, **kwargs: Any) -> Any:
        app = create_app(*args, **kwargs)

        @app.get("/metrics", include_in_schema=False)
        def metrics() -> PlainTextResponse:
            return PlainTextResponse(COUNTERS.prometheus(), media_type="text/plain; version=0.0.4")

        return app

    server_main.create_app = app_with_metrics
    server_main.main()


if __name__ == "__main__":
    main()
